"""One member of a benchmark's fleet at a time: a demo Proxy, a simulated engine that
registers with it, the real Instance exporter in front of an engine.

The closed loop (bench/scheduling/fleet.py) starts its fleet once; the churn soak
(bench/churn/) starts and stops members all run long. Both start them here, so the
two measure the same processes started the same way. Each starter waits until its
process answers, and returns its URL and the child (whose pid the soak samples).
"""

from __future__ import annotations

from collections.abc import Sequence

from deploy.demo.cluster import engine_name, exporter_name
from deploy.demo.processes import Child, ProcessGroup, port_or_free, wait_ready


def start_proxy(group: ProcessGroup, proxy_id: str, *flags: str) -> tuple[str, Child]:
    """The demo Proxy (the Proxy library embedded) of pool `proxy_id`, with `flags`."""
    port = port_or_free(0)
    url = f"http://127.0.0.1:{port}"
    child = group.start_python(f"proxy-{proxy_id}", "deploy.demo.proxy",
                               "--proxy-id", proxy_id, "--listen", f"127.0.0.1:{port}", *flags)
    wait_ready(f"{url}/healthz", child)
    return url, child


def start_sim_engine(group: ProcessGroup, instance_id: str, proxy_url: str, slots: int,
                     seed: int, *flags: str) -> tuple[str, Child]:
    """A simulated engine of `slots` slots (its batch, registered as its capacity) that
    registers with `proxy_url` as `instance_id` and heartbeats until stopped."""
    port = port_or_free(0)
    child = group.start_python(
        engine_name(instance_id), "deploy.demo.engine_sim", "--listen", f"127.0.0.1:{port}",
        "--max-running", str(slots), "--register-url", proxy_url,
        "--instance-id", instance_id, "--capacity", str(slots), "--seed", str(seed),
        "--log-level", "WARNING", *flags)
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", child)
    return url, child


def start_instance_exporter(group: ProcessGroup, instance_id: str, proxy_id: str,
                            engine_metrics_url: str, engine: str, *,
                            simulated_gpus: Sequence[str] = ()) -> tuple[str, Child]:
    """The Instance exporter of `instance_id` in pool `proxy_id`, reading `engine`'s page
    at `engine_metrics_url` every half second. With `simulated_gpus`
    (deploy.demo.gpu_exporter's flags, `--gpus MODEL:COUNT ...`) the same exporter reads
    simulated GPUs through its real NVML collector."""
    port = port_or_free(0)
    module = (("deploy.demo.gpu_exporter", *simulated_gpus, "--") if simulated_gpus
              else ("poolscope.exporters.instance",))
    child = group.start_python(
        exporter_name(instance_id), *module,
        "--instance-id", instance_id, "--proxy-id", proxy_id,
        "--web.listen-address", f"127.0.0.1:{port}",
        "--engine-metrics-url", engine_metrics_url, "--engine", engine,
        "--sample-interval", "0.5", "--log.level", "warning")
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/healthz", child)
    return url, child
