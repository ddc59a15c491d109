"""The closed loop's fleet: pools of unequal capacity behind demo Proxies, each Instance
an engine (the demo's simulated one, or a real llama.cpp server) with the real Instance
exporter in front, then a real Prometheus running `rules/` and the real Scheduler bridge.

The engines and Proxies start once per run; Prometheus and the bridge start once per
scrape/evaluation interval (`monitoring`), on a fresh data folder, so each interval is
measured on rules that ran at that interval from their first evaluation.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.fleet_members import start_instance_exporter, start_proxy, start_sim_engine
from dashboards import console_flags
from deploy.demo.cluster import Pool, prometheus_binary, prometheus_config
from deploy.demo.processes import ProcessGroup, port_or_free, wait_ready
from harness import llama_server
from harness.tiny_model import write_tiny_llama

# The demo Proxy's request path; its queue timeout is long enough that a refusal is the
# policy's doing (a line full), not the timeout's.
PROXY_FLAGS = ("--strategy", "least_inflight", "--prepare-capacity", "256",
               "--ready-capacity", "256", "--queue-timeout", "120")
# The simulated engine's decode speed; request lengths are chosen in tokens.
SIM_TOKENS_PER_SECOND = 20.0
# Output tokens of a short and a long request, per backend: about 0.5 s and 5 s alone.
TOKENS = {"sim": (10, 100), "llama": (24, 240)}
# The pool that also takes local traffic, which no Scheduler sends.
LOCAL_POOL = "pool-b"
# Each llama.cpp slot's context: a long generation fits in it.
LLAMA_SLOT_CONTEXT = 512
# The random-weight model's shape: wide enough that a token costs about 7 ms alone on
# one thread (about 20 ms with 8 slots busy), so a request lasts seconds, as on a GPU.
LLAMA_MODEL_SHAPE = {"n_embd": 512, "n_layers": 4, "n_ff": 1024}


@dataclass(frozen=True)
class PoolSpec:
    proxy_id: str
    instances: int
    slots: int  # per Instance: the engine's batch, registered as its capacity

    @property
    def capacity(self) -> int:
        return self.instances * self.slots


# 8, 4 and 2 slots: unequal, so a policy that ignores capacity overloads the small pool.
SIM_POOLS = (PoolSpec("pool-a", 2, 4), PoolSpec("pool-b", 1, 4), PoolSpec("pool-c", 1, 2))
# One llama.cpp server per pool (one decode thread each): three on two cores already
# compete for them, and a slot costs no extra thread.
LLAMA_POOLS = (PoolSpec("pool-a", 1, 8), PoolSpec("pool-b", 1, 4), PoolSpec("pool-c", 1, 2))


@dataclass(frozen=True)
class Engine:
    instance_id: str
    url: str  # base URL, /metrics beside it


@dataclass(frozen=True)
class FleetPool:
    spec: PoolSpec
    proxy_url: str
    engines: tuple[Engine, ...]
    exporter_urls: tuple[str, ...]

    def as_demo_pool(self) -> Pool:
        return Pool(self.spec.proxy_id, self.proxy_url, self.exporter_urls)


@dataclass(frozen=True)
class Fleet:
    backend: str  # "sim" | "llama"
    pools: tuple[FleetPool, ...]
    workdir: Path
    group: ProcessGroup

    def pool(self, proxy_id: str) -> FleetPool:
        return next(p for p in self.pools if p.spec.proxy_id == proxy_id)


@dataclass(frozen=True)
class Monitoring:
    interval_s: float
    prometheus_url: str
    bridge_url: str
    bridge_pid: int  # to stop it for an outage


def _start_sim_engine(group: ProcessGroup, spec: PoolSpec, instance_id: str, proxy_url: str,
                      seed: int) -> Engine:
    url, _ = start_sim_engine(group, instance_id, proxy_url, spec.slots, seed,
                              "--model", "bench", "--max-waiting", "256",
                              "--tokens-per-second", f"{SIM_TOKENS_PER_SECOND:g}")
    return Engine(instance_id, url)


def _start_llama_engine(group: ProcessGroup, spec: PoolSpec, instance_id: str,
                        proxy_url: str, model: Path) -> Engine:
    directory = llama_server.server_dir()
    if directory is None or llama_server.missing_files(directory):
        raise SystemExit("bench.scheduling: llama.cpp's server is not built; run "
                         "`make llama-server` (it exports LLAMA_SERVER_DIR) first")
    port = port_or_free(0)
    argv = [str(directory / llama_server.BINARY), "-m", str(model), "--metrics",
            "-np", str(spec.slots), "-c", str(spec.slots * LLAMA_SLOT_CONTEXT), "-t", "1",
            "--threads-http", str(spec.slots + llama_server.HTTP_THREADS),
            "--host", "127.0.0.1", "--port", str(port)]
    child = group.start(f"llama-{instance_id}", argv)
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", child, timeout=120)
    group.start_python(f"register-{instance_id}", "bench.scheduling.register",
                       "--proxy-url", proxy_url, "--instance-id", instance_id,
                       "--engine-url", url, "--capacity", str(spec.slots))
    return Engine(instance_id, url)


def _wait_registered(proxy_url: str, instances: int, timeout_s: float = 60.0) -> None:
    """Until the Proxy lists every Instance alive: engines register on their own, and a
    pool short of one would calibrate and run on less than its capacity."""
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(f"{proxy_url}/v1/instance/list", timeout=5) as r:
            listed = len(json.load(r)["instances"])
        if listed == instances:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{proxy_url} lists {listed} of {instances} Instances "
                               f"after {timeout_s:g} s")
        time.sleep(0.1)


@contextmanager
def running_fleet(backend: str, specs: Sequence[PoolSpec], workdir: Path) -> Iterator[Fleet]:
    """Proxies, engines and exporters, stopped (their process groups) when the block ends."""
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    group = ProcessGroup(workdir / "logs")
    try:
        model = None
        if backend == "llama":
            directory = llama_server.server_dir()
            if directory is None:
                raise SystemExit("bench.scheduling: LLAMA_SERVER_DIR is unset; run it "
                                 "through `make llama-server` or set it to the build")
            model = write_tiny_llama(directory / llama_server.VOCAB, workdir / "bench.gguf",
                                     context_length=LLAMA_SLOT_CONTEXT, **LLAMA_MODEL_SHAPE)
        pools = []
        for p, spec in enumerate(specs):
            proxy_url, _ = start_proxy(group, spec.proxy_id, *PROXY_FLAGS)
            engines, exporters = [], []
            for i in range(spec.instances):
                instance_id = f"{spec.proxy_id}-inst-{i + 1}"
                engine = (_start_sim_engine(group, spec, instance_id, proxy_url, p * 100 + i)
                          if model is None else
                          _start_llama_engine(group, spec, instance_id, proxy_url, model))
                exporter_url, _ = start_instance_exporter(
                    group, instance_id, spec.proxy_id, f"{engine.url}/metrics",
                    "vllm" if model is None else "llamacpp")
                engines.append(engine)
                exporters.append(exporter_url)
            _wait_registered(proxy_url, spec.instances)
            pools.append(FleetPool(spec, proxy_url, tuple(engines), tuple(exporters)))
        yield Fleet(backend, tuple(pools), workdir, group)
    finally:
        group.stop()


@contextmanager
def monitoring(fleet: Fleet, interval_s: float, cache_ttl_s: float) -> Iterator[Monitoring]:
    """A real Prometheus with `rules/` scraping and evaluating every `interval_s`, and the
    real Scheduler bridge reading it at that interval with `cache_ttl_s`."""
    workdir = fleet.workdir / f"monitoring-{interval_s:g}s"
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "logs").mkdir(parents=True)
    group = ProcessGroup(workdir / "logs")
    try:
        prom_port, bridge_port = port_or_free(0), port_or_free(0)
        prom_url = f"http://127.0.0.1:{prom_port}"
        config = prometheus_config(workdir, interval_s,
                                   [p.as_demo_pool() for p in fleet.pools], {})
        prom = group.start("prometheus", [
            prometheus_binary(None), f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}", *console_flags()])
        wait_ready(f"{prom_url}/-/ready", prom)
        bridge = group.start_python(
            "scheduler-bridge", "poolscope.scheduler_bridge", "--prometheus-url", prom_url,
            "--evaluation-interval", f"{interval_s:g}", "--cache-ttl", f"{cache_ttl_s:g}",
            "--listen", f"127.0.0.1:{bridge_port}", "--log.level", "warning")
        bridge_url = f"http://127.0.0.1:{bridge_port}"
        wait_ready(f"{bridge_url}/healthz", bridge)
        yield Monitoring(interval_s, prom_url, bridge_url, bridge.process.pid)
    finally:
        group.stop()
