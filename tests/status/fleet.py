"""Canned fleets for the status tests: rollup series as the rules would store them,
built from fields.py so that a field rename cannot leave the tests feeding nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.canned_prometheus import RangeSeries, Series, series
from poolscope.bridge.summary import build_summaries, parse_value
from poolscope.bridge.trends import LOAD_RATIO_ROLLUP, SATURATION_ROLLUP, TREND_STEP_S
from poolscope.contract.fields import FIELDS, GPU_FIELDS, Field, Kind
from tests.proxy_bridge.pool_data import Inst

Matrix = list[RangeSeries]

GIB = 2**30
H100 = "NVIDIA H100 80GB HBM3"
# Label values a scrape target could send; none of it may reach a page as markup.
HOSTILE_POOL = "<script>alert('pool')</script>"
HOSTILE_MODEL = "\"><img src=x onerror=alert(1)>&amp;"

_BY_PATH: dict[str, Field] = {f.path: f for f in (*FIELDS, *GPU_FIELDS)}


def field_series(proxy_id: str, path: str, value: str, **labels: str) -> Series:
    """The rollup series that fills `path` (a state field: `value` names the state)."""
    f = _BY_PATH[path]
    if f.kind is Kind.STATE:
        return series(f.rollup, proxy_id, "1", "test", **{f.state_label: value})
    return series(f.rollup, proxy_id, value, "test", **f.matchers, **labels)


def gpu_series(proxy_id: str, model: str, healthy: str | None, unhealthy: str | None,
               memory_bytes: str | None, used: str | None = None) -> list[Series]:
    """One model's capacity series; a None value is a rollup the rules did not write."""
    values = {"gpus.healthy": healthy, "gpus.unhealthy": unhealthy,
              "gpus.memory_total_bytes": memory_bytes, "gpus.used": used}
    return [field_series(proxy_id, path, v, gpu_model=model)
            for path, v in values.items() if v is not None]


def busy_pool(proxy_id: str = "prefill-h100") -> list[Series]:
    """Every pool field measured, 8 healthy H100 (3.5 of them busy) and 1 unhealthy."""
    values = {
        "instances.total": "5", "instances.alive": "4", "instances.stale": "1",
        "instances.missing_resource": "0", "instances.with_resource": "4",
        "instances.idle": "1", "instances.idle_unknown": "2",
        "load.load_ratio": "0.62", "load.saturation": "0.35",
        "utilization.gpu_util_avg": "0.42", "utilization.gpu_mem_used_ratio": "0.3",
        "health.pool_admission_state": "accepting",
    }
    return [*(field_series(proxy_id, p, v) for p, v in values.items()),
            *gpu_series(proxy_id, H100, "8", "1", str(8 * 80 * GIB), used="3.5")]


def blind_pool(proxy_id: str = "decode-cpu") -> list[Series]:
    """The Proxy reports its registry and nothing else: every ratio is unknown."""
    return [field_series(proxy_id, "instances.total", "2"),
            field_series(proxy_id, "instances.alive", "2"),
            field_series(proxy_id, "instances.stale", "0"),
            field_series(proxy_id, "instances.idle", "0"),
            field_series(proxy_id, "instances.idle_unknown", "2")]


def hostile_pool() -> list[Series]:
    return [field_series(HOSTILE_POOL, "load.load_ratio", "0.5"),
            *gpu_series(HOSTILE_POOL, HOSTILE_MODEL, "1", "0", str(24 * GIB))]


def summaries(vector: list[Series], at: float = 1_700_000_000.0) -> dict[str, dict[str, Any]]:
    """What the bridge serves for `vector`, without a bridge."""
    return build_summaries([(m, parse_value(v)) for m, v in vector], at)


def trend_matrix(proxy_id: str, now: float, load: Callable[[int], float | None],
                 saturation: Callable[[int], float | None]) -> Matrix:
    """Both trend rollups of a pool: a point every step over the 20 minutes up to three
    steps past `now` (a bridge slow to start still finds its newest slots), its value a
    function of the steps back from there (None: none)."""
    steps = int(20 * 60 / TREND_STEP_S)
    end = (now // TREND_STEP_S + 3) * TREND_STEP_S
    out: Matrix = []
    for rollup, value in ((LOAD_RATIO_ROLLUP, load), (SATURATION_ROLLUP, saturation)):
        points = [(end - k * TREND_STEP_S, f"{v:g}") for k in range(steps, -1, -1)
                  if (v := value(k)) is not None]
        out.append(({"__name__": rollup, "proxy_id": proxy_id, "source": "derived"}, points))
    return out


DRILLED = "prefill-h100"


def drilled_instances() -> list[Inst]:
    """One pool in every per-Instance state: GPUs with one unhealthy, plain, stale at
    the Proxy, and alive with its exporter gone (missing resource data)."""
    return [Inst("h100-a", gpus=4, unhealthy_gpus=1), Inst("h100-b", gpus=4),
            Inst("h100-c", alive=False, gpus=4), Inst("h100-d", exporter_up=False)]


def drilled_trend(now: float) -> Matrix:
    """Load rising to 70% with a minute of no data 4 minutes ago; saturation flat 35%."""
    return trend_matrix(DRILLED, now,
                        lambda k: None if 18 <= k < 22 else 0.7 - max(k - 5, 0) / 100,
                        lambda k: 0.35)
