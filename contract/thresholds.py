"""Every threshold Poolscope judges by, written once.

The exporters, the bridges and the dashboards import these; the rule files and
docs/thresholds.md are rendered from them by `python -m rules.render` (part of
`make generate`), and a test fails when a rendered copy drifts. The string under
each constant is its meaning, as docs/thresholds.md prints it.
"""

from __future__ import annotations

SCRAPE_INTERVAL_S = 5.0
"""How often the deploy configs scrape every target and evaluate the rules; the
freshness and rate bounds below are sized for it."""

FRESH_S = 3 * SCRAPE_INTERVAL_S
"""A sample is fresh for three scrape intervals: the Instance exporter serves no
older one, so a rule reading its series needs no freshness gate."""

IDLE_S = 300.0
"""An Instance the Proxy has not dispatched to for this long counts as idle."""

WAITING_Q = 5.0
"""Requests waiting inside an engine that make its queue full: the waiting side
of the engine's saturation (the Gateway API Inference Extension's default)."""

KV_FULL = 0.8
"""KV-cache usage that counts as saturated: the KV side of the engine's
saturation (the Gateway API Inference Extension's default)."""

MEMBER_MEMORY = "5m"
"""How long a self-declared member that stopped answering stays a (stale) member,
and how long a silent Proxy-side source keeps its pool from falling back."""

FORGET_AFTER_S = 600.0
"""How long a member the embedded Proxy registered may stay silent (no heartbeat) before
the Proxy forgets it with everything it kept about it: a member silent this long is gone
(a crashed pod never deregisters), and keeping it would grow the Proxy's page and the pool
counts with every member that ever existed. Until then it is stale. Longer than any
heartbeat timeout, which the Proxy checks at start-up."""

RATE_WINDOW_S = 60.0
"""The window of every rate the rules record (the `1m` in their names), and of each
rate an exporter states over its own samples (exporters/common/window_rate.py)."""

RATE_EDGE_S = SCRAPE_INTERVAL_S + 3.0
"""A rate is kept only while its window has a sample this close to each end: one
scrape interval, 3 s late at most. A gap in scrapes gives no rate instead of an
extrapolated one."""

RATE_EDGE_OFFSET_S = RATE_WINDOW_S - RATE_EDGE_S
"""How far back from a rate window's end its first RATE_EDGE_S begin."""

ADMISSION_KV_DEGRADED = 0.85
"""KV-cache usage at which an Instance's admission state is degraded."""

ADMISSION_KV_SATURATED = 0.95
"""KV-cache usage at which an Instance's admission state is saturated."""

ADMISSION_QUEUE_DEGRADED = 1.0
"""Engine waiting requests at which an Instance's admission state is degraded: one
waiting request already means the engine could not start it."""

ADMISSION_QUEUE_SATURATED = 8.0
"""Engine waiting requests at which an Instance's admission state is saturated."""

ADMISSION_MEMORY_DEGRADED = 0.10
"""Host memory available / total at or below which an Instance's admission state
is degraded."""

ADMISSION_MEMORY_SATURATED = 0.05
"""Host memory available / total at or below which an Instance's admission state
is saturated."""

RATIO_WARN = 0.8
"""The dashboards show a ratio whose healthy limit is 1 (load, saturation, queue
pressure) amber from here, red at 1."""

ALERT_INTERVAL_S = 3 * SCRAPE_INTERVAL_S
"""How often the alert groups evaluate: their windows are minutes, so evaluating them at a
third of the rollups' rate costs a third as much and delays an alert by seconds."""

ALERT_DOWN_S = 120.0
"""How long a scrape target stays down, a source silent, a pool's data missing, a pool
without an alive member or the Scheduler bridge without an answer before its alert
fires: a restart or a rolling update takes less."""

ALERT_FAILING_S = 300.0
"""How long a collector (an engine's: ALERT_ENGINE_LOAD_S) keeps failing, a GPU unhealthy,
or a pool's members stale before its alert fires: one failed read of a busy engine or
device is not a fault. Shorter than FORGET_AFTER_S less a heartbeat timeout, so a crashed
member is named before the Proxy forgets it."""

ALERT_ENGINE_LOAD_S = 1800.0
"""How long an engine collector keeps failing before its alert fires: an engine answers no
metrics page while it loads its model (a large model takes 10-20 minutes to load, longer
from a cold cache), and the exporter cannot tell a loading engine from a dead one, so a
shorter window pages at every cold start and rollout."""

ALERT_MEMORY_S = 6 * 3600.0
"""How long an alert whose input vanishes with its fault (a silent Proxy-side source's
membership, a pool's rollups, a dead pool's forgotten members) remembers the input, so it
keeps firing while the fault lasts instead of resolving once the input leaves the rules'
lookback; a fault older than this has been through a shift's hand-over, and the alert
then resolves (its runbook says so). A window over pool series only: one per pool."""

ALERT_MEMORY_INTERVAL_S = 60.0
"""How often what those alerts remember of each pool (its registered members, its members
counted, the members its Proxy forgot, its data missing) is recorded, once a minute, for
their ALERT_MEMORY_S windows to read: a window over the 5 s series themselves reads twelve
times the samples at every evaluation (4,320 per pool and input; measured,
docs/benchmarks.md)."""

