"""Where each engine keeps the load numbers, by its real metric names and labels.

A field is a sum of series; each series lists candidate names, newest first,
and the first one on the page is read. A field with no series is one the
engine does not measure, and its Poolscope series stays absent (TGI and
llama.cpp have no KV-cache gauge: absent, never 0).

How the label sets of one series are combined (engine.py does it):
- `copies`: labels whose values are copies of one measurement, not parts of
  it (vLLM's `pid` with several API servers, where one copy is live and the
  others read 0; SGLang's `tp_rank` under context parallelism, where every
  rank reports the same requests). The copies of a sample count once: their
  maximum.
- `totals` (per series): labels whose empty value already holds the total of
  the others (SGLang's `priority` on its queue gauges). Within each rank, where
  that total is on the page only it is read, else the parts are summed.
- What is left are ranks (vLLM's `engine`, SGLang's `dp_rank`) or splits such
  as vLLM's `finished_reason`: counts are summed, the KV ratio gives a mean
  and a max over the ranks.
The reading of every engine is documented, with its sources, in
docs/metrics.md ("Engines").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Series:
    """One metric by its candidate names, optionally only the samples whose
    labels equal `where` (Prometheus semantics: a missing label equals "")."""

    names: tuple[str, ...]
    where: tuple[tuple[str, str], ...] = ()
    # Labels whose empty value holds the total of the others (SGLang's `priority`
    # on its queue gauges): within each rank, only that total is read where the
    # page has it, else the parts are summed.
    totals: tuple[str, ...] = ()


Field = tuple[Series, ...]


@dataclass(frozen=True)
class Derived:
    """A figure newer releases publish, computed from the series older ones have,
    rank by rank, as the engine itself computes it: `left - right` or `left / right`."""

    op: Literal["minus", "over"]
    left: Series
    right: Series


def read(*names: str, **where: str) -> Field:
    """A field read from one series."""
    return (Series(names, tuple(sorted(where.items()))),)


def queue_count(name: str) -> Field:
    """One of SGLang's request-count gauges: a total under priority="" beside one
    series per priority when priority scheduling is on."""
    return (Series((name,), totals=("priority",)),)


@dataclass(frozen=True)
class EngineMapping:
    engine: str
    # How auto-detection recognises the page: prefixes its sample lines start
    # with that no other engine's do.
    detect: tuple[str, ...]
    running: Field
    waiting: Field
    kv_cache_usage: Field
    request_success: Field
    prompt_tokens: Field
    generation_tokens: Field
    # A concurrency limit the engine states on its page (TensorRT-LLM's max batch).
    capacity: Field = ()
    # Whether the engine is awake, where it says so: 1 awake, 0 asleep, per rank
    # (vLLM's sleep mode). Not summed: any rank at 0 makes the Instance asleep.
    awake: Field = ()
    copies: tuple[str, ...] = ()
    # Other spellings of a name prefix (SGLang's `sglang_` for `sglang:`,
    # through metric bridges): a name is read under either.
    aliases: tuple[tuple[str, str], ...] = ()
    # A JSON document beside /metrics whose `total_slots` is the number of
    # requests the engine runs at once (llama.cpp's /props).
    slots_path: str | None = None
    # How older releases give a field that is not on their page.
    derived: tuple[tuple[str, Derived], ...] = ()

    def derivation(self, attr: str) -> Derived | None:
        """How older releases give `attr`, if they give it another way."""
        return next((d for field, d in self.derived if field == attr), None)

    def spellings(self, name: str) -> tuple[str, ...]:
        """`name` and its spellings under the aliases of its prefix."""
        return (name, *(alias + name[len(prefix):] for prefix, alias in self.aliases
                        if name.startswith(prefix)))

    def names(self) -> frozenset[str]:
        """Every metric name this mapping may read."""
        every = [s for attr in (*READ_FIELDS, *STATE_FIELDS) for s in getattr(self, attr)]
        every += [s for _attr, d in self.derived for s in (d.left, d.right)]
        return frozenset(spelling for series in every for name in series.names
                         for spelling in self.spellings(name))


# The fields every mapping fills, in the order the exporter publishes them.
LOAD_FIELDS = ("running", "waiting", "kv_cache_usage", "request_success", "prompt_tokens",
               "generation_tokens")
# Every field read from the page: the load, and the capacity an engine may state.
READ_FIELDS = (*LOAD_FIELDS, "capacity")
# Fields read from the page that are states, not amounts (engine.py reads each its own way).
STATE_FIELDS = ("awake",)

VLLM = EngineMapping(
    engine="vllm",
    detect=("vllm:",),
    running=read("vllm:num_requests_running"),
    waiting=read("vllm:num_requests_waiting"),
    # v1 renamed gpu_cache_usage_perc (deprecated in 0.9) to kv_cache_usage_perc.
    kv_cache_usage=read("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    request_success=read("vllm:request_success_total"),
    prompt_tokens=read("vllm:prompt_tokens_total"),
    generation_tokens=read("vllm:generation_tokens_total"),
    # Sleep mode's state set (absent from older releases): sleep_state="awake" is 0 while
    # the engine sleeps at either level (weights_offloaded, discard_all).
    awake=read("vllm:engine_sleep_state", sleep_state="awake"),
    copies=("pid",),
)

SGLANG = EngineMapping(
    engine="sglang",
    detect=("sglang:", "sglang_"),
    running=queue_count("sglang:num_running_reqs"),
    # Requests admitted but not yet running: the scheduler's queue, the grammar
    # queue (structured output being compiled) and, on disaggregated workers, the
    # prefill bootstrap and decode prealloc/transfer queues. The prefill inflight
    # queue is already computed (it only ships its KV), and the decode host-receive
    # queue is part of the transfer queue: neither is added.
    waiting=(*queue_count("sglang:num_queue_reqs"),
             *queue_count("sglang:num_grammar_queue_reqs"),
             *queue_count("sglang:num_prefill_bootstrap_queue_reqs"),
             *queue_count("sglang:num_decode_prealloc_queue_reqs"),
             *queue_count("sglang:num_decode_transfer_queue_reqs")),
    # token_usage is the fullest of the full, sliding-window and Mamba pools;
    # full_token_usage is the KV cache alone.
    kv_cache_usage=read("sglang:full_token_usage", "sglang:token_usage"),
    request_success=(),
    prompt_tokens=read("sglang:prompt_tokens_total"),
    generation_tokens=read("sglang:generation_tokens_total"),
    # Context-parallel ranks (and every TP rank with --enable-metrics-for-all-
    # schedulers) report the same requests, told apart only by tp_rank.
    copies=("tp_rank",),
    aliases=(("sglang:", "sglang_"),),
)

TGI = EngineMapping(
    engine="tgi",
    detect=("tgi_",),
    running=read("tgi_batch_current_size"),
    waiting=read("tgi_queue_size"),
    kv_cache_usage=(),
    # TGI's counters carry no `_total` suffix (metrics-exporter-prometheus).
    request_success=read("tgi_request_success"),
    prompt_tokens=(),
    generation_tokens=(),
)

LLAMACPP = EngineMapping(
    engine="llamacpp",
    detect=("llamacpp:",),
    running=read("llamacpp:requests_processing"),
    waiting=read("llamacpp:requests_deferred"),
    # Removed in 2025 (builds since have no KV figure: absent).
    kv_cache_usage=read("llamacpp:kv_cache_usage_ratio"),
    request_success=(),
    # Since 2025 prompt_tokens_total leaves out the tokens reused from the cache;
    # with them the count means what vLLM's and SGLang's mean: every prompt token.
    prompt_tokens=(*read("llamacpp:prompt_tokens_total"),
                   *read("llamacpp:prompt_tokens_cached_total")),
    generation_tokens=read("llamacpp:tokens_predicted_total"),
    slots_path="props",
)

# TensorRT-LLM's Triton backend (the inflight batcher). `waiting` and the KV
# `fraction` exist since backend v0.18; older backends give them the way the
# backend computes them: active - scheduled, and used / max blocks.
_TRT_REQUESTS = "nv_trt_llm_request_metrics"
_TRT_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
TRTLLM = EngineMapping(
    engine="trtllm",
    detect=("nv_trt_llm_",),
    running=read(_TRT_REQUESTS, request_type="scheduled"),
    waiting=read(_TRT_REQUESTS, request_type="waiting"),
    kv_cache_usage=read(_TRT_BLOCKS, kv_cache_block_type="fraction"),
    # Triton's own counter, for the backend's model under its conventional name
    # (an ensemble in front counts the same requests again under its own).
    request_success=read("nv_inference_request_success", model="tensorrt_llm"),
    # Per-request token histograms (backend v0.16+): their sums are token counters.
    prompt_tokens=read("nv_llm_input_token_len_sum"),
    generation_tokens=read("nv_llm_output_token_len_sum"),
    # The most requests the executor keeps active (its max batch size).
    capacity=read(_TRT_REQUESTS, request_type="max"),
    derived=(
        ("waiting", Derived("minus", *read(_TRT_REQUESTS, request_type="active"),
                            *read(_TRT_REQUESTS, request_type="scheduled"))),
        ("kv_cache_usage", Derived("over", *read(_TRT_BLOCKS, kv_cache_block_type="used"),
                                   *read(_TRT_BLOCKS, kv_cache_block_type="max"))),
    ),
)

# TensorRT-LLM's own server, trtllm-serve, on /prometheus/metrics (its /metrics is
# JSON), with return_perf_metrics and enable_iter_perf_stats on. Its gauges are
# set from the engine's iteration statistics, which it drains when a request
# completes; its one API-server process publishes them in prometheus_client's
# multiprocess mode, which labels each gauge with that process's pid.
TRTLLM_SERVE = EngineMapping(
    engine="trtllm-serve",
    detect=("trtllm_",),
    # Active requests: every request the executor holds, paused ones included (the
    # inference gateways' TotalRunningRequests for trtllm-serve).
    running=read("trtllm_num_requests_running"),
    waiting=read("trtllm_num_requests_waiting"),
    # Used over max KV blocks, as the engine computes it.
    kv_cache_usage=read("trtllm_kv_cache_utilization"),
    request_success=read("trtllm_request_success_total"),
    prompt_tokens=read("trtllm_prompt_tokens_total"),
    generation_tokens=read("trtllm_generation_tokens_total"),
    # The most requests the executor keeps active.
    capacity=read("trtllm_max_num_active_requests"),
    copies=("pid",),
)

MAPPINGS: dict[str, EngineMapping] = {
    m.engine: m for m in (VLLM, SGLANG, TGI, LLAMACPP, TRTLLM, TRTLLM_SERVE)}
