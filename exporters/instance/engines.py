"""Where each engine keeps the load numbers, by its real metric names.

Each field lists candidate names, newest first; the first one on the page
wins. A field with no candidates is one the engine does not measure, and its
series stays absent (TGI has no KV-cache gauge: absent, never 0).

Running, waiting and the counters are summed over every label set the engine
exposes for them: vLLM's `engine` index and SGLang's `dp_rank` split one
replica into data-parallel ranks, and vLLM splits `request_success` by
`finished_reason`. The KV ratio is averaged over label sets, since every rank
has a pool of the same size.

Left out on purpose:
- SGLang has no success counter (`sglang:num_requests_total` counts requests
  that finished in any way), so request_success is absent for SGLang.
- TGI only has token histograms (`tgi_request_input_length`,
  `tgi_request_generated_tokens`) recorded on its own terms, not counters of
  tokens processed, so its token series are absent.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class EngineMapping:
    engine: str
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_cache_usage: tuple[str, ...]
    request_success: tuple[str, ...]
    prompt_tokens: tuple[str, ...]
    generation_tokens: tuple[str, ...]

    def names(self) -> frozenset[str]:
        """Every metric name this mapping may read."""
        return frozenset(n for f in fields(self) if f.name != "engine"
                         for n in getattr(self, f.name))


VLLM = EngineMapping(
    engine="vllm",
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    # v1 renamed gpu_cache_usage_perc (deprecated in 0.9) to kv_cache_usage_perc.
    kv_cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    request_success=("vllm:request_success_total",),
    prompt_tokens=("vllm:prompt_tokens_total",),
    generation_tokens=("vllm:generation_tokens_total",),
)

SGLANG = EngineMapping(
    engine="sglang",
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    kv_cache_usage=("sglang:token_usage",),
    request_success=(),
    prompt_tokens=("sglang:prompt_tokens_total",),
    generation_tokens=("sglang:generation_tokens_total",),
)

TGI = EngineMapping(
    engine="tgi",
    running=("tgi_batch_current_size",),
    waiting=("tgi_queue_size",),
    kv_cache_usage=(),
    # TGI's counters carry no `_total` suffix (metrics-exporter-prometheus).
    request_success=("tgi_request_success",),
    prompt_tokens=(),
    generation_tokens=(),
)

MAPPINGS: dict[str, EngineMapping] = {m.engine: m for m in (VLLM, SGLANG, TGI)}

# How `--engine auto` recognises a page: the prefix its sample lines start with.
DETECT_PREFIXES: dict[str, str] = {"vllm:": "vllm", "sglang:": "sglang", "tgi_": "tgi"}
