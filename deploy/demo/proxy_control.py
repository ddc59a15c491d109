"""The demo Proxy's control plane: Instances register, heartbeat, report, leave.

A register or heartbeat body may carry the Instance's `admission_state` (one of the
catalog's ADMISSION_STATES): each restates it, and a body without it states none, so
a state the Instance stopped stating never lingers. The load report leaves asleep
members' capacity out.

Malformed input is answered with 400 and a reason and changes nothing; an
unknown instance_id is 404, which tells an Instance whose Proxy restarted to
register again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from poolscope.exporters.proxy import Instance, InstanceRegistry
from poolscope.exporters.proxy.registry import admission_state


class BadRequest(Exception):
    """The body cannot be acted on; the message says why (answered with 400)."""


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"`{name}` must be a non-empty string")
    return value


def _capacity(body: dict[str, Any]) -> int | None:
    value = body.get("capacity")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest("`capacity` must be a positive integer or null")
    return value


def _admission_state(body: dict[str, Any]) -> str | None:
    try:
        return admission_state(body.get("admission_state"))
    except ValueError as e:
        raise BadRequest(str(e)) from e


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as e:
        raise BadRequest("the body is not JSON") from e
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _bad(e: BadRequest) -> web.Response:
    return web.json_response({"error": str(e)}, status=400)


def _unknown(instance_id: str) -> web.Response:
    return web.json_response({"error": f"unknown instance {instance_id!r}"}, status=404)


class ControlPlane:
    """The /v1/instance/* handlers over the exporter's registry."""

    def __init__(self, registry: InstanceRegistry, on_change: Callable[[], None]) -> None:
        self._registry = registry
        self._on_change = on_change  # the pool gained or regained an Instance

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/instance/register", self.register),
            web.post("/v1/instance/heartbeat", self.heartbeat),
            web.post("/v1/instance/deregister", self.deregister),
            web.post("/v1/instance/resource_snapshot", self.resource_snapshot),
            web.get("/v1/instance/list", self.list_instances),
        ]

    async def register(self, request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            instance_id = _text(body, "instance_id")
            url = _text(body, "url")
            if not url.startswith(("http://", "https://")):
                raise BadRequest("`url` must be an http(s) base URL")
            capacity, state = _capacity(body), _admission_state(body)
        except BadRequest as e:
            return _bad(e)
        instance = self._registry.register(instance_id, url, capacity)
        self._registry.set_admission_state(instance_id, state)
        self._on_change()
        return web.json_response({"status": "ok", "instance": self._describe(instance)})

    async def heartbeat(self, request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            instance_id, state = _text(body, "instance_id"), _admission_state(body)
        except BadRequest as e:
            return _bad(e)
        if not self._registry.heartbeat(instance_id):
            return _unknown(instance_id)
        self._registry.set_admission_state(instance_id, state)
        self._on_change()
        return web.json_response({"status": "ok"})

    async def deregister(self, request: web.Request) -> web.Response:
        try:
            instance_id = _text(await _body(request), "instance_id")
        except BadRequest as e:
            return _bad(e)
        if not self._registry.deregister(instance_id):
            return _unknown(instance_id)
        return web.json_response({"status": "ok"})

    async def resource_snapshot(self, request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            instance_id = _text(body, "instance_id")
            snapshot = body.get("snapshot")
            if not isinstance(snapshot, dict):
                raise BadRequest("`snapshot` must be a JSON object")
        except BadRequest as e:
            return _bad(e)
        if not self._registry.report_resources(instance_id, snapshot):
            return _unknown(instance_id)
        return web.json_response({"status": "ok"})

    async def list_instances(self, request: web.Request) -> web.Response:
        include_dead = request.query.get("include_dead", "false").lower() in ("1", "true")
        instances = (self._registry.instances() if include_dead else self._registry.alive())
        return web.json_response({"instances": [self._describe(i) for i in instances]})

    def _describe(self, instance: Instance) -> dict[str, Any]:
        return {
            "instance_id": instance.instance_id,
            "url": instance.url,
            "capacity": instance.capacity,
            "admission_state": instance.admission_state,
            "alive": self._registry.is_alive(instance),
            "heartbeat_age_s": self._registry.heartbeat_age(instance),
            "last_resource_report_at": instance.last_resource_report_time,
            "inflight": instance.dispatch.inflight,
        }
