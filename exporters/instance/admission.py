"""Whether this Instance should get more work: the admission state.

Each measured input votes a level; the worst vote wins: engine KV-cache usage and
waiting requests at or above, host memory available / total at or below, their
degraded and saturated thresholds (defaults in contract/thresholds.py,
listed in docs/thresholds.md; each is a CLI flag, see `--help`).

`accepting` needs evidence about the engine: it is claimed only when the
engine's queue was measured in its latest sample. A measured bad signal (say,
host memory exhausted) is reported even when the engine is unreadable, but
"nothing wrong that we know of" with no engine reading is `unknown`, never
`accepting` — unknown is not idle.

`asleep` is the engine's own word that it is asleep (vLLM's sleep mode): it then
answers with 0 running, 0 waiting and an empty KV cache, which would read as
`accepting`, but it serves nothing until someone wakes it. It outranks every
threshold vote (an asleep engine's load says nothing), and only `draining` outranks it.

`draining` is set by the operator and overrides everything: start the exporter
with `--draining`, send it SIGUSR1 to start draining, SIGUSR2 to stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from prometheus_client.core import Metric

from poolscope.contract import catalog, thresholds
from poolscope.service.identity import Identity


class AdmissionState(StrEnum):
    ACCEPTING = "accepting"
    DEGRADED = "degraded"
    SATURATED = "saturated"
    ASLEEP = "asleep"
    DRAINING = "draining"
    UNKNOWN = "unknown"


assert {s.value for s in AdmissionState} == set(catalog.ADMISSION_STATES)
assert set(catalog.ADMISSION_LEVELS) == set(catalog.ADMISSION_STATES)


class _Level(IntEnum):
    OK = 0
    DEGRADED = 1
    SATURATED = 2


@dataclass(frozen=True)
class AdmissionThresholds:
    kv_degraded: float = thresholds.ADMISSION_KV_DEGRADED
    kv_saturated: float = thresholds.ADMISSION_KV_SATURATED
    queue_degraded: float = thresholds.ADMISSION_QUEUE_DEGRADED
    queue_saturated: float = thresholds.ADMISSION_QUEUE_SATURATED
    memory_degraded: float = thresholds.ADMISSION_MEMORY_DEGRADED
    memory_saturated: float = thresholds.ADMISSION_MEMORY_SATURATED

    def __post_init__(self) -> None:
        if not 0 <= self.kv_degraded <= self.kv_saturated <= 1:
            raise ValueError("need 0 <= kv degraded <= kv saturated <= 1")
        if not 0 <= self.queue_degraded <= self.queue_saturated:
            raise ValueError("need 0 <= queue degraded <= queue saturated")
        if not 0 <= self.memory_saturated <= self.memory_degraded <= 1:
            raise ValueError("need 0 <= memory saturated <= memory degraded <= 1")


@dataclass(frozen=True)
class AdmissionInputs:
    """The measured inputs; None where not measured."""

    kv_cache_usage: float | None
    waiting: float | None
    memory_free_ratio: float | None
    # The engine's sleep state where its page states one (EngineSample.asleep).
    asleep: bool | None = None


def _rising(value: float | None, degraded: float, saturated: float) -> _Level:
    if value is None or value < degraded:
        return _Level.OK
    return _Level.SATURATED if value >= saturated else _Level.DEGRADED


def decide(inputs: AdmissionInputs, th: AdmissionThresholds, draining: bool) -> AdmissionState:
    if draining:
        return AdmissionState.DRAINING
    if inputs.asleep:
        return AdmissionState.ASLEEP
    memory = _Level.OK
    if inputs.memory_free_ratio is not None:
        if inputs.memory_free_ratio <= th.memory_saturated:
            memory = _Level.SATURATED
        elif inputs.memory_free_ratio <= th.memory_degraded:
            memory = _Level.DEGRADED
    worst = max(_rising(inputs.kv_cache_usage, th.kv_degraded, th.kv_saturated),
                _rising(inputs.waiting, th.queue_degraded, th.queue_saturated),
                memory)
    if worst is _Level.SATURATED:
        return AdmissionState.SATURATED
    if worst is _Level.DEGRADED:
        return AdmissionState.DEGRADED
    return AdmissionState.ACCEPTING if inputs.waiting is not None else AdmissionState.UNKNOWN


class Admission:
    """The thresholds plus the operator's draining switch."""

    def __init__(self, thresholds: AdmissionThresholds | None = None,
                 draining: bool = False) -> None:
        self.thresholds = thresholds or AdmissionThresholds()
        self.draining = draining

    def state(self, inputs: AdmissionInputs) -> AdmissionState:
        return decide(inputs, self.thresholds, self.draining)

    def families(self, inputs: AdmissionInputs, ids: Identity) -> Iterator[Metric]:
        current = self.state(inputs)
        metric = catalog.INSTANCE_ADMISSION_STATE.new()
        for state in AdmissionState:
            ids.add(metric, catalog.SOURCE_DERIVED, 1.0 if state is current else 0.0,
                    state.value)
        yield metric
        level = catalog.INSTANCE_ADMISSION_LEVEL.new()
        ids.add(level, catalog.SOURCE_DERIVED, float(catalog.ADMISSION_LEVELS[current.value]))
        yield level
