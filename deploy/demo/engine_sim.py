"""A simulated LLM engine: vLLM's HTTP surface and metrics, without a GPU.

It stands in for vLLM in the demo cluster and in tests, so that everything
downstream (Instance exporter, Proxy, Prometheus rules) meets a load that
behaves like a real engine's: a bounded batch, a FIFO waiting queue, prefill
and decode time, and vLLM v1's /metrics under their real names. Not product code.

    python -m deploy.demo.engine_sim --listen 127.0.0.1:8001 --model demo \\
        --max-running 4 --max-waiting 16 --tokens-per-second 50 \\
        --prefill-ms-per-token 0.5 \\
        [--register-url http://127.0.0.1:9000 --instance-id i-1 \\
         --heartbeat-interval 2 --capacity 4] [--seed 1]

HTTP: POST /v1/chat/completions (OpenAI-style, `stream` supported; 503 when
batch and queue are full), GET /metrics, GET /health, and for tests
GET|POST /admin/fault {"mode": "none"|"hang"|"error500"|"garbage"}, which
changes how /metrics answers, and vLLM's sleep mode endpoints: POST /sleep?level=1|2,
POST /wake_up, GET /is_sleeping. Asleep, it refuses requests (503) and its /metrics
says so in `vllm:engine_sleep_state`, beside the zeros an idle engine reads; its
heartbeats tell its Proxy too (admission_state "asleep").

This module runs the engine as a process: listen, register with a Proxy, serve until
signalled. The engine itself is sim_app's, its request path sim_chat's, its metrics
sim_metrics', its load sim_scheduler's, its faults sim_faults', its heartbeats
sim_registration's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from dataclasses import replace

from aiohttp import web

from deploy.demo.sim_app import SimulatedEngine
from deploy.demo.sim_registration import Registrar, RegistrationConfig
from deploy.demo.sim_scheduler import EngineConfig
from poolscope.service.argtypes import (
    OneLineErrorParser,
    host_port,
    identifier,
    positive_float,
    positive_int,
)

log = logging.getLogger("engine_sim")


async def start(engine: SimulatedEngine, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Listen on host:port (0 picks a free port); returns the runner and the engine's URL.

    `handler_cancellation` makes a client disconnect cancel its handler, which
    is what frees the batch slot of a non-streaming request whose client left.
    A short shutdown timeout keeps a scrape hung by fault injection from
    delaying exit. Per-request access lines would drown the demo's logs.
    """
    access_log = logging.getLogger("aiohttp.access") if log.isEnabledFor(logging.DEBUG) else None
    runner = web.AppRunner(engine.app, handler_cancellation=True, shutdown_timeout=1.0,
                           access_log=access_log)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_host, bound_port = runner.addresses[0][:2]
    advertised_host = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
    return runner, f"http://{advertised_host}:{bound_port}"


async def serve(engine: SimulatedEngine, host: str, port: int,
                registration: RegistrationConfig | None, stop: asyncio.Event) -> None:
    """Serve until `stop` is set; register once listening, deregister before closing.

    A registration's `engine_url` may be empty: it is then filled in with the
    address actually bound, which is how port 0 works.
    """
    runner, url = await start(engine, host, port)
    registrar: Registrar | None = None
    try:
        print(f"engine_sim: serving {url} model={engine.config.model}", flush=True)
        if registration is not None:
            if not registration.engine_url:
                registration = replace(registration, engine_url=url)
            registrar = Registrar(registration, engine.admission_state)
            await registrar.start()
        await stop.wait()
    finally:
        if registrar is not None:
            await registrar.stop()
        await runner.cleanup()


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog="engine_sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=host_port, default=("127.0.0.1", 8000),
                   help="HOST:PORT to serve on; port 0 picks a free one (default 127.0.0.1:8000)")
    p.add_argument("--model", default="sim-model", help="served model name (model_name label)")
    p.add_argument("--max-running", type=positive_int, default=8,
                   help="batch capacity: requests decoding at once")
    p.add_argument("--max-waiting", type=int, default=32,
                   help="waiting-queue bound; beyond it requests get 503")
    p.add_argument("--tokens-per-second", type=positive_float, default=50.0,
                   help="decode rate of each running request")
    p.add_argument("--prefill-ms-per-token", type=float, default=0.5,
                   help="prefill time per prompt token, milliseconds")
    p.add_argument("--kv-cache-tokens", type=positive_int, default=None,
                   help="KV cache size in tokens (default: max-running x 128, small enough "
                   "that the usage gauge visibly follows demo-sized requests)")
    p.add_argument("--default-output-tokens", type=positive_int, default=64,
                   help="output length of requests without max_tokens (finish reason 'stop')")
    p.add_argument("--register-url", help="demo Proxy control-plane base URL to register with")
    p.add_argument("--instance-id", type=identifier, help="instance id to register as")
    p.add_argument("--heartbeat-interval", type=positive_float, default=2.0,
                   help="seconds between heartbeats to the Proxy")
    p.add_argument("--capacity", type=positive_int, default=None,
                   help="capacity to advertise when registering (default: none)")
    p.add_argument("--advertise-url",
                   help="URL the Proxy should use for this engine (default: the bound address)")
    p.add_argument("--seed", type=int, default=None, help="seed for the generated text")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.register_url and not args.instance_id:
        print("engine_sim: error: --register-url needs --instance-id", file=sys.stderr)
        return 2
    try:
        config = EngineConfig(
            model=args.model, max_running=args.max_running, max_waiting=args.max_waiting,
            tokens_per_second=args.tokens_per_second,
            prefill_ms_per_token=args.prefill_ms_per_token,
            kv_cache_tokens=args.kv_cache_tokens or args.max_running * 128,
            default_output_tokens=args.default_output_tokens)
    except ValueError as e:
        print(f"engine_sim: error: {e}", file=sys.stderr)
        return 2
    registration = None if not args.register_url else RegistrationConfig(
        control_plane_url=args.register_url, instance_id=args.instance_id,
        engine_url=args.advertise_url or "", capacity=args.capacity,
        heartbeat_interval=args.heartbeat_interval)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        engine = SimulatedEngine(config, seed=args.seed)
        await serve(engine, *args.listen, registration, stop)

    try:
        asyncio.run(run())
    except OSError as e:
        print(f"engine_sim: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
