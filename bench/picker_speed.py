"""How long PoolPicker.pick() takes, per decision, by the number of pools.

    python -m bench.picker_speed [--pools 10,100,1000] [--picks 3000]

A Scheduler calls pick() once per request, so its cost is the Scheduler's CPU per
request: at 1,000 requests a second a replica spends pick()'s microseconds times 1,000
each second. Each pool is scored on every pick (its own count now over what was last
measured), so the cost grows with the pools; what a measurement says is worked out
once when it arrives, not on every pick. The fleet: pools of 2-16 slots, a summary of
all of them and a load report of every other one, 200 requests in flight, three
replicas (the others' change is counted).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import deque
from collections.abc import Sequence

from bench.scheduling.argtypes import positive_ints
from poolscope.scheduler_bridge.client import BridgeSnapshot, parse_pool
from poolscope.scheduler_bridge.load_report import receive_report
from poolscope.scheduler_bridge.picker import Placement, PoolPicker

IN_FLIGHT = 200


def per_pick_us(pools: int, picks: int, seed: int = 1) -> float:
    rng = random.Random(seed)
    now = [1000.0]
    capacities = {f"pool-{i}": float(rng.choice((2, 4, 8, 16))) for i in range(pools)}
    picker = PoolPicker(capacities, replicas=3, rng=rng, clock=lambda: now[0])
    docs = {p: {"schema_version": 1, "proxy_id": p, "generated_at": 1000.0,
                "load": {"capacity": c, "inflight_total": float(rng.randint(0, int(c))),
                         "inflight_sampled_at": 998.0}} for p, c in capacities.items()}
    picker.summary_received(BridgeSnapshot(1000.0, False, 1.0,
                                           {p: parse_pool(d) for p, d in docs.items()}, 1000.0))
    for doc in list(docs.values())[::2]:
        picker.report_received(receive_report(doc, now[0]))
    placed: deque[Placement] = deque()
    started = time.perf_counter()
    for _ in range(picks):
        now[0] += 0.0005
        placed.append(picker.pick())
        if len(placed) > IN_FLIGHT:
            picker.finished(placed.popleft())
    return (time.perf_counter() - started) / picks * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.picker_speed",
                                description=__doc__.splitlines()[0])
    p.add_argument("--pools", type=positive_ints, default=(10, 100, 1000))
    p.add_argument("--picks", type=int, default=3000, help="decisions timed per fleet size")
    args = p.parse_args(argv)
    if args.picks < 1:
        p.error("--picks must be at least 1")
    print(f"{'pools':>6} {'us/pick':>9} {'cores at 1,000 picks/s':>23}")
    for pools in args.pools:
        us = per_pick_us(pools, args.picks)
        print(f"{pools:>6} {us:>9.0f} {us / 1000:>23.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
