"""The simulated engine's /metrics, under vLLM v1's real names, HELP texts and labels.

Names, HELP strings, label names (`model_name`, `engine`) and histogram buckets
follow vllm/v1/metrics/loggers.py, so the Instance exporter parses the
simulator with exactly the code it uses against a real vLLM. Values are read
from the scheduler at scrape time (a custom collector), never mirrored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from deploy.demo.sim_scheduler import Scheduler
from deploy.demo.sim_stats import Histogram

LABELS = ["model_name", "engine"]
# A single engine core; vLLM numbers its data-parallel engines from 0.
ENGINE_INDEX = "0"

HELP = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:engine_sleep_state": (
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
        "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
        "level 2."),
}
# vLLM's sleep levels by the `sleep_state` each sets to 1 (0: awake).
SLEEP_STATES = (("awake", 0), ("weights_offloaded", 1), ("discard_all", 2))


@dataclass
class SleepMode:
    """vLLM's sleep mode: 0 awake, 1 weights offloaded, 2 weights and KV cache discarded.
    Set by the engine's /sleep and /wake_up; read at scrape time."""

    level: int = 0


class VllmCollector(Collector):
    def __init__(self, scheduler: Scheduler, sleep: SleepMode) -> None:
        self._scheduler = scheduler
        self._sleep = sleep
        self._labels = [scheduler.config.model, ENGINE_INDEX]

    def collect(self) -> Iterator[Metric]:
        s = self._scheduler
        yield self._gauge("vllm:num_requests_running", s.num_running)
        yield self._gauge("vllm:num_requests_waiting", s.num_waiting)
        yield self._gauge("vllm:kv_cache_usage_perc", s.kv_cache_usage())
        # As vLLM's record_sleep_state: one series per state, 1 for the current one.
        sleep = GaugeMetricFamily("vllm:engine_sleep_state", HELP["vllm:engine_sleep_state"],
                                  labels=[*LABELS, "sleep_state"])
        for state, level in SLEEP_STATES:
            sleep.add_metric([*self._labels, state], 1.0 if self._sleep.level == level else 0.0)
        yield sleep

        success = CounterMetricFamily("vllm:request_success", HELP["vllm:request_success"],
                                      labels=[*LABELS, "finished_reason"])
        for reason, n in s.stats.finished.items():
            success.add_metric([*self._labels, reason], n)
        yield success
        yield self._counter("vllm:prompt_tokens", s.stats.prompt_tokens)
        yield self._counter("vllm:generation_tokens", s.generation_tokens_total())

        yield self._histogram("vllm:time_to_first_token_seconds", s.stats.time_to_first_token)
        yield self._histogram("vllm:e2e_request_latency_seconds", s.stats.e2e_latency)
        yield self._histogram("vllm:request_queue_time_seconds", s.stats.queue_time)

    def _gauge(self, name: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, HELP[name], labels=LABELS)
        family.add_metric(self._labels, value)
        return family

    def _counter(self, name: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, HELP[name], labels=LABELS)
        family.add_metric(self._labels, value)
        return family

    def _histogram(self, name: str, hist: Histogram) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, HELP[name], labels=LABELS)
        family.add_metric(self._labels, hist.cumulative(), sum_value=hist.total)
        return family


def metrics_registry(scheduler: Scheduler, sleep: SleepMode) -> CollectorRegistry:
    """A registry of this engine's own, so engines in one process never share series."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmCollector(scheduler, sleep))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
