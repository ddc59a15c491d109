"""Would a Scheduler that picks pools by the summary balance load well? Measured.

    python -m bench.scheduling [--quick] [--backends sim,llama] [--loads 0.5,0.7,0.9]
        [--intervals 1,2,5] [--policies ...] [--arrivals poisson,bursty]
        [--duration S] [--repeats N] [--delays 0,10] [--json PATH] [--plot PATH]

A closed loop on this machine (bench/scheduling/fleet.py): pools of 8, 4 and 2 slots
behind demo Proxies, real Instance exporters, a real Prometheus with `rules/` and the
real Scheduler bridge; the pool of 4 also takes local traffic the Scheduler does not
send, on and off every 10 s. A Scheduler stand-in sends an open-loop stream (one
request in five long) at a share of the fleet's capacity, each request to the pool
one policy picks (bench/scheduling/policies.py), and every request's latency, first
token and queue wait is recorded. One row per backend, arrival shape, load, interval,
policy and repeat. docs/scheduling.md has the results and what they mean.

The default sweep: every policy at 50, 70 and 90% on the simulated fleet at a 5 s
interval; the summary policies at 1 and 2 s too, at 70%; then every policy on
llama.cpp at 70% and 5 s. --quick: every policy at 70% and 5 s, simulated only.
Policies that read no summary run once per load (their interval column is "-").
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

from bench.scheduling.fleet import LLAMA_POOLS, SIM_POOLS, Fleet, monitoring, running_fleet
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

LOCAL_POOL = "pool-b"
# Output tokens of a short and a long request, per backend: about 0.5 s and 5 s alone.
TOKENS = {"sim": (10, 100), "llama": (24, 240)}
TTL_S = 1.0  # the bridge's default cache TTL, and how often the stand-in reads it


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas: {e}") from e


def _names(allowed: Sequence[str]) -> argparse._ActionT:  # type: ignore[name-defined]
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(text.split(","))
        unknown = [n for n in names if n not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {list(allowed)}")
        return names
    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scheduling",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="every policy at 70%% and 5 s on the simulated fleet (under 4 min)")
    p.add_argument("--backends", type=_names(("sim", "llama")), default=None)
    p.add_argument("--loads", type=_floats, default=None, help="shares of capacity")
    p.add_argument("--intervals", type=_floats, default=None,
                   help="scrape and evaluation intervals, seconds")
    p.add_argument("--policies", type=_names(tuple(POLICIES)), default=tuple(POLICIES))
    p.add_argument("--arrivals", type=_names(("poisson", "bursty")), default=("poisson",))
    p.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals a cell")
    p.add_argument("--repeats", type=int, default=1, help="seeds per cell")
    p.add_argument("--delays", type=_floats, default=(0.0,),
                   help="seconds the summary policies' snapshots are held back (age study)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every row and record here")
    p.add_argument("--plot", type=Path, help="latency over time at 70%% (PNG)")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    if not (args.duration > 0 and args.repeats >= 1):
        p.error("--duration must be > 0 and --repeats >= 1")
    return args


@dataclass(frozen=True)
class Plan:
    """Which cells one backend runs: (load, interval or None, policy, delay)."""

    backend: str
    cells: tuple[tuple[float, float | None, str, float], ...]

    @property
    def intervals(self) -> list[float]:
        return sorted({c[1] for c in self.cells if c[1] is not None}, reverse=True)


def plans(args: argparse.Namespace) -> list[Plan]:
    summary = [p for p in args.policies if POLICIES[p].reads_summary]
    blind = [p for p in args.policies if not POLICIES[p].reads_summary]
    explicit = args.loads is not None or args.intervals is not None
    if args.quick or explicit:
        loads = args.loads or (0.7,)
        intervals = args.intervals or (5.0,)
        grid = [(load, None, p, 0.0) for load in loads for p in blind]
        grid += [(load, i, p, d) for load in loads for i in intervals for p in summary
                 for d in args.delays]
        return [Plan(b, tuple(grid)) for b in (args.backends or ("sim",))]
    sim = [(load, None, p, 0.0) for load in (0.5, 0.7, 0.9) for p in blind]
    sim += [(load, 5.0, p, d) for load in (0.5, 0.7, 0.9) for p in summary for d in args.delays]
    sim += [(0.7, i, p, d) for i in (2.0, 1.0) for p in ("least_load", "tracked")
            if p in summary for d in args.delays]
    llama = [(0.7, None, p, 0.0) for p in blind] + [(0.7, 5.0, p, 0.0) for p in summary]
    chosen = args.backends or ("sim", "llama")
    return [Plan(b, tuple(cells)) for b, cells in (("sim", sim), ("llama", llama))
            if b in chosen]


async def _run_plan(fleet: Fleet, plan: Plan, args: argparse.Namespace, lengths: Lengths,
                    out: list[tuple[Row, list[Record]]]) -> None:
    capacities = {p.spec.proxy_id: p.spec.capacity for p in fleet.pools}

    async def one(load: float, interval: float | None, policy: str, delay: float,
                  mon_url: str | None, mon: object) -> None:
        for arrivals in args.arrivals:
            for repeat in range(args.repeats):
                cell = Cell(policy, load, interval, arrivals, args.seed + repeat,
                            args.duration)
                records, _ = await run_cell(fleet, mon, POLICIES[policy](), cell, lengths,
                                            LOCAL_POOL, ttl_s=TTL_S, delay_s=delay)
                row = Row(plan.backend, cell, repeat, delay,
                          outcome(records, lengths, capacities))
                print(row.line(), flush=True)
                out.append((row, records))
                if mon_url is not None:
                    async with aiohttp.ClientSession() as session:
                        await wait_for_idle_summary(SchedulerBridgeClient(mon_url, session),
                                                    list(capacities), 4 * (interval or 1) + 10)

    for load, interval, policy, delay in plan.cells:
        if interval is None:
            await one(load, None, policy, delay, None, None)
    for interval in plan.intervals:
        with monitoring(fleet, interval, TTL_S) as mon:
            async with aiohttp.ClientSession() as session:
                client = SchedulerBridgeClient(mon.bridge_url, session)
                if not await wait_for_idle_summary(client, list(capacities), 60):
                    raise RuntimeError(f"no summary with every pool after 60 s at {interval}s")
            for load, cell_interval, policy, delay in plan.cells:
                if cell_interval == interval:
                    await one(load, interval, policy, delay, mon.bridge_url, mon)


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
                print(f"# {plan.backend}: alone, short {lengths.service_s[0]:.2f} s, long "
                      f"{lengths.service_s[1]:.2f} s; capacity "
                      f"{sum(s.capacity for s in specs)} slots", flush=True)
                asyncio.run(_run_plan(fleet, plan, args, lengths, results))
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
