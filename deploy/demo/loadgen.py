"""Open-loop load for the demo's Proxies: Poisson arrivals per target, with bursts.

Each target (a Proxy base URL) gets its own arrival rate, so the pools differ
in load. Arrivals follow a precomputed schedule and never wait for responses
(open loop); a per-target cap on open requests keeps the generator itself
bounded, and arrivals over the cap are counted as dropped, not delayed.

    python -m deploy.demo.loadgen --target http://127.0.0.1:9100=5 \\
        --target http://127.0.0.1:9200=1 --duration 60 \\
        [--max-requests N] [--burst-every 20 --burst-factor 4 --burst-length 5] \\
        [--seed 1] [--stream] [--max-tokens 32] [--max-inflight 256] \\
        [--request-timeout 30] [--model demo]

At the end it prints a JSON report per target on stdout. In-process, the demo
launcher calls `run_load()` and gets the same report as a `LoadReport`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from deploy.demo.load_arrivals import BurstSpec, arrival_times
from deploy.demo.load_report import LoadReport, Outcome, TargetTally, classify_status
from poolscope.service.argtypes import OneLineErrorParser, positive_float, positive_int

CHAT_PATH = "/v1/chat/completions"
PROMPT = "Summarise how loaded this pool is, and say which measurement tells you."


@dataclass(frozen=True)
class RequestShape:
    """What every request of a run asks for."""

    stream: bool = False
    max_tokens: int = 32
    model: str = "demo"
    timeout: float = 30.0

    def body(self) -> dict[str, Any]:
        return {"model": self.model, "max_tokens": self.max_tokens, "stream": self.stream,
                "messages": [{"role": "user", "content": PROMPT}]}


class _Budget:
    """The run's --max-requests, shared by all targets; None means unbounded."""

    def __init__(self, limit: int | None) -> None:
        self._left = limit

    def take(self) -> bool:
        if self._left is None:
            return True
        if self._left <= 0:
            return False
        self._left -= 1
        return True


async def run_load(targets: Mapping[str, float], duration: float | None = None, *,
                   max_requests: int | None = None, burst: BurstSpec | None = None,
                   seed: int | None = None, stream: bool = False, max_tokens: int = 32,
                   model: str = "demo", max_inflight: int = 256,
                   request_timeout: float = 30.0, stop: asyncio.Event | None = None,
                   stop_grace: float = 2.0) -> LoadReport:
    """Offer load to each `{base_url: requests_per_second}` and report what came back.

    Arrivals end at `duration` seconds, after `max_requests` arrivals over all
    targets, or when `stop` is set, whichever comes first. Requests already
    sent are then awaited, each bounded by `request_timeout`; once `stop` is
    set they get `stop_grace` seconds more and are then abandoned, so that a
    stopped generator exits promptly and still reports.
    """
    if duration is None and max_requests is None:
        raise ValueError("run_load needs a duration or max_requests to end")
    if duration is not None and not 0 < duration < math.inf:
        raise ValueError(f"duration must be a finite number > 0, got {duration}")
    if max_inflight < 1:
        raise ValueError("max_inflight must be >= 1")
    shape = RequestShape(stream, max_tokens, model, request_timeout)
    stop = stop or asyncio.Event()
    budget = _Budget(max_requests)
    horizon = math.inf if duration is None else duration
    tallies = {url: TargetTally(url, rate) for url, rate in targets.items()}
    schedules = {url: arrival_times(rate, _rng(seed, url), burst, horizon)
                 for url, rate in targets.items()}

    loop = asyncio.get_running_loop()
    start = loop.time()
    connector = aiohttp.TCPConnector(limit=max_inflight * max(1, len(targets)))
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        requests: set[asyncio.Task[None]] = set()

        def send(tally: TargetTally) -> None:
            task = asyncio.create_task(_request(session, tally, shape))
            requests.add(task)
            task.add_done_callback(requests.discard)

        await asyncio.gather(*(
            _offer(tallies[url], schedules[url], start, budget, max_inflight, stop, send)
            for url in targets))
        await _drain(requests, stop, stop_grace)
    return LoadReport(duration_s=loop.time() - start, seed=seed,
                      targets={url: t.report() for url, t in tallies.items()})


