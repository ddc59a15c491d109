"""The Proxy's Instance pool: who is registered, who is alive, who reported.

Alive means a heartbeat arrived within `heartbeat_timeout` seconds, measured on
the monotonic clock when asked, never stored as a flag that a missed timer
could leave stale. Registration counts as a heartbeat: an Instance that just
registered has just proven it is there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.dispatch import DispatchStats

DEFAULT_HEARTBEAT_TIMEOUT = 10.0


@dataclass
class Instance:
    """What the Proxy knows about one Instance of its pool."""

    instance_id: str
    url: str
    capacity: int | None  # configured concurrent requests; None when not configured
    last_heartbeat_time: float  # wall clock, for people
    last_heartbeat_monotonic: float  # for the age and liveness
    last_resource_report_time: float | None = None
    resource_snapshot: Mapping[str, Any] | None = None
    dispatch: DispatchStats = field(default_factory=DispatchStats)


class InstanceRegistry:
    """Register / heartbeat / deregister / resource reports, keyed by instance_id."""

    def __init__(self, heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if heartbeat_timeout <= 0:
            raise ValueError(f"heartbeat_timeout must be positive, not {heartbeat_timeout!r}")
        self.heartbeat_timeout = heartbeat_timeout
        self._clock = clock
        self._instances: dict[str, Instance] = {}

    def register(self, instance_id: str, url: str, capacity: int | None = None) -> Instance:
        """Add an Instance, or update one that registers again (it keeps its history)."""
        if not instance_id:
            raise ValueError("instance_id must be a non-empty string")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be a positive integer or None, not {capacity!r}")
        instance = self._instances.get(instance_id)
        if instance is None:
            instance = Instance(instance_id, url, capacity, self._clock.time(),
                                self._clock.monotonic())
            self._instances[instance_id] = instance
        else:
            instance.url = url
            instance.capacity = capacity
            self._beat(instance)
        return instance

    def heartbeat(self, instance_id: str) -> bool:
        """Record a heartbeat; False when the Instance is not registered."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return False
        self._beat(instance)
        return True

    def report_resources(self, instance_id: str, snapshot: Mapping[str, Any]) -> bool:
        """Record a resource report; False when the Instance is not registered."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return False
        instance.resource_snapshot = dict(snapshot)
        instance.last_resource_report_time = self._clock.time()
        return True

    def deregister(self, instance_id: str) -> bool:
        """Forget the Instance and everything measured about it; False when unknown."""
        return self._instances.pop(instance_id, None) is not None

    def get(self, instance_id: str) -> Instance | None:
        return self._instances.get(instance_id)

    def dispatch_stats(self, instance_id: str) -> DispatchStats | None:
        """The dispatch tracker's view of an Instance: its stats, or None if unregistered."""
        instance = self._instances.get(instance_id)
        return instance.dispatch if instance is not None else None

    def instances(self) -> list[Instance]:
        """Every registered Instance, in registration order (a copy, safe to iterate)."""
        return list(self._instances.values())

    def heartbeat_age(self, instance: Instance, now: float | None = None) -> float:
        """Seconds since its last heartbeat at monotonic `now` (default: this moment)."""
        now = self._clock.monotonic() if now is None else now
        return max(0.0, now - instance.last_heartbeat_monotonic)

    def is_alive(self, instance: Instance, now: float | None = None) -> bool:
        return self.heartbeat_age(instance, now) <= self.heartbeat_timeout

    def alive(self) -> list[Instance]:
        """Registered Instances whose heartbeat is within the timeout, in registration order."""
        return [i for i in self.instances() if self.is_alive(i)]

    def _beat(self, instance: Instance) -> None:
        instance.last_heartbeat_time = self._clock.time()
        instance.last_heartbeat_monotonic = self._clock.monotonic()
