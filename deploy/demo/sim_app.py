"""One simulated engine replica: its scheduler, its metrics registry, and the HTTP
app that serves them on vLLM's routes.

The routes are the engine's whole surface (engine_sim's docstring lists them): chat
completions (sim_chat), /metrics with its switchable faults (sim_faults), /health,
and vLLM's sleep mode, whose state the engine also tells its Proxy in its heartbeats.
Serving the app and registering with a Proxy are engine_sim's; tests build the
engine here on a manual clock and serve it themselves.
"""

from __future__ import annotations

import json

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from deploy.demo.sim_chat import ChatCompletions, error
from deploy.demo.sim_faults import FAULT_MODES, GARBAGE_METRICS, FaultSwitch
from deploy.demo.sim_metrics import SleepMode, metrics_registry, render
from deploy.demo.sim_scheduler import Clock, EngineConfig, Scheduler
from poolscope.exporters.instance.admission import AdmissionState


class SimulatedEngine:
    """One engine replica: its scheduler, its metrics registry, its HTTP app."""

    def __init__(self, config: EngineConfig, clock: Clock | None = None,
                 seed: int | None = None) -> None:
        self.config = config
        self.scheduler = Scheduler(config, clock)
        self.sleep = SleepMode()
        self.registry = metrics_registry(self.scheduler, self.sleep)
        self.faults = FaultSwitch()
        self.chat = ChatCompletions(config, self.scheduler, self.sleep, seed)
        self.app = web.Application()
        self.app.add_routes([
            web.post("/v1/chat/completions", self.chat.handle),
            web.get("/metrics", self._metrics),
            web.get("/health", self._health),
            web.get("/admin/fault", self._get_fault),
            web.post("/admin/fault", self._set_fault),
            web.post("/sleep", self._sleep),
            web.post("/wake_up", self._wake_up),
            web.get("/is_sleeping", self._is_sleeping),
        ])

    async def _metrics(self, request: web.Request) -> web.Response:
        await self.faults.wait_while_hanging()
        if self.faults.mode == "error500":
            return web.Response(status=500, text="injected fault: error500\n")
        if self.faults.mode == "garbage":
            return web.Response(body=GARBAGE_METRICS, content_type="text/plain")
        # The classic text format, which is what `render` writes and what every
        # Prometheus (and vLLM behind an older prometheus_client) speaks.
        return web.Response(body=render(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _get_fault(self, request: web.Request) -> web.Response:
        return web.json_response({"mode": self.faults.mode})

    async def _set_fault(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            self.faults.set(body["mode"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
            return error(400, f"expected {{\"mode\": one of {FAULT_MODES}}}: {e}",
                         "BadRequestError")
        return web.json_response({"mode": self.faults.mode})

    async def _sleep(self, request: web.Request) -> web.Response:
        """vLLM's level 1 offloads the weights, level 2 discards them too; both serve
        nothing until woken. Requests already admitted run to their end here."""
        level = request.query.get("level", "1")
        if level not in ("1", "2"):
            return error(400, f"level must be 1 or 2, not {level!r}", "BadRequestError")
        self.sleep.level = int(level)
        return web.Response()

    async def _wake_up(self, request: web.Request) -> web.Response:
        self.sleep.level = 0
        return web.Response()

    async def _is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.sleep.level > 0})

    def admission_state(self) -> str | None:
        """What the engine tells its Proxy of its admission: asleep while its sleep mode
        is on, else nothing (judging load is the Instance exporter's work)."""
        return AdmissionState.ASLEEP.value if self.sleep.level else None
