"""The Proxy's Instance pool: who is registered, who is alive, who reported.

Alive means a heartbeat arrived within `heartbeat_timeout` seconds, measured on
the monotonic clock when asked, never stored as a flag that a missed timer
could leave stale. Registration counts as a heartbeat: an Instance that just
registered has just proven it is there.

An Instance may also state its admission state (exporters/common/catalog.py
ADMISSION_STATES): the Proxy cannot tell an engine put to sleep from an idle one,
and the load report leaves asleep members' capacity out, as the pool rules do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poolscope.exporters.common.catalog import ADMISSION_STATES
from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.dispatch import DispatchStats

DEFAULT_HEARTBEAT_TIMEOUT = 10.0


def admission_state(value: object) -> str | None:
    """`value` as an admission state: one of ADMISSION_STATES, or None when it states
    none. A ValueError names the states, so a control plane can answer it as given."""
    if value is None or (isinstance(value, str) and value in ADMISSION_STATES):
        return value
    raise ValueError(f"admission_state must be one of {', '.join(ADMISSION_STATES)} "
                     f"or null, not {value!r}")


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
    # What the Instance last said of its admission (ADMISSION_STATES); None: nothing.
    admission_state: str | None = None


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

    def set_admission_state(self, instance_id: str, state: str | None) -> bool:
        """Record the admission state the Instance states (None: it states none);
        False when it is not registered, ValueError for a state not in the catalog."""
        checked = admission_state(state)
        instance = self._instances.get(instance_id)
        if instance is None:
            return False
        instance.admission_state = checked
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