async def _drain(requests: set[asyncio.Task[None]], stop: asyncio.Event,
                 grace: float) -> None:
    stopped = asyncio.create_task(stop.wait())
    try:
        while requests and not stop.is_set():
            await asyncio.wait({*requests, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if requests:
        await asyncio.wait(set(requests), timeout=grace)
        open_requests = set(requests)
        for task in open_requests:
            task.cancel()
        await asyncio.gather(*open_requests, return_exceptions=True)


def _rng(seed: int | None, url: str) -> random.Random:
    """One generator per target, so a target's arrivals do not depend on the others."""
    return random.Random(f"{seed}/{url}") if seed is not None else random.Random()


async def _offer(tally: TargetTally, schedule: Iterator[float], start: float, budget: _Budget,
                 max_inflight: int, stop: asyncio.Event,
                 send: Callable[[TargetTally], None]) -> None:
    loop = asyncio.get_running_loop()
    for offset in schedule:
        delay = start + offset - loop.time()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
        if stop.is_set() or not budget.take():
            return
        tally.arrivals += 1
        if tally.inflight >= max_inflight:
            tally.dropped += 1
        else:
            # Counted open here, not when the task first runs, so that a run of
            # overdue arrivals meets the cap one by one.
            tally.sent += 1
            tally.inflight += 1
            send(tally)


async def _request(session: aiohttp.ClientSession, tally: TargetTally,
                   shape: RequestShape) -> None:
    """One request, already counted as sent and open; settles exactly one outcome."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    status: int | None = None
    outcome = Outcome.ABANDONED  # what it stays if the run cancels this request
    try:
        async with session.post(tally.url.rstrip("/") + CHAT_PATH, json=shape.body()) as resp:
            status = resp.status
            outcome = classify_status(resp.status) or await _read_answer(resp, shape.stream)
            if outcome is not Outcome.OK:
                await resp.read()
    except TimeoutError:
        outcome = Outcome.CLIENT_TIMEOUT
    except aiohttp.ClientPayloadError:
        outcome = Outcome.PROTOCOL_ERROR
    except aiohttp.ClientError:
        outcome = Outcome.TRANSPORT_ERROR
    finally:
        tally.inflight -= 1
        tally.record(outcome, loop.time() - began, status)


async def _read_answer(resp: aiohttp.ClientResponse, stream: bool) -> Outcome:
    """OK only for a complete answer: a stream ending in [DONE], or a JSON completion."""
    if stream:
        async for line in resp.content:
            if line.strip() == b"data: [DONE]":
                return Outcome.OK
        return Outcome.PROTOCOL_ERROR
    try:
        answer = json.loads(await resp.read())
    except ValueError:
        return Outcome.PROTOCOL_ERROR
    ok = isinstance(answer, dict) and isinstance(answer.get("choices"), list)
    return Outcome.OK if ok else Outcome.PROTOCOL_ERROR


def _target(value: str) -> tuple[str, float]:
    url, sep, rate = value.rpartition("=")
    if not sep or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected URL=RATE, got {value!r}")
    try:
        rps = float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"rate is not a number in {value!r}") from None
    if not 0 <= rps < math.inf:
        raise argparse.ArgumentTypeError(f"rate must be a finite number >= 0 in {value!r}")
    return url, rps


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog="loadgen", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=_target, action="append", required=True,
                   metavar="URL=RATE", help="Proxy base URL and its requests per second "
                   "(repeat for several Proxies)")
    p.add_argument("--duration", type=positive_float, help="seconds of arrivals")
    p.add_argument("--max-requests", type=positive_int, help="arrivals over all targets")
    p.add_argument("--burst-every", type=positive_float, help="seconds between burst starts")
    p.add_argument("--burst-factor", type=float, help="rate multiplier during a burst")
    p.add_argument("--burst-length", type=positive_float, help="seconds each burst lasts")
    p.add_argument("--seed", type=int, help="seed for reproducible arrival times")
    p.add_argument("--stream", action="store_true", help="request SSE streaming answers")
    p.add_argument("--max-tokens", type=positive_int, default=32)
    p.add_argument("--model", default="demo")
    p.add_argument("--max-inflight", type=positive_int, default=256,
                   help="open requests per target before arrivals are dropped")
    p.add_argument("--request-timeout", type=positive_float, default=30.0,
                   help="seconds before the generator gives up on one request")
    return p


def _burst(args: argparse.Namespace) -> BurstSpec | None:
    given = [args.burst_every, args.burst_factor, args.burst_length]
    if all(v is None for v in given):
        return None
    if any(v is None for v in given):
        raise ValueError("--burst-every, --burst-factor and --burst-length go together")
    return BurstSpec(args.burst_every, args.burst_factor, args.burst_length)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.duration is None and args.max_requests is None:
            parser.error("give --duration and/or --max-requests")
        urls = [url for url, _ in args.target]
        if len(set(urls)) != len(urls):
            parser.error("each --target URL may be given once")
        burst = _burst(args)
    except SystemExit as e:
        return int(e.code or 0)
    except ValueError as e:
        print(f"loadgen: error: {e}", file=sys.stderr)
        return 2

    async def run() -> LoadReport:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await run_load(
            dict(args.target), args.duration, max_requests=args.max_requests, burst=burst,
            seed=args.seed, stream=args.stream, max_tokens=args.max_tokens, model=args.model,
            max_inflight=args.max_inflight, request_timeout=args.request_timeout, stop=stop)

    print(asyncio.run(run()).to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
