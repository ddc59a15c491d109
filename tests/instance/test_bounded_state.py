"""The Instance exporter keeps nothing per model or NIC that outlives it: models loaded
and unloaded behind a router and interfaces that come and go leave the state at what
the engine and host have now (docs/design.md, "Per-key state and its bounds")."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from harness.fake_gpus import FakePsutil, NicIo, cpu
from poolscope.exporters.instance.host import HostReader
from tests.instance.conftest import EngineServer, MakeExporter


def _router_page(models: dict[str, int]) -> str:
    """A vLLM page with one `model_name` per loaded model, each model's series scaled by
    its number (its counters as if it served that many requests a second since t=0)."""
    lines = []
    for model, n in models.items():
        at = f'engine="0",model_name="{model}"'
        lines += [f"vllm:num_requests_running{{{at}}} {n}",
                  f"vllm:num_requests_waiting{{{at}}} 0",
                  f"vllm:kv_cache_usage_perc{{{at}}} 0.25",
                  f'vllm:request_success_total{{{at},finished_reason="stop"}} {100 * n}',
                  f"vllm:prompt_tokens_total{{{at}}} {1000 * n}",
                  f"vllm:generation_tokens_total{{{at}}} {500 * n}"]
    return "\n".join(lines) + "\n"


def _series(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(s.name, tuple(sorted(s.labels.items())))
            for m in registry.collect() for s in m.samples}


async def test_models_loaded_and_unloaded_leave_nothing_behind(
        make_exporter: MakeExporter, engine_server: EngineServer) -> None:
    """Two models loaded at a time, one swapped for a new one at every sample: each
    sample is the page's models summed, and the page keeps the same series however
    many models came and went (no model label, nothing kept per model)."""
    exporter, registry = make_exporter(engine_metrics_url=engine_server.url,
                                       engine="vllm", gpu_collector=False,
                                       host_collector=False)
    seen = []
    for i in range(1, 101):
        engine_server.body = _router_page({f"model-{i}": i, f"model-{i + 1}": i + 1})
        await exporter.loop.sample_all()
        assert exporter.engine is not None and exporter.engine.value is not None
        assert exporter.engine.value.running == 2 * i + 1
        seen.append(_series(registry))
    assert all(s == seen[1] for s in seen[1:])
    assert not any(value.startswith("model-") for s in seen for _name, labels in s
                   for _key, value in labels)


async def test_interfaces_that_come_and_go_are_not_kept() -> None:
    """A host whose containers' veth interfaces come and go: the counters served are
    those of the interfaces there now."""
    nics = [{"eth0": NicIo(t, t), f"veth{t}": NicIo(t, t)} for t in range(500)]
    psutil = FakePsutil(cpu=[cpu(100 + t, 300 + t) for t in range(500)], nics=nics)
    clock = [0.0]
    reader = HostReader(psutil.module(), monotonic=lambda: clock[0])
    for t in range(500):
        clock[0] = float(t)
        sample = await reader.read()
        assert sample.network.keys() == {"eth0", f"veth{t}"}
    assert reader._last is not None and reader._last.network.keys() == {"eth0", "veth499"}
