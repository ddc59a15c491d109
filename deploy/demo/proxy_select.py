"""How the demo Proxy picks an Instance for a ready request.

Both strategies read the exporter's own registry and inflight counts, so the
Proxy routes on exactly the numbers it publishes. An Instance with a
configured capacity is never sent more than that many concurrent requests.
Each pick starts its scan just after the previous pick, so ties (and the
round-robin order) rotate through the pool instead of piling onto the first
Instance registered.
"""

from __future__ import annotations

from enum import StrEnum

from poolscope.exporters.proxy import Instance, InstanceRegistry


class Strategy(StrEnum):
    ROUND_ROBIN = "round_robin"
    LEAST_INFLIGHT = "least_inflight"


def has_room(instance: Instance) -> bool:
    return instance.capacity is None or instance.dispatch.inflight < instance.capacity


class Selector:
    """Remembers the previous pick, which is all the rotation needs."""

    def __init__(self, registry: InstanceRegistry, strategy: Strategy) -> None:
        self._registry = registry
        self._strategy = strategy
        self._last: str | None = None

    def pick(self) -> Instance | None:
        """An alive Instance with room, or None when every one is dead or full."""
        alive = self._registry.alive()
        ids = [i.instance_id for i in alive]
        start = ids.index(self._last) + 1 if self._last in ids else 0
        candidates = [i for i in alive[start:] + alive[:start] if has_room(i)]
        if not candidates:
            return None
        if self._strategy is Strategy.LEAST_INFLIGHT:
            chosen = min(candidates, key=lambda i: i.dispatch.inflight)  # min keeps the first
        else:
            chosen = candidates[0]
        self._last = chosen.instance_id
        return chosen
