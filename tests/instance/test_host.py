"""Host readings through a scripted psutil, so every delta is exact."""

from __future__ import annotations

import pytest

from harness.fake_gpus import FakePsutil, NicIo, cpu
from poolscope.exporters.common.health import ErrorReason
from poolscope.exporters.common.sampling import SampleError
from poolscope.exporters.instance.host import HostReader
from poolscope.service.identity import Identity

IDS = Identity("proxy-a", "inst-1")


def fake(**kw: object) -> FakePsutil:
    nics = [{"lo": NicIo(bytes_sent=5, bytes_recv=5),
             "eth0": NicIo(bytes_sent=1_000, bytes_recv=2_000),
             "docker0": NicIo(bytes_sent=0, bytes_recv=0)},
            {"lo": NicIo(bytes_sent=9, bytes_recv=9),
             "eth0": NicIo(bytes_sent=1_000 + 125_000, bytes_recv=2_000 + 250_000),
             "docker0": NicIo(bytes_sent=0, bytes_recv=0)}]
    return FakePsutil(cpu=[cpu(100, 300), cpu(130, 370)], nics=nics, **kw)  # type: ignore[arg-type]


async def test_cpu_is_absent_on_the_first_sample_and_a_delta_after() -> None:
    reader = HostReader(fake().module())
    first = await reader.read()
    second = await reader.read()
    assert first.cpu_utilization is None  # no delta yet: unmeasured, not 0
    assert second.cpu_utilization == pytest.approx(30 / 100)
    assert second.cpu_count == 16


async def test_memory_used_is_total_minus_available() -> None:
    sample = await HostReader(fake().module()).read()
    assert sample.memory_used == 16 * 2**30
    assert sample.memory_free_ratio == pytest.approx(0.75)


async def test_loopback_is_excluded_and_rates_need_two_samples() -> None:
    reader = HostReader(fake().module())
    first = await reader.read()
    second = await reader.read()
    assert set(first.network) == {"eth0", "docker0"}
    assert first.network_rx_mbps is None
    assert second.network_rx_mbps is not None and second.network_rx_mbps > 0
    assert second.network_tx_mbps is not None and second.network_tx_mbps > 0
    families = {m.name: m for m in reader.families(second, IDS)}
    rx = families["poolscope_host_network_receive_bytes"]
    tx = families["poolscope_host_network_transmit_bytes"]
    assert {s.labels["device"]: s.value for s in rx.samples} == {"docker0": 0, "eth0": 252_000}
    assert {s.labels["device"]: s.value for s in tx.samples} == {"docker0": 0, "eth0": 126_000}


async def test_os_error_fails_the_sample_with_os_error() -> None:
    reader = HostReader(fake(error=PermissionError(13, "denied")).module())
    with pytest.raises(SampleError) as err:
        await reader.read()
    assert err.value.reason is ErrorReason.OS_ERROR
