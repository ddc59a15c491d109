"""The demo Proxy's request path, after CacheRoute's.

accept -> prepare line -> preparation (a worker simulates knowledge retrieval
with a lognormal latency) -> ready line -> one alive Instance with room ->
forward and relay. The whole path runs in the client's own handler task, so a
client that disconnects cancels it wherever it is: it leaves its line, frees
its worker or its Instance slot, and closes the upstream connection.

--queue-timeout bounds the time from acceptance to dispatch; a request still
waiting then gets 504, and the line it was waiting in counts a timeout
rejection (a request timed out mid-preparation was in no line, so only its
outcome says timeout). A request already waiting when the last Instance
dies waits for one to come back, up to the same timeout; only a request that
arrives to a pool with no alive Instance is turned away at once (503).
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from deploy.demo.proxy_forward import error_response, forward
from deploy.demo.proxy_lines import QueueFull, WaitingLine
from deploy.demo.proxy_select import Selector, Strategy
from poolscope.exporters.proxy import Instance, ProxyExporter

PREPARE_SIGMA = 0.5  # lognormal shape: most preparations near the mean, a long tail


@dataclass(frozen=True)
class PathConfig:
    """The request path's knobs; the defaults are the CLI's."""

    strategy: Strategy = Strategy.ROUND_ROBIN
    prepare_workers: int = 4
    prepare_capacity: int = 64
    ready_capacity: int = 64
    queue_timeout: float = 30.0
    prepare_ms_mean: float = 50.0


class ChatPath:
    """One Proxy's lines, preparation workers and upstream client, shared by all requests."""

    def __init__(self, exporter: ProxyExporter, config: PathConfig,
                 rng: random.Random | None = None) -> None:
        self._exporter = exporter
        self._config = config
        self._rng = rng or random.Random()
        self._workers = asyncio.Semaphore(config.prepare_workers)
        self.prepare = WaitingLine(exporter, "prepare", config.prepare_capacity)
        self.ready = WaitingLine(exporter, "ready", config.ready_capacity)
        self._selector = Selector(exporter.instances, config.strategy)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # No connection limit: the Instances' capacity and the lines are the
        # only queues, never a connection pool hidden inside the client. Nor a kept
        # connection: llama.cpp's server closes them under load, and a request sent on
        # one as it closes fails with 502 (bench.scheduling saw 2-17 in 170); a new
        # loopback connection per request costs far less than a request.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def pool_changed(self) -> None:
        """An Instance came, came back, or freed a slot: ready requests re-check."""
        self.ready.changed.notify()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "the body is not JSON", "invalid_request_error")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error_response(400, "a chat completion needs a `messages` list",
                                  "invalid_request_error")
        async with self._exporter.dispatch.request() as accepted:
            if not self._exporter.instances.alive():
                accepted.outcome = "rejected"
                return error_response(503, "no alive Instance", "no_instance")
            try:
                async with asyncio.timeout(self._config.queue_timeout) as deadline:
                    await self._prepare(deadline)
                    instance = await self._wait_for_instance(deadline)
            except QueueFull as e:
                accepted.outcome = "rejected"
                return error_response(503, str(e), "queue_full")
            except TimeoutError:
                accepted.outcome = "timeout"
                return error_response(504, "waited past the queue timeout", "queue_timeout")
            # No await between the pick and entering the dispatch: nobody else can
            # take the slot the selector saw.
            try:
                async with self._exporter.dispatch.track(instance.instance_id) as dispatch:
                    response = await forward(self._client(), request, instance.url, body,
                                             dispatch)
            finally:
                self.pool_changed()
            accepted.outcome = dispatch.outcome or "ok"
            return response

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("ChatPath.start() was not awaited")
        return self._session

    async def _prepare(self, deadline: asyncio.Timeout) -> None:
        with self.prepare.join(deadline):
            await self._workers.acquire()
        try:
            await asyncio.sleep(self._preparation_seconds())
        finally:
            self._workers.release()

    async def _wait_for_instance(self, deadline: asyncio.Timeout) -> Instance:
        with self.ready.join(deadline) as ticket:
            while True:
                if self.ready.first() is ticket and (chosen := self._selector.pick()):
                    return chosen
                await self.ready.changed.wait()

    def _preparation_seconds(self) -> float:
        mean_s = self._config.prepare_ms_mean / 1000
        if mean_s <= 0:
            return 0.0
        mu = math.log(mean_s) - PREPARE_SIGMA**2 / 2  # so that the mean is mean_s
        return self._rng.lognormvariate(mu, PREPARE_SIGMA)