ALERT_MEMORY_LIVE_S = 2 * ALERT_MEMORY_INTERVAL_S
"""How far back those alerts read the series themselves, beside the records: two record
intervals, so that while a minute's record is still being written (its group runs apart
from the alerts) an input that vanished is still in this window, and no alert drops out
for one evaluation between the two."""

ALERT_DEGRADED_S = 600.0
"""How long a pool may have alive members without fresh resource data (a data_quality
of partial for a cause that is a fault) before its alert fires."""

ALERT_SATURATED_S = 600.0
"""How long a pool stays saturated, or its Proxy keeps turning requests away, before
its alert fires: a burst the queues absorb is not a capacity problem."""

ALERT_ROLLUPS_S = 60.0
"""How long the rollups may be missing, late (older than FRESH_S: what the bridges serve
marked stale) or failing to evaluate before their alert fires."""

IDLE_GPUS_S = 3600.0
"""How long an Instance holding GPUs has had no dispatch before an info alert names it
as one to consider stopping (it is idle from IDLE_S on; this is a decision for a person)."""

ERROR_OBJECTIVE = 0.999
"""Share of a pool's requests its users should see succeed: `ok` over ok, error, timeout and
rejected at the embedded Proxy (a cancelled request is the client's choice and counts
neither way); the error budget is the rest. Not 0.99: with that budget the fast burn below
needs one request in seven failing for most of an hour, so one in five failing for twenty
minutes would page nobody."""

ERROR_BURN_FAST = 14.4
"""The error ratio, in multiples of the budget, that pages when it holds over both
ERROR_WINDOW_FAST_S and ERROR_WINDOW_FAST_SHORT_S: 2% of a 30-day budget spent in an hour
(the SRE workbook's multiwindow, multi-burn-rate alert)."""

ERROR_WINDOW_FAST_S = 3600.0
"""The fast burn's long window: long enough that a burst of errors does not page."""

ERROR_WINDOW_FAST_SHORT_S = ERROR_WINDOW_FAST_S / 12
"""The fast burn's short window, a twelfth of the long one: the errors must still be
happening, so the page resolves minutes after they stop, not an hour later."""

ERROR_BURN_SLOW = 6.0
"""The error ratio, in multiples of the budget, that opens a ticket when it holds over both
ERROR_WINDOW_SLOW_S and ERROR_WINDOW_SLOW_SHORT_S: 5% of a 30-day budget in six hours."""

ERROR_WINDOW_SLOW_S = 6 * 3600.0
"""The slow burn's long window: a steady error ratio too low to page."""

ERROR_WINDOW_SLOW_SHORT_S = ERROR_WINDOW_SLOW_S / 12
"""The slow burn's short window, a twelfth of the long one (as the fast burn's)."""

ERROR_RATES_INTERVAL_S = 60.0
"""How often each pool's failure and answer rates over ERROR_WINDOW_FAST_SHORT_S are
recorded for the burn-rate alerts, which average them over their windows: one sample a
minute per pool, where a rate() over six hours reads every scrape of every outcome
(0.5-1.3 s an evaluation at 100 pools, measured)."""

QUEUE_WAIT_OBJECTIVE_S = 2.5
"""The longest wait in a Proxy queue that QUEUE_WAIT_QUANTILE of requests should see: healthy
waits are milliseconds, and seconds of queueing come before any token. A bound of the
queue-wait histogram (exporters/proxy/histogram.py), so the quantile's comparison with it
is exact, not interpolated."""

QUEUE_WAIT_QUANTILE = 0.99
"""The share of queue waits held to QUEUE_WAIT_OBJECTIVE_S."""

QUEUE_WAIT_WINDOW_S = 300.0
"""The window the queue-wait quantile is computed over: a minute of a quiet pool holds too
few requests for a 99th percentile."""

QUEUE_STUCK_S = 60.0
"""How old the oldest request in a Proxy queue may be before its users count as failing.
The Proxy exposes no queue timeout of its own (the embedding proxy's, if any, shows as
rejections with reason `timeout`), so this stands for the clients': 60 s is a common HTTP
client and gateway read timeout (nginx's default), and the queue-wait histogram's last
bound."""

ALERT_USERS_FAILING_S = 120.0
"""How long a pool's users keep failing (errors burning the budget fast, a queue stuck, no
member admitting while requests arrive) before the page: one evaluation's noise or a
restart is not a fault, and every minute more is failed requests."""

ALERT_USERS_DEGRADED_S = 900.0
"""How long a pool burns its error budget slowly, or queues requests past
QUEUE_WAIT_OBJECTIVE_S, before a ticket is opened (kubernetes-mixin's window for its slow
burn)."""

ALERT_JOBS = ".*poolscope.*"
"""The scrape jobs whose targets the alerts watch, as a regex on `job`: the deploy
configs name every job poolscope-*, the Prometheus Operator <namespace>/poolscope-*."""

RUNBOOK_URL = "https://github.com/poolscope/poolscope/blob/main/docs/runbooks.md"
"""Where every alert's runbook_url points (one anchor per alert): change it where your
operators read the docs, then run `make generate`."""
