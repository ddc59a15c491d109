"""Churn soak: an hour of a churning fleet in compressed time, and whether anything grows
with the members that ever existed rather than those alive now.

    python -m bench.churn_soak [--duration 600] [--rollout-period 60] [--crashes 6] \\
        [--pool-churn-period 90] [--sample-period 5] [--heartbeat-timeout 3] \\
        [--forget-after 20] [--router-models 2] [--samples DIR] [--plot PNG]

Members are replaced continuously (a rolling update of every long-lived pool per
rollout period, each new member a new instance_id), some crash without deregistering,
a short-lived pool is created and deleted each pool-churn period, and router-mode
models load and unload. Every component's RSS, open descriptors, series on its
/metrics, Prometheus' head series and the bridges' answer sizes are sampled; each
figure's median over the run's last quarter is compared with its median over a
warm-up window after the first full rollout. Exit 1, with a line naming each figure
that grew past --growth-bound; 2 for a bad flag. All durations are real seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.churn.report import failures, table, write_result, write_samples
from bench.churn.soak import Settings, run
from bench.teardown import unwind_on_sigterm
from poolscope.service.argtypes import non_negative_int, positive_float, positive_int

# Samples each compared window needs at least, for a median that one odd read cannot move.
MIN_WINDOW_SAMPLES = 3


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(prog="python -m bench.churn_soak",
                                description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=positive_float, default=d.duration_s, metavar="S",
                   help="seconds of churn (default %(default)g: an hour at six times speed)")
    p.add_argument("--rollout-period", type=positive_float, default=d.rollout_period_s,
                   metavar="S", help="each long-lived member is replaced once per period "
                   "(default %(default)g)")
    p.add_argument("--crashes", type=non_negative_int, default=d.crashes,
                   help="members killed without deregistering, spread over the run "
                   "(default %(default)d)")
    p.add_argument("--pool-churn-period", type=positive_float, default=d.pool_churn_period_s,
                   metavar="S", help="a short-lived pool (a Proxy) is deleted and another "
                   "created once per period (default %(default)g)")
    p.add_argument("--sample-period", type=positive_float, default=d.sample_period_s,
                   metavar="S", help="seconds between samples (default %(default)g)")
    p.add_argument("--heartbeat-timeout", type=positive_float, default=d.heartbeat_timeout_s,
                   metavar="S", help="the Proxies' heartbeat timeout (default %(default)g)")
    p.add_argument("--forget-after", type=positive_float, default=d.forget_after_s,
                   metavar="S", help="the Proxies' bound on a silent member "
                   "(default %(default)g)")
    p.add_argument("--interval", type=positive_float, default=d.interval_s, metavar="S",
                   help="Prometheus' scrape and evaluation interval (default %(default)g)")
    p.add_argument("--tsdb-block", type=positive_float, default=d.tsdb_block_s, metavar="S",
                   help="Prometheus' block length: its head keeps an ended series up to two "
                   "blocks (default %(default)g; deployed, 2 h)")
    p.add_argument("--pools", type=positive_int, default=d.pools,
                   help="long-lived pools (default %(default)d)")
    p.add_argument("--instances", type=positive_int, default=d.instances,
                   help="members of each long-lived pool (default %(default)d)")
    p.add_argument("--router-models", type=non_negative_int, default=d.router_models,
                   help="models of llama.cpp's router, loaded and unloaded in turns; 0 "
                   "leaves the router out (default %(default)d)")
    p.add_argument("--model-period", type=positive_float, default=d.model_period_s,
                   metavar="S", help="one model loaded or unloaded per period "
                   "(default %(default)g)")
    p.add_argument("--rate", type=positive_float, default=d.rate,
                   help="requests per second to each long-lived pool (default %(default)g)")
    p.add_argument("--growth-bound", type=positive_float, default=d.bound,
                   help="largest end / warm-up ratio of a figure's medians "
                   "(default %(default)g)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--samples", type=Path, default=None, metavar="DIR",
                   help="where churn-soak.csv and churn-soak.json go (default: the workdir)")
    p.add_argument("--plot", type=Path, default=None, metavar="PNG",
                   help="draw the run (the recorded one is docs/churn-soak.png)")
    p.add_argument("--workdir", type=Path, default=None,
                   help="logs and Prometheus data (default: a temporary folder)")
    args = p.parse_args(argv)
    settings = settings_of(args)
    if args.forget_after <= args.heartbeat_timeout:
        p.error("argument --forget-after: must exceed --heartbeat-timeout (a member is stale "
                "before it is forgotten)")
    if settings.settle_s >= args.duration * 3 / 4 or args.rollout_period >= args.duration / 2:
        p.error(f"argument --duration: {args.duration:g} s leaves no warm-up window: it must "
                f"exceed the settling time ({settings.settle_s:g} s, from --forget-after and "
                "--tsdb-block) by a third and --rollout-period twice over")
    shortest = min(args.duration / 4, (args.duration * 3 / 4 - settings.settle_s) / 4)
    if args.sample_period * MIN_WINDOW_SAMPLES > shortest:
        p.error(f"argument --sample-period: at most {shortest / MIN_WINDOW_SAMPLES:g} s, so "
                f"that each window compared holds {MIN_WINDOW_SAMPLES} samples")
    if args.crashes and settings.crash_times()[0] <= 0:
        p.error("argument --crashes: --duration is too short for a crashed member to be "
                "forgotten before the end")
    return args


def settings_of(args: argparse.Namespace) -> Settings:
    return Settings(
        duration_s=args.duration, rollout_period_s=args.rollout_period, crashes=args.crashes,
        pool_churn_period_s=args.pool_churn_period, sample_period_s=args.sample_period,
        heartbeat_timeout_s=args.heartbeat_timeout, forget_after_s=args.forget_after,
        interval_s=args.interval, tsdb_block_s=args.tsdb_block, pools=args.pools,
        instances=args.instances, router_models=args.router_models,
        model_period_s=args.model_period, rate=args.rate, bound=args.growth_bound,
        seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="poolscope-churn-soak-"))
    result = run(settings_of(args), workdir, log=lambda line: print(line, flush=True))
    out = args.samples or workdir
    out.mkdir(parents=True, exist_ok=True)
    write_samples(result.samples, out / "churn-soak.csv")
    write_result(result, out / "churn-soak.json")
    if args.plot is not None:
        from bench.churn.plot import draw
        draw(result.samples, result.verdict.windows, args.plot)
    print(table(result.verdict))
    print(f"\nchanges: {result.events}; crashed {len(result.crashed)}, forgotten by the "
          f"long-lived Proxies {result.forgotten}; members they list at the end "
          f"{result.listed} (alive {result.alive})")
    print(f"samples: {out / 'churn-soak.csv'}, verdict: {out / 'churn-soak.json'}")
    lines = failures(result.verdict)
    for line in lines:
        print(line, file=sys.stderr)
    return 1 if lines else 0


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
