"""Would a Scheduler that picks pools by the summary balance load well? Measured.

    python -m bench.scheduling [--quick] [--backends sim,llama] [--loads 0.5,0.7,0.9]
        [--intervals 1,2,5] [--policies ...] [--arrivals poisson,bursty]
        [--duration S] [--repeats N] [--cache-ttls 1] [--replicas 1,3]
        [--offsets=-0.5,0,0.5] [--outage START,LENGTH] [--reporting POOL,...]
        [--json PATH] [--plot PATH]

A closed loop on this machine (bench/scheduling/fleet.py): pools of 8, 4 and 2 slots
behind demo Proxies, real Instance exporters, a real Prometheus with `rules/` and the
real Scheduler bridge; the pool of 4 also takes local traffic the Scheduler does not
send, on and off every 10 s. Scheduler replicas (one stand-in each, the arrivals
spread over them at random) send an open-loop stream (one request in five long) at a
share of the fleet's capacity, each request to the pool one policy picks
(bench/scheduling/policies.py: the baselines, the oracle, and the product's picker),
and every request's latency, first token and queue wait is recorded. One row per
backend, arrival shape, load, interval, replicas, clock offset, policy and seed.
docs/scheduling.md has the results and what they mean.

The default sweep: on the simulated fleet at a 5 s interval, every policy at 70% with
one replica, and the headline policies (weighted, picker, picker_heartbeat, oracle)
with three; then those on llama.cpp at 70%, one and three replicas. --quick (about 3
minutes): weighted, least_load, picker and oracle at 70% and 5 s, simulated. Naming
--loads or --intervals runs exactly that grid instead. Policies that read no summary
run once per load and replica count (their interval column is "-").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from bench.scheduling.argtypes import floats, names, outage, positive_ints
from bench.scheduling.fleet import (
    LLAMA_POOLS,
    LOCAL_POOL,
    SIM_POOLS,
    TOKENS,
    Fleet,
    Monitoring,
    monitoring,
    running_fleet,
)
from bench.scheduling.loop import (
    Cell,
    Lengths,
    Record,
    calibrate,
    run_cell,
    wait_for_idle_summary,
)
from bench.scheduling.outcome import HEADER, Row, outcome
from bench.scheduling.policies import POLICIES
from bench.teardown import unwind_on_sigterm
from poolscope.scheduler_bridge.client import SchedulerBridgeClient


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scheduling",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="weighted, least_load, picker and oracle at 70%% and 5 s on the "
                        "simulated fleet (about 3 min)")
    p.add_argument("--backends", type=names(("sim", "llama")), default=None)
    p.add_argument("--loads", type=floats, default=None, help="shares of capacity")
    p.add_argument("--intervals", type=floats, default=None,
                   help="scrape and evaluation intervals, seconds")
    p.add_argument("--policies", type=names(tuple(POLICIES)), default=None)
    p.add_argument("--arrivals", type=names(("poisson", "bursty")), default=("poisson",))
    p.add_argument("--duration", type=float, default=15.0, help="seconds of arrivals a cell")
    p.add_argument("--repeats", type=int, default=1, help="seeds per cell")
    p.add_argument("--cache-ttls", type=floats, default=(1.0,),
                   help="the bridge's --cache-ttl, and how often the stand-in reads it")
    p.add_argument("--replicas", type=positive_ints, default=(1,),
                   help="Scheduler replicas sharing the arrivals")
    p.add_argument("--offsets", type=floats, default=(0.0,),
                   help="the Schedulers' clock less the other hosts', seconds")
    p.add_argument("--outage", type=outage, default=None, metavar="START,LENGTH",
                   help="stop the bridge that many seconds into each cell, for that long")
    p.add_argument("--reporting", type=lambda t: tuple(t.split(",")), default=None,
                   help="the pools whose Proxies send load reports (default: every pool)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every row and record here")
    p.add_argument("--plot", type=Path, help="latency over time at 70%% (PNG)")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    if not (args.duration > 0 and args.repeats >= 1):
        p.error("--duration must be > 0 and --repeats >= 1")
    if args.loads is not None and not all(0 < load < 2 for load in args.loads):
        p.error("--loads: shares of capacity above 0 and below 2")
    args.policies_given = args.policies is not None
    args.policies = args.policies or tuple(POLICIES)
    return args


@dataclass(frozen=True)
class Plan:
    """Which cells one backend runs, in order: those that read no summary, then those that
    do, grouped by (interval, cache TTL) so each Prometheus and bridge starts once."""

    backend: str
    cells: tuple[Cell, ...]

    @property
    def monitored(self) -> list[tuple[float, float]]:
        return sorted({(c.interval_s, c.ttl_s) for c in self.cells
                       if c.interval_s is not None and c.ttl_s is not None}, reverse=True)


# What --quick runs: the policies that tell the story (no metric, the summary as it
# stands, the picker, the limit).
CORE_POLICIES = ("weighted", "least_load", "picker", "oracle")
# The headline: the picker on the summary and with reports, against the oracle and
# capacity weights.
HEADLINE = ("weighted", "picker", "picker_heartbeat", "oracle")


def plans(args: argparse.Namespace) -> list[Plan]:
    def cells(load: float, intervals: Sequence[float], policies: Sequence[str],
              replicas: Sequence[int] = args.replicas) -> list[Cell]:
        chosen = [p for p in policies if p in args.policies]
        shapes = [(a, args.seed + r, n, o) for a in args.arrivals for r in range(args.repeats)
                  for n in replicas for o in args.offsets]
        blind = [Cell(p, load, None, a, seed, args.duration, replicas=n, offset_s=o)
                 for p in chosen if not POLICIES[p].reads_summary
                 for a, seed, n, o in shapes]
        return blind + [Cell(p, load, i, a, seed, args.duration, ttl, n, o, args.outage,
                             args.reporting)
                        for i in intervals for ttl in args.cache_ttls for p in chosen
                        if POLICIES[p].reads_summary for a, seed, n, o in shapes]

    if args.loads is not None or args.intervals is not None or args.quick:
        policies = CORE_POLICIES if args.quick and not args.policies_given else args.policies
        grid = [c for load in args.loads or (0.7,)
                for c in cells(load, args.intervals or (5.0,), policies)]
        return [Plan(b, tuple(grid)) for b in args.backends or ("sim",)]
    sim = cells(0.7, (5.0,), tuple(POLICIES), (1,)) + cells(0.7, (5.0,), HEADLINE, (3,))
    llama = cells(0.7, (5.0,), HEADLINE, (1, 3))
    return [Plan(b, tuple(c)) for b, c in (("sim", sim), ("llama", llama))
            if b in (args.backends or ("sim", "llama"))]


async def _run_plan(fleet: Fleet, plan: Plan, lengths: Lengths, args: argparse.Namespace,
                    out: list[tuple[Row, list[Record]]]) -> None:
    capacities = {p.spec.proxy_id: p.spec.capacity for p in fleet.pools}

    async def one(cell: Cell, mon: Monitoring | None) -> None:
        records, _ = await run_cell(fleet, mon, cell, lengths, LOCAL_POOL)
        row = Row(plan.backend, cell, outcome(records, lengths, capacities, args.outage))
        print(row.line(), flush=True)
        out.append((row, records))

    for cell in plan.cells:
        if cell.interval_s is None:
            await one(cell, None)
    for interval, ttl in plan.monitored:
        with monitoring(fleet, interval, ttl) as mon:
            async with aiohttp.ClientSession() as session:
                client = SchedulerBridgeClient(mon.bridge_url, session)
                for cell in plan.cells:
                    if (cell.interval_s, cell.ttl_s) != (interval, ttl):
                        continue
                    # The previous cell's tail out of the summary (and, first, a summary).
                    if not await wait_for_idle_summary(client, list(capacities),
                                                       4 * interval + 60):
                        raise RuntimeError(f"the bridge showed no idle summary of every pool "
                                           f"at a {interval:g} s interval")
                    await one(cell, mon)


def _workdirs(args: argparse.Namespace, backend: str) -> Iterator[Path]:
    if args.workdir is not None:
        path = args.workdir / backend
        path.mkdir(parents=True, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix=f"poolscope-scheduling-{backend}-") as d:
            yield Path(d)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    unwind_on_sigterm()
    started = time.monotonic()
    results: list[tuple[Row, list[Record]]] = []
    calibrations: dict[str, Lengths] = {}
    print(HEADER, flush=True)
    for plan in plans(args):
        for workdir in _workdirs(args, plan.backend):
            specs = SIM_POOLS if plan.backend == "sim" else LLAMA_POOLS
            with running_fleet(plan.backend, specs, workdir) as fleet:
                lengths = asyncio.run(calibrate(fleet, *TOKENS[plan.backend]))
                calibrations[plan.backend] = lengths
                print(f"# {plan.backend}: under a full batch, short "
                      f"{lengths.service_s[0]:.2f} s, long {lengths.service_s[1]:.2f} s; capacity "
                      f"{sum(s.capacity for s in specs)} slots", flush=True)
                asyncio.run(_run_plan(fleet, plan, lengths, args, results))
    print(f"# {len(results)} cells in {time.monotonic() - started:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps({
            "calibration": {b: asdict(c) for b, c in calibrations.items()},
            "rows": [{**asdict(row), "records": [asdict(r) for r in records]}
                     for row, records in results]}, indent=0))
    if args.plot:
        from bench.scheduling.plot import latency_over_time
        for path in latency_over_time(results, args.plot):
            print(f"# wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
