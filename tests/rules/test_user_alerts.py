"""The thresholds of the alerts on what users feel (group poolscope.alerts.users) keep the
promises their meanings make: the objective lets one request in five failing for twenty
minutes page in time, and the queue-wait figures are bounds the Proxy's histogram
resolves. The alerts' own cases
are rules/tests/poolscope.alerts.users.yml; the example on a whole fleet,
tests/rules/test_alert_fleets.py."""

from __future__ import annotations

from poolscope.contract import thresholds as t
from poolscope.exporters.proxy.histogram import QUEUE_WAIT_BUCKETS


def test_one_request_in_five_failing_for_twenty_minutes_pages_within_them() -> None:
    """Over the fast burn's long window, twenty minutes of a fifth failing (less the
    `for:`, and on an hour of healthy traffic before) is past the paging ratio."""
    paging_ratio = t.ERROR_BURN_FAST * (1 - t.ERROR_OBJECTIVE)
    failing_s = 20 * 60 - t.ALERT_USERS_FAILING_S
    assert 0.2 * failing_s / t.ERROR_WINDOW_FAST_S > paging_ratio


def test_the_short_windows_are_a_twelfth_of_the_long_ones() -> None:
    assert t.ERROR_WINDOW_FAST_SHORT_S * 12 == t.ERROR_WINDOW_FAST_S
    assert t.ERROR_WINDOW_SLOW_SHORT_S * 12 == t.ERROR_WINDOW_SLOW_S
    assert t.ERROR_BURN_SLOW < t.ERROR_BURN_FAST


def test_the_queue_figures_are_bounds_of_the_queue_wait_histogram() -> None:
    """The quantile's comparison with the objective is exact only at a bound; a stuck
    request is one older than the histogram's last bound."""
    assert t.QUEUE_WAIT_OBJECTIVE_S in QUEUE_WAIT_BUCKETS
    assert QUEUE_WAIT_BUCKETS[-1] == t.QUEUE_STUCK_S
