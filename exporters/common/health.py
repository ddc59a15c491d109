"""Per-collector health, in node_exporter's pattern.

A scrape must say not only what was measured but whether each collector is
still measuring: a success gauge, the time and (monotonic) age of the last
good sample, how long sampling took, and why it failed. Consumers derive
freshness and `data_quality` from these numbers instead of guessing from a
value that merely stopped changing.

The error reasons are a closed vocabulary so that the `reason` label stays
bounded no matter what an engine or driver throws at us.

A collector with nothing to read on this host (no NVIDIA driver on a CPU-only
host) is not failing, as in node_exporter: it is *unavailable*, a state with a
reason of its own vocabulary. It then publishes one info series and none of the
others: a success of 0 and a rising error counter would page someone for every
CPU-only host, and a success of 1 would claim a measurement that was never made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client.core import Metric

from poolscope.contract import catalog
from poolscope.contract.catalog import Family


class ErrorReason(StrEnum):
    """Why a sample failed; the only values the `reason` label can take."""

    TIMEOUT = "timeout"
    CONNECTION = "connection"
    HTTP_STATUS = "http_status"
    PARSE = "parse"
    INVALID_VALUE = "invalid_value"
    TOO_LARGE = "too_large"
    NVML_UNAVAILABLE = "nvml_unavailable"
    NVML_READ = "nvml_read"
    OS_ERROR = "os_error"
    INTERNAL = "internal"


class UnavailableReason(StrEnum):
    """Why a collector has nothing to read; the values of catalog.UNAVAILABLE_REASONS."""

    NO_NVML_LIBRARY = "no_nvml_library"
    DRIVER_NOT_LOADED = "driver_not_loaded"


@dataclass(frozen=True)
class HealthFamilies:
    """Which catalog families a board fills; None where an exporter has no such family.

    The Instance exporter publishes all six; the Proxy exporter's catalog has
    only success and duration, so it passes None for the rest.
    """

    success: Family
    duration: Family
    last_success: Family | None = None
    sample_age: Family | None = None
    errors: Family | None = None
    unavailable: Family | None = None


INSTANCE_HEALTH = HealthFamilies(
    success=catalog.COLLECTOR_SUCCESS,
    duration=catalog.COLLECTOR_DURATION,
    last_success=catalog.COLLECTOR_LAST_SUCCESS,
    sample_age=catalog.COLLECTOR_SAMPLE_AGE,
    errors=catalog.COLLECTOR_ERRORS,
    unavailable=catalog.COLLECTOR_UNAVAILABLE,
)


class CollectorHealth:
    """The health record of one collector, updated after every sample."""

    def __init__(self, name: str, reasons: Iterable[ErrorReason],
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.name = name
        self._monotonic = monotonic
        self._wall = wall
        self.success: bool | None = None
        self.duration: float | None = None
        self.last_success_wall: float | None = None
        self._last_success_mono: float | None = None
        self.last_reason: ErrorReason | None = None
        # Set while the collector has nothing to read; a sample that succeeds or
        # fails clears it.
        self.unavailable_reason: UnavailableReason | None = None
        # Every reason the collector can hit starts at a measured 0, so the
        # first failure is an increase() Prometheus can see.
        self.errors: dict[ErrorReason, int] = dict.fromkeys(reasons, 0)

    def succeeded(self, duration: float) -> None:
        self.unavailable_reason = None
        self.success = True
        self.duration = duration
        self.last_reason = None
        self.last_success_wall = self._wall()
        self._last_success_mono = self._monotonic()

    def failed(self, reason: ErrorReason, duration: float) -> None:
        self.unavailable_reason = None
        self.success = False
        self.duration = duration
        self.last_reason = reason
        self.count_error(reason)

    def unavailable(self, reason: UnavailableReason) -> None:
        """Nothing to read: neither a success nor a failure, so both are forgotten."""
        self.unavailable_reason = reason
        self.success = None
        self.duration = None
        self.last_reason = None

    def count_error(self, reason: ErrorReason) -> None:
        """Count an error that did not fail the whole sample (one GPU of eight)."""
        self.errors[reason] = self.errors.get(reason, 0) + 1

    def age(self) -> float | None:
        """Seconds since the last success on the monotonic clock; None before the first."""
        if self._last_success_mono is None:
            return None
        return max(0.0, self._monotonic() - self._last_success_mono)


class HealthBoard:
    """Every collector's health in one exporter, emitted as catalog families."""

    def __init__(self, families: HealthFamilies = INSTANCE_HEALTH,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._families = families
        self._monotonic = monotonic
        self._wall = wall
        self._collectors: dict[str, CollectorHealth] = {}

    def add(self, name: str, reasons: Iterable[ErrorReason]) -> CollectorHealth:
        if name in self._collectors:
            raise ValueError(f"collector {name!r} registered twice")
        health = CollectorHealth(name, reasons, self._monotonic, self._wall)
        self._collectors[name] = health
        return health

    def __iter__(self) -> Iterator[CollectorHealth]:
        return iter(self._collectors.values())

    def families(self, prefix: Sequence[str]) -> Iterator[Metric]:
        """The health families; `prefix` is the label values before `collector`.

        For the Instance exporter that is (proxy_id, instance_id, source).
        """
        yield from self.sampled_families(prefix)
        yield from self.age_families(prefix)

    def sampled_families(self, prefix: Sequence[str]) -> Iterator[Metric]:
        """The families that only a sample changes, so a rendering of them stays
        right until the next sample (see poolscope.exporters.common.exposition)."""
        fam = self._families
        success, duration = fam.success.new(), fam.duration.new()
        last = fam.last_success.new() if fam.last_success else None
        errors = fam.errors.new() if fam.errors else None
        unavailable = fam.unavailable.new() if fam.unavailable else None
        for h in self._collectors.values():
            labels = [*prefix, h.name]
            if h.unavailable_reason is not None:
                if unavailable is not None:
                    unavailable.add_metric([*labels, h.unavailable_reason.value], 1.0)
                continue  # its one series; no health to report
            if h.success is not None:
                success.add_metric(labels, 1.0 if h.success else 0.0)
            if h.duration is not None:
                duration.add_metric(labels, h.duration)
            if last is not None and h.last_success_wall is not None:
                last.add_metric(labels, h.last_success_wall)
            if errors is not None:
                # A copy: a page rendered on a thread (the gateway adapter's) must not
                # see the loop add a reason it had not counted yet mid-iteration.
                for reason, count in tuple(h.errors.items()):
                    errors.add_metric([*labels, reason.value], float(count))
        yield from (m for m in (success, duration, last, errors, unavailable)
                    if m is not None)

    def age_families(self, prefix: Sequence[str]) -> Iterator[Metric]:
        """The sample ages, measured now: they change with every scrape."""
        if self._families.sample_age is None:
            return
        age = self._families.sample_age.new()
        for h in self._collectors.values():
            sample_age = h.age()
            if sample_age is not None and h.unavailable_reason is None:
                age.add_metric([*prefix, h.name], sample_age)
        yield age
