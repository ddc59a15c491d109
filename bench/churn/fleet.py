"""Pools whose members come and go, with Prometheus' targets following them.

Each pool is a demo Proxy (the Proxy library embedded) and its Instances, each a
simulated engine that registers with the Proxy plus the real Instance exporter in front
of it. Members are replaced as a rollout replaces pods (a new instance_id; the old
engine deregisters on SIGTERM), crash as pods do (SIGKILL: the engine never
deregisters, its Proxy only sees the heartbeats stop), and whole pools are created and
deleted. After every change the file_sd targets are rewritten, as service discovery
would drop a pod that is gone, so Prometheus scrapes exactly the members alive now.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.fleet_members import start_instance_exporter, start_proxy, start_sim_engine
from deploy.demo.cluster import Pool, engine_name, exporter_name, write_file_sd
from deploy.demo.processes import Child, ProcessGroup

SLOTS = 4  # each simulated engine's batch, registered as its capacity


@dataclass(frozen=True)
class Member:
    instance_id: str
    serial: int  # start order across the fleet: the lowest has lived longest
    exporter_url: str
    exporter: Child


@dataclass
class ChurnPool:
    proxy_id: str
    proxy_url: str
    proxy: Child
    members: list[Member] = field(default_factory=list)  # oldest first

    def as_demo_pool(self) -> Pool:
        return Pool(self.proxy_id, self.proxy_url,
                    tuple(m.exporter_url for m in self.members),
                    instance_ids=tuple(m.instance_id for m in self.members))


@dataclass(frozen=True)
class MemberFlags:
    """What every Proxy and engine of the fleet is started with: the compressed bounds."""

    proxy: tuple[str, ...]  # --heartbeat-timeout, --forget-after
    engine: tuple[str, ...]  # --heartbeat-interval, well inside the Proxy's timeout


class ChurnFleet:
    """The pools alive now, how many members and pools ever existed, and the changes a
    churning fleet goes through. `static` pools (router-mode models, read by exporters
    that declare their pool) stay in the targets whatever else changes."""

    def __init__(self, group: ProcessGroup, workdir: Path, flags: MemberFlags,
                 static: Sequence[Pool] = ()) -> None:
        self._group = group
        self._workdir = workdir
        self._flags = flags
        self.static = list(static)
        self.pools: dict[str, ChurnPool] = {}
        self.members_ever = 0
        self.pools_ever = 0
        self.crashed: list[str] = []  # instance ids, in crash order
        self._serial = itertools.count(1)

    @property
    def members_alive(self) -> int:
        return sum(len(p.members) for p in self.pools.values())

    def create_pool(self, proxy_id: str, instances: int) -> ChurnPool:
        url, proxy = start_proxy(self._group, proxy_id, *self._flags.proxy)
        pool = self.pools[proxy_id] = ChurnPool(proxy_id, url, proxy)
        self.pools_ever += 1
        for _ in range(instances):
            pool.members.append(self._start_member(pool))
        self.write_targets()
        return pool

    def delete_pool(self, proxy_id: str) -> None:
        """Its members stop (deregistering), then its Proxy; its targets go."""
        pool = self.pools.pop(proxy_id)
        self.write_targets()
        for member in pool.members:
            self._stop_member(member, crash=False)
        self._group.stop_child(pool.proxy.name)

    def replace_oldest(self, proxy_ids: Sequence[str]) -> str:
        """One step of a rolling update over `proxy_ids`: the member that has lived longest
        is replaced by a new one (a new instance_id), started first and listed, then the
        old one stopped as a rollout stops a pod. The id replaced."""
        pool, old = min(((self.pools[p], m) for p in proxy_ids
                         for m in self.pools[p].members[:1]),
                        key=lambda pm: pm[1].serial)
        pool.members.append(self._start_member(pool))
        pool.members.remove(old)
        self.write_targets()
        self._stop_member(old, crash=False)
        return old.instance_id

    def crash(self, proxy_id: str, index: int) -> str:
        """Member `index` of the pool dies as a crashed pod does (engine and exporter
        killed, nothing deregistered); its replacement, as a Deployment would start,
        has a new instance_id. The id crashed."""
        pool = self.pools[proxy_id]
        old = pool.members.pop(index)
        self.write_targets()
        self._stop_member(old, crash=True)
        self.crashed.append(old.instance_id)
        pool.members.append(self._start_member(pool))
        self.write_targets()
        return old.instance_id

    def write_targets(self) -> None:
        write_file_sd(self._workdir, [*(p.as_demo_pool() for p in self.pools.values()),
                                      *self.static])

    def _start_member(self, pool: ChurnPool) -> Member:
        serial = next(self._serial)
        instance_id = f"{pool.proxy_id}-i-{serial}"
        engine_url, _ = start_sim_engine(self._group, instance_id, pool.proxy_url, SLOTS,
                                         serial, "--model", "soak", *self._flags.engine)
        url, exporter = start_instance_exporter(self._group, instance_id, pool.proxy_id,
                                                f"{engine_url}/metrics", "vllm")
        self.members_ever += 1
        return Member(instance_id, serial, url, exporter)

    def _stop_member(self, member: Member, *, crash: bool) -> None:
        self._group.stop_child(engine_name(member.instance_id), crash=crash)
        self._group.stop_child(exporter_name(member.instance_id), crash=crash)
