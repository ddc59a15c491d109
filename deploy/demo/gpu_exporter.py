"""The real Instance exporter over simulated GPUs, for the demo.

    python -m deploy.demo.gpu_exporter --gpus "NVIDIA H100 80GB HBM3:4" [--flaky-gpu 1] \\
        -- <poolscope-instance-exporter flags>

Everything after `--` is the exporter's own command line, parsed and served by its
own code (`poolscope.exporters.instance`); only the NVML module differs: a
`deploy.demo.sim_nvml.FakeNvml` whose GPUs follow the simulated engine's load, read
from the exporter's `--engine-metrics-url` at most once a second. Utilisation
tracks the running requests against `--max-running`, framebuffer memory the
engine's KV-cache usage on top of the weights. `--flaky-gpu N` makes GPU N fail
its reads for the last third of every `--flaky-period` seconds, so the unhealthy path (a GPU
neither used nor free) shows on the dashboards and the status page. The real
exporter has no such switch: a host's GPUs are what pynvml reports.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from deploy.demo.sim_nvml import FakeGpu, FakeNvml
from poolscope.exporters.instance.__main__ import serve
from poolscope.exporters.instance.config import PROG, Config, parse
from poolscope.service.argtypes import positive_float, positive_int
from poolscope.service.web import command

FLAKY_PERIOD_S = 90.0
REFRESH_S = 1.0
GIB = 2**30
# Framebuffer sizes of the models the demo names; others get 80 GiB.
MEMORY = {"NVIDIA H100 80GB HBM3": 80 * GIB, "NVIDIA L40S": 48 * GIB, "NVIDIA L4": 24 * GIB}
WEIGHTS_SHARE = 0.35  # of the framebuffer: the model's weights, resident whatever the load


@dataclass(frozen=True)
class EngineLoad:
    running_ratio: float
    kv_cache_usage: float


def read_engine(url: str, max_running: int) -> EngineLoad | None:
    """The simulated vLLM's running requests and KV usage; None when it does not answer."""
    running: list[float] = []
    kv: list[float] = []
    try:
        with urllib.request.urlopen(url, timeout=0.5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:num_requests_running":
                    running.append(sample.value)
                elif sample.name == "vllm:kv_cache_usage_perc":
                    kv.append(sample.value)
    except Exception:  # an engine away, or a page cut short: no reading this time
        return None
    if not running or not kv:
        return None
    # Requests add up across ranks; a GPU holds its own rank's cache, so the fullest.
    return EngineLoad(min(1.0, sum(running) / max_running), min(1.0, max(kv)))


class LoadFollowingNvml(FakeNvml):
    """GPUs whose utilisation and memory are the engine's load as `refresh` last read
    it (a thread of its own calls it every REFRESH_S, so an NVML read never waits on
    HTTP); one of them, if asked, failing now and then."""

    def __init__(self, gpus: list[FakeGpu], load: Callable[[], EngineLoad | None],
                 flaky: int | None = None, flaky_period_s: float = FLAKY_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(gpus)
        if not flaky_period_s > 0:
            raise ValueError("the flaky period must be positive")
        if flaky is not None and not 0 <= flaky < len(gpus):
            raise ValueError(f"no GPU {flaky} among {len(gpus)}")
        self._load, self._flaky, self._clock = load, flaky, clock
        self._period = flaky_period_s
        # Counted from now, so the flaky GPU is read healthy first and keeps its model
        # label while it fails (the collector learns a GPU's identity from a good read).
        self._started = clock()

    def _gpu(self, handle: int) -> FakeGpu:
        now = self._clock()
        self.failing = ({self._flaky} if self._flaky is not None
                        and (now - self._started) % self._period >= self._period * 2 / 3
                        else set())
        return super()._gpu(handle)

    def refresh(self) -> None:
        """Read the engine's load once and set every GPU's readings from it."""
        load = self._load()
        if load is None:  # the engine is away: the GPUs keep what they last showed
            return
        for i, gpu in enumerate(self.gpus):
            spread = 0.9 + 0.05 * (i % 3)  # tensor-parallel ranks are close, not equal
            gpu.util = round(min(100.0, 3 + 95 * load.running_ratio * spread))
            gpu.used = int(gpu.total * (WEIGHTS_SHARE + (1 - WEIGHTS_SHARE - 0.05)
                                        * load.kv_cache_usage))
            gpu.power_mw = int(80_000 + 620_000 * gpu.util / 100)
            gpu.temp = int(35 + 45 * gpu.util / 100)


GpuSpec = tuple[tuple[str, int], ...]


def gpu_spec(text: str) -> GpuSpec:
    """`MODEL:COUNT[,MODEL:COUNT...]`, e.g. `NVIDIA L4:2`."""
    spec = []
    for part in text.split(","):
        model, _, count = part.rpartition(":")
        if not model or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"expected MODEL:COUNT, got {part!r}")
        spec.append((model, int(count)))
    return tuple(spec)


def follow_in_background(nvml: LoadFollowingNvml) -> None:
    """Refresh `nvml` every REFRESH_S for the life of the process."""
    def loop() -> None:
        while True:
            nvml.refresh()
            time.sleep(REFRESH_S)

    threading.Thread(target=loop, name="demo-gpu-load", daemon=True).start()


def gpus_of(spec: GpuSpec, instance: str) -> list[FakeGpu]:
    """The spec's GPUs, with uuids stable across restarts and distinct per Instance."""
    models = [model for model, count in spec for _ in range(count)]
    return [FakeGpu(f"GPU-{instance}-{n:02d}", model, total=MEMORY.get(model, 80 * GIB))
            for n, model in enumerate(models)]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m deploy.demo.gpu_exporter SIM-FLAGS -- EXPORTER-FLAGS",
              file=sys.stderr)
        return 2
    cut = args.index("--")
    p = argparse.ArgumentParser(prog="python -m deploy.demo.gpu_exporter",
                                description=__doc__.splitlines()[0])
    p.add_argument("--gpus", required=True, type=gpu_spec, help="MODEL:COUNT[,MODEL:COUNT...]")
    p.add_argument("--max-running", type=positive_int, default=8,
                   help="the engine's batch size: running requests at 100%% utilisation")
    p.add_argument("--flaky-gpu", type=int, default=None,
                   help="index of a GPU that fails its reads now and then")
    p.add_argument("--flaky-period", type=positive_float, default=FLAKY_PERIOD_S,
                   help="seconds; the flaky GPU fails for the last third of each")
    sim = p.parse_args(args[:cut])
    exporter_args = args[cut + 1:]

    def simulated(config: Config) -> Coroutine[Any, Any, None]:
        url = config.settings.engine_metrics_url
        gpus = gpus_of(sim.gpus, config.settings.instance_id)
        nvml = LoadFollowingNvml(
            gpus, (lambda: read_engine(url, sim.max_running)) if url else (lambda: None),
            flaky=sim.flaky_gpu, flaky_period_s=sim.flaky_period)
        follow_in_background(nvml)
        return serve(config, nvml=nvml.module())

    return command(PROG, exporter_args, parse, simulated)


if __name__ == "__main__":
    sys.exit(main())
