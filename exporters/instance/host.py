"""Host CPU, memory and network, read with psutil (source="psutil").

CPU utilisation is computed from our own deltas of `cpu_times()` rather than
`psutil.cpu_percent()`, which answers 0.0 on its first call and whenever no
time has passed: a fake zero. Here the first sample simply has no CPU value.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from types import ModuleType

import psutil as _psutil
from prometheus_client.core import Metric

from poolscope.contract import catalog
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.common.window_rate import WindowRate
from poolscope.service.identity import Identity

SOURCE = catalog.SOURCE_PSUTIL
# On Linux guest time is already counted in user/nice; adding it would double it.
_NOT_IN_TOTAL = frozenset({"guest", "guest_nice"})
_IDLE = frozenset({"idle", "iowait"})


@dataclass(frozen=True)
class NicCounters:
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True)
class HostSample:
    monotonic: float
    wall_time: float
    cpu_utilization: float | None
    cpu_count: int | None
    memory_total: int
    memory_available: int
    network: dict[str, NicCounters] = field(default_factory=dict)
    # Megabits per second over the last interval, summed over interfaces; None
    # on the first sample (a rate needs two) or when an interface set changed.
    network_rx_mbps: float | None = None
    network_tx_mbps: float | None = None
    # Bytes per second over the exporter's last minute of samples: what the pool rules read.
    network_rx_rate: float | None = None
    network_tx_rate: float | None = None

    @property
    def memory_used(self) -> int:
        return self.memory_total - self.memory_available

    @property
    def memory_free_ratio(self) -> float | None:
        if self.memory_total <= 0:
            return None
        return self.memory_available / self.memory_total


def _busy_idle(times: object) -> tuple[float, float]:
    parts = times._asdict()  # type: ignore[attr-defined]
    total = sum(v for k, v in parts.items() if k not in _NOT_IN_TOTAL)
    idle = sum(v for k, v in parts.items() if k in _IDLE)
    return total, idle


class HostReader:
    name = "host"
    reasons = (ErrorReason.OS_ERROR,)

    def __init__(self, psutil: ModuleType = _psutil,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`psutil` and `monotonic` are seams for tests: scripted counters, a clock."""
        self._psutil = psutil
        self._monotonic = monotonic
        self._last_cpu: tuple[float, float] | None = None
        self._last: HostSample | None = None
        self._rx_rate = WindowRate()
        self._tx_rate = WindowRate()

    async def read(self) -> HostSample:
        return await asyncio.to_thread(self._read)

    def _read(self) -> HostSample:
        ps = self._psutil
        try:
            cpu = _busy_idle(ps.cpu_times())
            memory = ps.virtual_memory()
            nics = self._nics()
            count = ps.cpu_count(logical=True)
        except OSError as e:
            raise SampleError(ErrorReason.OS_ERROR, str(e)) from e
        sample = HostSample(
            monotonic=self._monotonic(), wall_time=time.time(),
            cpu_utilization=self._cpu_ratio(cpu), cpu_count=count,
            memory_total=int(memory.total), memory_available=int(memory.available),
            network=nics)
        sample = self._with_window_rates(self._with_rates(sample))
        self._last = sample
        return sample

    def _cpu_ratio(self, now: tuple[float, float]) -> float | None:
        last, self._last_cpu = self._last_cpu, now
        if last is None:
            return None
        total, idle = now[0] - last[0], now[1] - last[1]
        if total <= 0:
            return None
        return min(1.0, max(0.0, (total - idle) / total))

    def _nics(self) -> dict[str, NicCounters]:
        ps = self._psutil
        loopback = {name for name, st in ps.net_if_stats().items()
                    if "loopback" in getattr(st, "flags", "").split(",")}
        loopback.add("lo")
        return {name: NicCounters(int(c.bytes_recv), int(c.bytes_sent))
                for name, c in ps.net_io_counters(pernic=True).items() if name not in loopback}

    def _with_rates(self, sample: HostSample) -> HostSample:
        last = self._last
        if last is None or last.network.keys() != sample.network.keys():
            return sample
        elapsed = sample.monotonic - last.monotonic
        rx = sum(c.rx_bytes for c in sample.network.values()) - sum(
            c.rx_bytes for c in last.network.values())
        tx = sum(c.tx_bytes for c in sample.network.values()) - sum(
            c.tx_bytes for c in last.network.values())
        if elapsed <= 0 or rx < 0 or tx < 0:  # counter wrap or NIC reset: no rate
            return sample
        return replace(sample, network_rx_mbps=rx * 8 / elapsed / 1e6,
                       network_tx_mbps=tx * 8 / elapsed / 1e6)

    def _with_window_rates(self, sample: HostSample) -> HostSample:
        """The minute's rates; another set of interfaces starts their windows over, as a
        sum over other NICs is another counter."""
        last = self._last
        if last is not None and last.network.keys() != sample.network.keys():
            self._rx_rate.reset()
            self._tx_rate.reset()
        # No interface but loopback: nothing measured, not a rate of 0.
        nics = sample.network.values()
        self._rx_rate.observe(sample.monotonic, sum(c.rx_bytes for c in nics) if nics else None)
        self._tx_rate.observe(sample.monotonic, sum(c.tx_bytes for c in nics) if nics else None)
        return replace(sample, network_rx_rate=self._rx_rate.rate(),
                       network_tx_rate=self._tx_rate.rate())

    def families(self, sample: HostSample, ids: Identity) -> Iterator[Metric]:
        gauges: list[tuple[catalog.Family, float | None]] = [
            (catalog.HOST_CPU_UTILIZATION, sample.cpu_utilization),
            (catalog.HOST_CPU_COUNT, sample.cpu_count),
            (catalog.HOST_MEMORY_TOTAL, sample.memory_total),
            (catalog.HOST_MEMORY_USED, sample.memory_used),
            (catalog.HOST_MEMORY_AVAILABLE, sample.memory_available),
            (catalog.HOST_NETWORK_RECEIVE_RATE, sample.network_rx_rate),
            (catalog.HOST_NETWORK_TRANSMIT_RATE, sample.network_tx_rate),
        ]
        for family, value in gauges:
            if value is not None:
                metric = family.new()
                ids.add(metric, SOURCE, value)
                yield metric
        rx, tx = catalog.HOST_NETWORK_RECEIVE.new(), catalog.HOST_NETWORK_TRANSMIT.new()
        for nic, counters in sorted(sample.network.items()):
            ids.add(rx, SOURCE, counters.rx_bytes, nic)
            ids.add(tx, SOURCE, counters.tx_bytes, nic)
        yield rx
        yield tx
