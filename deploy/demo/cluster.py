"""`make demo`: the whole stack on loopback, with load, for a fixed time or until Ctrl-C.

Per Proxy pool: a demo Proxy and its Instances, each Instance a simulated
engine plus the real Instance exporter in front of it. A real Prometheus runs
the project's rule files over them (targets through file-based service
discovery, as in `deploy/prometheus/`), the Scheduler and Proxy bridges serve
the pool summaries, and an open-loop load generator gives each pool its own
rate so the pools visibly differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from dashboards import CONSOLE_PATH, console_flags
from deploy.demo.processes import ProcessGroup, port_or_free, wait_ready
from poolscope.service import ports

REPO = Path(__file__).resolve().parents[2]
RULES = sorted((REPO / "rules").glob("*.yml"))
# The deployed config, whose exporter jobs' series filters the demo's jobs carry.
DEPLOYED_PROMETHEUS = REPO / "deploy" / "prometheus" / "prometheus.yml"
MAX_RUNNING = 8  # each simulated engine's batch
# What --simulate-gpus gives each Instance, by turns: MODEL:COUNT.
SIMULATED_MODELS = ("NVIDIA H100 80GB HBM3:4", "NVIDIA L40S:2")


@dataclass(frozen=True)
class Pool:
    proxy_id: str
    proxy_url: str
    exporter_urls: tuple[str, ...]
    bridge_url: str = ""  # its Proxy bridge, once Prometheus is up
    # The Instances' ids, in exporter_urls' order; empty: the demo's (instance_id_of).
    instance_ids: tuple[str, ...] = ()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m deploy.demo.cluster",
                                description=__doc__.splitlines()[0])
    p.add_argument("--proxies", type=int, default=2, help="Proxy pools (default 2)")
    p.add_argument("--instances", type=int, default=3, help="Instances per pool (default 3)")
    p.add_argument("--duration", type=float, default=0.0,
                   help="seconds to run, then stop cleanly; 0 runs until Ctrl-C")
    p.add_argument("--rate", type=float, default=4.0,
                   help="requests/s sent to the first pool; pool k gets rate*(k+1)")
    p.add_argument("--prometheus-port", type=int, default=9090,
                   help="preferred port; a free one is used when it is taken")
    p.add_argument("--scheduler-bridge-port", type=int, default=ports.SCHEDULER_BRIDGE)
    p.add_argument("--proxy-bridge-port", type=int, default=ports.PROXY_BRIDGE,
                   help="the first pool's Proxy bridge; the others take the next free ports")
    p.add_argument("--scrape-interval", type=float, default=2.0)
    p.add_argument("--simulate-gpus", action="store_true",
                   help="give each Instance simulated GPUs (two models, one GPU failing now "
                        "and then) read through the real NVML collector; `make demo` does")
    p.add_argument("--flaky-gpu-period", type=float, default=90.0,
                   help="seconds; the flaky simulated GPU fails for the last third of each")
    p.add_argument("--workdir", type=Path, default=None,
                   help="logs, Prometheus data and config (default: a temporary folder)")
    p.add_argument("--prometheus-bin", default=None,
                   help="Prometheus binary (default: $PROMETHEUS_BIN or `prometheus` on PATH)")
    args = p.parse_args(argv)
    if args.proxies < 1 or args.instances < 1:
        p.error("--proxies and --instances must be at least 1")
    if args.duration < 0 or args.rate < 0 or args.scrape_interval <= 0:
        p.error("--duration and --rate must be >= 0, --scrape-interval > 0")
    return args


def prometheus_binary(explicit: str | None) -> str:
    found = explicit or os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
    if not found:
        raise SystemExit("poolscope-demo: prometheus not found; run `make demo` (it installs "
                         "Debian's prometheus package) or pass --prometheus-bin")
    return found


def prometheus_config(workdir: Path, interval: float, pools: Sequence[Pool],
                      extra_jobs: dict[str, str]) -> Path:
    """Write file_sd target files and prometheus.yml; return the config path."""
    sd = write_file_sd(workdir, pools)
    step = f"{interval:g}s"

    deployed = {j["job_name"]: j for j in
                yaml.safe_load(DEPLOYED_PROMETHEUS.read_text())["scrape_configs"]}

    def job(name: str, sd_file: str) -> dict[str, object]:
        # honor_labels: the exporters' own proxy_id / instance_id are the truth. The
        # deployed job's filter on series names too, so the demo stores what a
        # deployment stores (and benchmarks over it count the same series).
        filters = deployed[name].get("metric_relabel_configs")
        return {"job_name": name, "honor_labels": True,
                "file_sd_configs": [{"files": [str(sd / sd_file)]}],
                **({"metric_relabel_configs": filters} if filters else {})}

    config = {
        "global": {"scrape_interval": step, "scrape_timeout": step, "evaluation_interval": step},
        "rule_files": [str(r) for r in RULES],
        "scrape_configs": [
            job("poolscope-instance", "instances.json"),
            job("poolscope-proxy", "proxies.json"),
            *({"job_name": name, "static_configs": [{"targets": [target]}]}
              for name, target in extra_jobs.items()),
        ],
    }
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_file_sd(workdir: Path, pools: Sequence[Pool]) -> Path:
    """The file_sd target files of `pools` (the Instance exporters, the Proxies) in
    workdir/file_sd, which it returns. Each file is replaced whole, so Prometheus, which
    rereads one whenever it changes, never reads half a file: a fleet whose members come
    and go calls this again after each change."""
    sd = workdir / "file_sd"
    sd.mkdir(exist_ok=True)
    proxies = [{"targets": [pool.proxy_url.removeprefix("http://")],
                "labels": {"proxy_id": pool.proxy_id}} for pool in pools if pool.proxy_url]
    for name, entries in (("instances.json", instance_targets(pools)),
                          ("proxies.json", proxies)):
        partial = sd / f".{name}.partial"
        partial.write_text(json.dumps(entries, indent=1))
        partial.replace(sd / name)
    return sd


def instance_targets(pools: Sequence[Pool]) -> list[dict[str, object]]:
    """The Instance exporters as file_sd entries, labelled as deploy/prometheus' targets
    are, so that `up` names the Instance that went dark (the alerts read it)."""
    return [{"targets": [url.removeprefix("http://")],
             "labels": {"proxy_id": pool.proxy_id,
                        "instance_id": (pool.instance_ids[k] if pool.instance_ids
                                        else instance_id_of(pool.proxy_id, k))}}
            for pool in pools for k, url in enumerate(pool.exporter_urls)]


def simulated_gpus(pool: int, instance: int, flaky_period_s: float) -> tuple[str, ...]:
    """Two GPU models across the fleet, alternating by Instance; the first Instance's
    second GPU fails its reads now and then, so an unhealthy GPU shows."""
    model = SIMULATED_MODELS[instance % len(SIMULATED_MODELS)]
    flaky = (("--flaky-gpu", "1", "--flaky-period", f"{flaky_period_s:g}")
             if pool == 0 and instance == 0 else ())
    return ("--gpus", model, "--max-running", str(MAX_RUNNING), *flaky)


def start_pools(group: ProcessGroup, args: argparse.Namespace) -> list[Pool]:
    """Proxies first (Instances register with them), then engines and exporters."""
    pools = []
    interval = f"{min(1.0, args.scrape_interval):g}"
    for p in range(args.proxies):
        proxy_id = f"pool-{p + 1}"
        port = port_or_free(0)
        proxy_url = f"http://127.0.0.1:{port}"
        child = group.start_python(f"proxy-{p + 1}", "deploy.demo.proxy",
                                   "--proxy-id", proxy_id, "--listen", f"127.0.0.1:{port}",
                                   "--prepare-capacity", "64", "--ready-capacity", "64")
        wait_ready(f"{proxy_url}/healthz", child)
        exporters = []
        for i in range(args.instances):
            instance_id = instance_id_of(proxy_id, i)
            engine_port, exporter_port = port_or_free(0), port_or_free(0)
            engine = group.start_python(
                engine_name(instance_id), "deploy.demo.engine_sim",
                "--listen", f"127.0.0.1:{engine_port}", "--model", "demo-llama-8b",
                "--max-running", str(MAX_RUNNING), "--max-waiting", "64",
                "--register-url", proxy_url, "--instance-id", instance_id, "--capacity", "8",
                "--seed", str(p * 100 + i))
            wait_ready(f"http://127.0.0.1:{engine_port}/health", engine)
            flags = ("--instance-id", instance_id, "--proxy-id", proxy_id,
                     "--web.listen-address", f"127.0.0.1:{exporter_port}",
                     "--engine-metrics-url", f"http://127.0.0.1:{engine_port}/metrics",
                     "--engine", "vllm", "--sample-interval", interval)
            simulated = (simulated_gpus(p, i, args.flaky_gpu_period) if args.simulate_gpus
                         else ())
            exporter = group.start_python(
                exporter_name(instance_id),
                *(("deploy.demo.gpu_exporter", *simulated, "--") if simulated
                  else ("poolscope.exporters.instance",)), *flags)
            exporter_url = f"http://127.0.0.1:{exporter_port}"
            wait_ready(f"{exporter_url}/healthz", exporter)
            exporters.append(exporter_url)
        pools.append(Pool(proxy_id, proxy_url, tuple(exporters)))
    return pools


def instance_id_of(proxy_id: str, index: int) -> str:
    """The demo's naming, which tests and benchmarks reuse: the k-th Instance (from 0) of
    pool p is p-inst-(k+1)."""
    return f"{proxy_id}-inst-{index + 1}"


def engine_name(instance_id: str) -> str:
    """The child name (and log file stem) of an Instance's simulated engine."""
    return f"engine-{instance_id}"


