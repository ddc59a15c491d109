"""Registers a llama.cpp server with its demo Proxy and heartbeats for it.

The simulated engine registers itself; llama.cpp's server knows no Proxy, so the
closed loop runs one of these beside each, as a sidecar would in a deployment.

    python -m bench.scheduling.register --proxy-url URL --instance-id ID \\
        --engine-url URL --capacity N
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence

from deploy.demo.sim_registration import Registrar, RegistrationConfig
from poolscope.service.argtypes import http_url, identifier, positive_int


async def _run(config: RegistrationConfig) -> None:
    registrar = Registrar(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await registrar.start()
    try:
        await stop.wait()
    finally:
        await registrar.stop()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.scheduling.register",
                                description=__doc__.splitlines()[0])
    p.add_argument("--proxy-url", type=http_url, required=True)
    p.add_argument("--instance-id", type=identifier, required=True)
    p.add_argument("--engine-url", type=http_url, required=True)
    p.add_argument("--capacity", type=positive_int, required=True)
    args = p.parse_args(argv)
    asyncio.run(_run(RegistrationConfig(args.proxy_url, args.instance_id, args.engine_url,
                                        args.capacity)))


if __name__ == "__main__":
    main()
