"""The Proxy's Instance pool: who is registered, who is alive, who reported.

Alive means a heartbeat arrived within `heartbeat_timeout` seconds, measured on
the monotonic clock when asked, never stored as a flag that a missed timer
could leave stale. Registration counts as a heartbeat: an Instance that just
registered has just proven it is there.

A member silent for longer than `forget_after` (FORGET_AFTER_S by default) is
forgotten, with everything measured about it (its dispatch statistics and
histogram, its resource snapshot), as if it had deregistered: a crashed Instance
never does, and the registry must not grow with every member that ever existed.
Forgetting is lazy, at the start of every call that reads or changes the registry,
so no timer is needed and no call sees a member past the bound; each forgetting is
logged once and counted (`forgotten`). A forgotten member that registers again
comes back as new; its heartbeats are refused until then, as an unknown one's.

An Instance may also state its admission state (contract/catalog.py
ADMISSION_STATES): the Proxy cannot tell an engine put to sleep from an idle one,
and the load report leaves asleep members' capacity out, as the pool rules do.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poolscope.contract.catalog import ADMISSION_STATES
from poolscope.contract.thresholds import FORGET_AFTER_S
from poolscope.exporters.proxy.clock import SYSTEM_CLOCK, Clock
from poolscope.exporters.proxy.dispatch import DispatchStats

log = logging.getLogger(__name__)

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
                 clock: Clock = SYSTEM_CLOCK, forget_after: float = FORGET_AFTER_S, *,
                 proxy_id: str | None = None) -> None:
        """`proxy_id` names the pool in the log line of a forgetting."""
        if not heartbeat_timeout > 0:
            raise ValueError(f"heartbeat_timeout must be positive, not {heartbeat_timeout!r}")
        # A member must be able to go stale before it is forgotten, and be forgotten.
        if not heartbeat_timeout < forget_after < math.inf:
            raise ValueError(f"forget_after must be finite and greater than heartbeat_timeout "
                             f"({heartbeat_timeout:g} s), not {forget_after!r}")
        self.heartbeat_timeout = heartbeat_timeout
        self.forget_after = forget_after
        self.proxy_id = proxy_id
        self._clock = clock
        self._instances: dict[str, Instance] = {}  # registration order
        # The same ids, least recently heard from first (an OrderedDict finds its first
        # in constant time, however many were removed before it).
        self._by_beat: OrderedDict[str, None] = OrderedDict()
        self.forgotten = 0  # members forgotten for their silence, since the registry began

    def register(self, instance_id: str, url: str, capacity: int | None = None) -> Instance:
        """Add an Instance, or update one that registers again (it keeps its history)."""
        if not instance_id:
            raise ValueError("instance_id must be a non-empty string")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be a positive integer or None, not {capacity!r}")
        self._forget_silent()
        instance = self._instances.get(instance_id)
        if instance is None:
            instance = Instance(instance_id, url, capacity, self._clock.time(),
                                self._clock.monotonic())
            self._instances[instance_id] = instance
            self._by_beat[instance_id] = None
        else:
            instance.url = url
            instance.capacity = capacity
            self._beat(instance)
        return instance

    def heartbeat(self, instance_id: str) -> bool:
        """Record a heartbeat; False when the Instance is not registered."""
        instance = self.get(instance_id)
        if instance is None:
            return False
        self._beat(instance)
        return True

    def set_admission_state(self, instance_id: str, state: str | None) -> bool:
        """Record the admission state the Instance states (None: it states none);
        False when it is not registered, ValueError for a state not in the catalog."""
        checked = admission_state(state)
        instance = self.get(instance_id)
        if instance is None:
            return False
        instance.admission_state = checked
        return True

    def report_resources(self, instance_id: str, snapshot: Mapping[str, Any]) -> bool:
        """Record a resource report; False when the Instance is not registered."""
        instance = self.get(instance_id)
        if instance is None:
            return False
        instance.resource_snapshot = dict(snapshot)
        instance.last_resource_report_time = self._clock.time()
        return True

    def deregister(self, instance_id: str) -> bool:
        """Forget the Instance and everything measured about it; False when unknown."""
        self._forget_silent()
        self._by_beat.pop(instance_id, None)
        return self._instances.pop(instance_id, None) is not None

    def get(self, instance_id: str) -> Instance | None:
        self._forget_silent()
        return self._instances.get(instance_id)

    def dispatch_stats(self, instance_id: str) -> DispatchStats | None:
        """The dispatch tracker's view of an Instance: its stats, or None if unregistered."""
        instance = self.get(instance_id)
        return instance.dispatch if instance is not None else None

    def instances(self) -> list[Instance]:
        """Every registered Instance, in registration order (a copy, safe to iterate)."""
        self._forget_silent()
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
        self._by_beat.move_to_end(instance.instance_id)

    def _forget_silent(self) -> None:
        """Forget every member silent for longer than `forget_after`. `_by_beat` holds the
        longest silent first, so a call looks at one member beyond those it forgets."""
        now = self._clock.monotonic()
        while self._by_beat:
            oldest = self._instances[next(iter(self._by_beat))]
            silent = self.heartbeat_age(oldest, now)
            if silent <= self.forget_after:
                return
            del self._by_beat[oldest.instance_id], self._instances[oldest.instance_id]
            self.forgotten += 1
            log.warning("proxy %s forgot Instance %s: no heartbeat for %.0f s (forget_after "
                        "%g s)", self.proxy_id, oldest.instance_id, silent, self.forget_after)
