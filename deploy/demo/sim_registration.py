"""Registration of a simulated engine with the demo Proxy's control plane.

The Proxy may start after its engines, restart, or go away; an engine keeps
serving regardless. So registration retries with capped, jittered backoff,
and the engine registers again whenever the Proxy stops recognising it (a
heartbeat answered 404, e.g. after a Proxy restart) or cannot be reached.

Control-plane API (implemented by deploy/demo/proxy.py):
    POST {url}/v1/instance/register   {"instance_id", "url", "capacity"[, "admission_state"]}
    POST {url}/v1/instance/heartbeat  {"instance_id"[, "admission_state"]}
    POST {url}/v1/instance/deregister {"instance_id"}

The admission state, when the engine states one, rides on every registration and
heartbeat, so the Proxy learns of a sleep within one heartbeat and forgets it once the
engine stops stating it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegistrationConfig:
    control_plane_url: str
    instance_id: str
    # Where the Proxy should send requests for this engine.
    engine_url: str
    # Advertised capacity; None leaves it to the Proxy (it may learn one).
    capacity: int | None = None
    heartbeat_interval: float = 2.0
    retry_initial: float = 0.2
    retry_max: float = 5.0
    request_timeout: float = 2.0


class Registrar:
    """Keeps one engine registered and heartbeating until `stop()`."""

    def __init__(self, config: RegistrationConfig,
                 admission_state: Callable[[], str | None] = lambda: None) -> None:
        self.config = config
        self._admission_state = admission_state  # read at each registration and heartbeat
        self.registered = False
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.request_timeout)
        self._session = aiohttp.ClientSession(timeout=timeout)
        self._task = asyncio.create_task(self._run(), name="engine-registration")

    async def stop(self) -> None:
        """Stop heartbeating and deregister once, best effort: shutdown never waits on a Proxy."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.registered:
            status = await self._post("deregister", {"instance_id": self.config.instance_id})
            log.info("deregister %s: %s", self.config.instance_id, status or "proxy unreachable")
            self.registered = False
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        delay = self.config.retry_initial
        while True:
            if not self.registered:
                status = await self._post("register", self._registration())
                if status is not None and 200 <= status < 300:
                    log.info("registered %s with %s", self.config.instance_id,
                             self.config.control_plane_url)
                    self.registered = True
                    delay = self.config.retry_initial
                else:
                    # Jitter keeps a pool of engines that lost their Proxy together
                    # from retrying in lockstep.
                    await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, self.config.retry_max)
                    continue
            await asyncio.sleep(self.config.heartbeat_interval)
            status = await self._post("heartbeat", self._stated(
                {"instance_id": self.config.instance_id}))
            if status is None or status == 404:
                # Unreachable or forgotten: a Proxy that comes back has lost its
                # registry, so heartbeats alone would never make us known again.
                self.registered = False
            elif not 200 <= status < 300:
                log.warning("heartbeat for %s answered %d", self.config.instance_id, status)

    def _registration(self) -> dict[str, Any]:
        return self._stated({"instance_id": self.config.instance_id,
                             "url": self.config.engine_url, "capacity": self.config.capacity})

    def _stated(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the engine's admission state, when it states one."""
        state = self._admission_state()
        return body if state is None else {**body, "admission_state": state}

    async def _post(self, verb: str, payload: dict[str, Any]) -> int | None:
        """The HTTP status, or None when the Proxy could not be reached."""
        assert self._session is not None
        url = f"{self.config.control_plane_url.rstrip('/')}/v1/instance/{verb}"
        try:
            async with self._session.post(url, json=payload) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, TimeoutError) as e:
            log.debug("%s to %s failed: %r", verb, url, e)
            return None