def exporter_name(instance_id: str) -> str:
    """The child name (and log file stem) of an Instance's exporter."""
    return f"exporter-{instance_id}"


@dataclass(frozen=True)
class Cluster:
    workdir: Path
    prometheus_url: str
    scheduler_bridge_url: str
    pools: tuple[Pool, ...]
    group: ProcessGroup

    def crash_engine(self, instance_id: str) -> None:
        """Kill one Instance's engine as a crash would: it never deregisters, so its
        Proxy marks it stale once the heartbeats stop, while its exporter keeps serving."""
        self.group.stop_child(engine_name(instance_id), crash=True)

    def stop_exporter(self, instance_id: str) -> None:
        """Stop one Instance's exporter: the Instance stays alive at its Proxy (its
        engine still heartbeats) with no fresh resource data."""
        self.group.stop_child(exporter_name(instance_id))


@contextmanager
def running_cluster(args: argparse.Namespace) -> Iterator[Cluster]:
    """Start the whole stack; stop exactly what was started when the block ends."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="poolscope-demo-"))
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    group = ProcessGroup(workdir / "logs")
    try:
        pools = start_pools(group, args)
        prom_port = port_or_free(args.prometheus_port)
        prom_url = f"http://127.0.0.1:{prom_port}"
        sched_port = port_or_free(args.scheduler_bridge_port)
        sched_url = f"http://127.0.0.1:{sched_port}"
        # Prometheus scrapes itself, as deploy/prometheus does: the alerts on the rules read it.
        config = prometheus_config(workdir, args.scrape_interval, pools,
                                   {"poolscope-scheduler-bridge": f"127.0.0.1:{sched_port}",
                                    "prometheus": f"127.0.0.1:{prom_port}"})
        prom = group.start("prometheus", [
            prometheus_binary(args.prometheus_bin), f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}", *console_flags()])
        wait_ready(f"{prom_url}/-/ready", prom)
        # The bridges read once per evaluation: tell them this Prometheus' interval.
        evaluation = ("--evaluation-interval", f"{args.scrape_interval:g}")
        bridge = group.start_python(
            "scheduler-bridge", "poolscope.scheduler_bridge", "--prometheus-url", prom_url,
            *evaluation, "--listen", f"127.0.0.1:{sched_port}")
        wait_ready(f"{sched_url}/healthz", bridge)
        pools = start_proxy_bridges(group, pools, prom_url, args.proxy_bridge_port, evaluation)
        load_args = [a for k, pool in enumerate(pools)
                     for a in ("--target", f"{pool.proxy_url}={args.rate * (k + 1):g}")]
        if args.rate:
            group.start_python("loadgen", "deploy.demo.loadgen", *load_args,
                               "--duration", f"{args.duration or 10 ** 7:g}")
        yield Cluster(workdir, prom_url, sched_url, tuple(pools), group)
    finally:
        group.stop()


def start_proxy_bridges(group: ProcessGroup, pools: Sequence[Pool], prom_url: str,
                        first_port: int, flags: Sequence[str]) -> list[Pool]:
    """One Proxy bridge per pool: the Proxy-local view sits beside its Proxy."""
    bridged = []
    for k, pool in enumerate(pools):
        port = port_or_free(first_port + k if first_port else 0)
        url = f"http://127.0.0.1:{port}"
        child = group.start_python(f"proxy-bridge-{pool.proxy_id}", "poolscope.proxy_bridge",
                                   "--proxy-id", pool.proxy_id, "--prometheus-url", prom_url,
                                   *flags, "--listen", f"127.0.0.1:{port}")
        wait_ready(f"{url}/healthz", child)
        bridged.append(replace(pool, bridge_url=url))
    return bridged


def run(args: argparse.Namespace) -> int:
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        with running_cluster(args) as cluster:
            print_urls(cluster)
            code = wait(cluster.group, args.duration, stop)
    except (RuntimeError, TimeoutError) as e:
        print(f"poolscope-demo: {e}", file=sys.stderr)
        return 1
    print(f"poolscope-demo: stopped {len(cluster.group.children)} processes; "
          f"logs in {cluster.workdir / 'logs'}")
    return code


def print_urls(cluster: Cluster) -> None:
    prom_url, sched_url = cluster.prometheus_url, cluster.scheduler_bridge_url
    lines = [
        "Poolscope demo is running:",
        f"  Prometheus        {prom_url}  (try: proxy_pool:load:ratio)",
        f"  Fleet console     {prom_url}{CONSOLE_PATH}",
        f"  Scheduler bridge  {sched_url}/debug/proxy_pool_resources",
        f"                    {sched_url}/debug/pool_resource_sources",
        f"  Fleet status      {sched_url}/status  (or: .venv/bin/poolscope-status "
        f"--bridge-url {sched_url})",
    ]
    for pool in cluster.pools:
        lines.append(f"  {pool.proxy_id:<17} status {sched_url}/status/pools/{pool.proxy_id}  "
                     f"(or: .venv/bin/poolscope-status --bridge-url {sched_url} {pool.proxy_id})")
        lines.append(f"  {'':<17} proxy bridge {pool.bridge_url}/debug/pool_resource"
                     "[?detail=local]")
        lines.append(f"  {'':<17} {pool.bridge_url}/debug/pool_resource_sources")
        lines.append(f"  {'':<17} proxy {pool.proxy_url}/metrics")
        lines.extend(f"  {'':<17} exporter {u}/metrics" for u in pool.exporter_urls)
    lines.append(f"  logs              {cluster.workdir / 'logs'}")
    print("\n".join(lines), flush=True)


def wait(group: ProcessGroup, duration: float, stop: dict[str, bool]) -> int:
    """Run until the duration ends or a signal arrives; a dead child fails the demo."""
    deadline = time.monotonic() + duration if duration else float("inf")
    while not stop["now"] and time.monotonic() < deadline:
        dead = [c for c in group.dead() if c.name != "loadgen" or c.process.returncode]
        if dead:
            for c in dead:
                print(f"poolscope-demo: {c.name} exited ({c.process.returncode}); "
                      f"see {c.log_path}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
