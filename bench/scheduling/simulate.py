"""The closed loop as a discrete-event simulation: the same policies, at any scale.

    python -m bench.scheduling.simulate [--pools 3|N] [--slots 2,4,8,16] [--replicas 1,3,10]
        [--load SHARE | --rate RPS] [--interval 5] [--ttl 1] [--duration S]
        [--seeds 1,2,3] [--clock-offset S] [--outage START,LENGTH] [--mixed SHARE]
        [--policies oracle,weighted,...] [--unaware] [--validate] [--json PATH]

The loop (python -m bench.scheduling) measures three pools in real time; this asks the
same policy objects (bench/scheduling/policies.py, the product's PoolPicker among
them) what they do with a hundred pools, ten Scheduler replicas, a skewed clock or a
bridge outage, in seconds. bench/scheduling/sim_engine.py says what the model keeps
of the real stack. The defaults are the loop's cell: 3 pools of 8, 4 and 2 slots, the
local traffic on pool-b, 70 % of capacity, a 5 s interval, the bridge read every 1 s,
30 s; --validate runs the loop's headline comparison on it (seeds 1-3, one and three
replicas), to set beside docs/scheduling.md.

One row per (scenario, policy, seed): the Scheduler's requests, their latency (mean,
p99), queue wait (latency less the request's own decode time: mean, p99), the mean and
the queue-wait p99 over the oracle's in the same scenario and seed, and how many
requests the picker placed on each basis (report / summary / own_count).
--unaware adds, beside each picker policy, the same picker told it is alone
(replicas=1): what the `replicas` option buys.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench.scheduling.argtypes import floats, names, outage, positive_ints
from bench.scheduling.outcome import percentile
from bench.scheduling.policies import POLICIES, Picker
from bench.scheduling.sim_engine import Result, simulate
from bench.scheduling.sim_workload import CAPACITY_CHOICES, SERVICE_S, Scenario, Workload, draw
from poolscope.scheduler_bridge.picker import Basis

# least_saturation reads a field the model does not produce (it would fall back to
# capacity weights and be reported as if it had ranked).
SIMULATED = tuple(p for p in POLICIES if p != "least_saturation")
DEFAULT_POLICIES = ("oracle", "weighted", "least_load", "picker", "picker_heartbeat",
                    "picker_p2c")
VALIDATION_POLICIES = ("oracle", "weighted", "least_load", "picker", "picker_heartbeat")
UNAWARE = ":unaware"


@dataclass(frozen=True)
class Row:
    scenario: Scenario
    capacity: int  # slots, every pool together
    offered_load: float
    scheduler_rate: float
    policy: str
    requests: int
    latency_mean: float
    latency_p99: float
    queue_wait_mean: float
    queue_wait_p99: float
    bases: dict[str, int]
    cpu_s: float
    mean_over_oracle: float | None = None
    queue_wait_p99_over_oracle: float | None = None
    outage_mean: float | None = None  # of the requests that arrived during the outage


def _outage_mean(scenario: Scenario, workload: Workload, result: Result) -> float | None:
    if scenario.outage is None:
        return None
    begin, length = scenario.outage
    arrivals = [t for t, pool in zip(workload.times, workload.local_pool, strict=True)
                if pool < 0]
    inside = [lat for t, lat in zip(arrivals, result.latency, strict=True)
              if begin <= t < begin + length]
    return statistics.fmean(inside) if inside else None


def _row(scenario: Scenario, workload: Workload, policy: str, result: Result,
         cpu_s: float) -> Row:
    bases: Counter[Basis] = Counter()
    for replica in result.replicas:
        if isinstance(replica, Picker):
            bases += replica.picker.stats.placed
    return Row(scenario, sum(workload.capacities), workload.offered_load,
               workload.scheduler_rate, policy, len(result.latency),
               statistics.fmean(result.latency), percentile(result.latency, 99),
               statistics.fmean(result.queue_wait), percentile(result.queue_wait, 99),
               {b.value: bases[b] for b in Basis}, cpu_s,
               outage_mean=_outage_mean(scenario, workload, result))


def _over(value: float, oracle: float) -> float | None:
    return value / oracle if oracle > 0 else None


def run_scenario(scenario: Scenario, policies: Sequence[str], unaware: bool = False
                 ) -> list[Row]:
    """Every policy through one scenario (the same workload), with the oracle's ratios
    where the oracle is among them; `unaware` adds each picker policy told it is alone."""
    workload = draw(scenario)
    runs = [(p, False) for p in policies]
    if unaware and scenario.replicas > 1:
        runs += [(p, True) for p in policies if issubclass(POLICIES[p], Picker)]
    rows = []
    for policy, alone in runs:
        started = time.process_time()
        result = simulate(scenario, workload, policy, unaware=alone)
        rows.append(_row(scenario, workload, policy + (UNAWARE if alone else ""), result,
                         time.process_time() - started))
    oracle = next((r for r in rows if r.policy == "oracle"), None)
    if oracle is None:
        return rows
    return [replace(r, mean_over_oracle=_over(r.latency_mean, oracle.latency_mean),
                    queue_wait_p99_over_oracle=_over(r.queue_wait_p99, oracle.queue_wait_p99))
            for r in rows]


def describe(rows: Sequence[Row]) -> str:
    """The scenario behind a group of rows, as one comment line."""
    s, r = rows[0].scenario, rows[0]
    outage = "-" if s.outage is None else f"{s.outage[0]:g}+{s.outage[1]:g} s"
    return (f"# {s.pools} pools ({r.capacity} slots), {s.replicas} replicas, seed {s.seed}: "
            f"Scheduler {r.scheduler_rate:.2f}/s, offered {r.offered_load:.0%} of capacity; "
            f"interval {s.interval_s:g} s, ttl {s.ttl_s:g} s, {s.duration_s:g} s, clock offset "
            f"{s.clock_offset_s:+g} s, outage {outage}, reporting {s.mixed:.0%}")


HEADER = ("pools rep seed policy                      reqs   mean    p99 qwmean   qw99 "
          "mean/or qw99/or  report summary    own  cpu_s outage")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def line(row: Row) -> str:
    s = row.scenario
    return (f"{s.pools:>5} {s.replicas:>3} {s.seed:>4} {row.policy:<24} {row.requests:>7} "
            f"{row.latency_mean:>6.2f} {row.latency_p99:>6.2f} {row.queue_wait_mean:>6.2f} "
            f"{row.queue_wait_p99:>6.2f} {_ratio(row.mean_over_oracle):>7} "
            f"{_ratio(row.queue_wait_p99_over_oracle):>7} {row.bases['report']:>7} "
            f"{row.bases['summary']:>7} {row.bases['own_count']:>6} {row.cpu_s:>6.1f} "
            f"{_ratio(row.outage_mean):>6}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scheduling.simulate",
                                description=__doc__.splitlines()[0])
    p.add_argument("--pools", type=int, default=3,
                   help="3: the loop's 8, 4 and 2 slots; N: capacities drawn from --slots")
    p.add_argument("--slots", type=positive_ints, default=CAPACITY_CHOICES,
                   help="an N-pool fleet's capacities, each drawn from these "
                        "(default %(default)s)")
    p.add_argument("--replicas", type=positive_ints, default=(1,), help="Scheduler replicas")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--load", type=float, default=0.7,
                      help="share of capacity offered, the local traffic included")
    load.add_argument("--rate", type=float, default=None,
                      help="the Scheduler's requests/s (the local traffic comes on top)")
    p.add_argument("--service", type=floats, default=SERVICE_S, metavar="SHORT,LONG",
                   help="a short and a long request's seconds in a slot: the loop's "
                        "calibration, to meet the arrivals of its run (default %(default)s)")
    p.add_argument("--interval", type=float, default=5.0, help="scrape and evaluation, s")
    p.add_argument("--ttl", type=float, default=1.0, help="how often replicas read, s")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals")
    p.add_argument("--seeds", type=positive_ints, default=(1,))
    p.add_argument("--clock-offset", type=float, default=0.0,
                   help="every replica's clock less true time, s")
    p.add_argument("--outage", type=outage, default=None, metavar="START,LENGTH",
                   help="the bridge unreachable from START s for LENGTH s")
    p.add_argument("--mixed", type=float, default=1.0,
                   help="the share of pools whose Proxies send heartbeat reports")
    p.add_argument("--policies", type=names(SIMULATED), default=DEFAULT_POLICIES)
    p.add_argument("--unaware", action="store_true",
                   help="also run each picker policy told it is alone (replicas=1)")
    p.add_argument("--validate", action="store_true",
                   help="the loop's cell: 3 pools, 70%%, 5 s, ttl 1, 30 s, seeds 1-3, one "
                        "and three replicas, oracle, weighted, least_load and the picker "
                        "with and without reports (other options but --service and --json "
                        "ignored)")
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    if args.validate:
        args = p.parse_args(["--replicas", "1,3", "--seeds", "1,2,3", "--policies",
                             ",".join(VALIDATION_POLICIES),
                             "--service", ",".join(map(str, args.service)),
                             *(["--json", str(args.json)] if args.json else [])])
    if args.pools < 1 or not 0 <= args.mixed <= 1:
        p.error("--pools must be >= 1 and --mixed within 0..1")
    if len(args.service) != 2 or not 0 < args.service[0] <= args.service[1]:
        p.error("--service: SHORT,LONG seconds, 0 < SHORT <= LONG")
    return args


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    return [Scenario(pools=args.pools, replicas=n, load=args.load, rate=args.rate,
                     interval_s=args.interval, ttl_s=args.ttl, duration_s=args.duration,
                     seed=seed, clock_offset_s=args.clock_offset, outage=args.outage,
                     mixed=args.mixed, slots=args.slots, service_s=args.service)
            for n in args.replicas for seed in args.seeds]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    rows: list[Row] = []
    print(HEADER, flush=True)
    for scenario in scenarios(args):
        group = run_scenario(scenario, args.policies, args.unaware)
        print(describe(group), *map(line, group), sep="\n", flush=True)
        rows += group
    print(f"# {len(rows)} rows in {time.monotonic() - started:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
