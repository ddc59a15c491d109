"""One pool's raw series, indexed by Instance and name, read honestly.

A value is read only when the series it names is unambiguous: two series that
disagree for one Instance and name (say, two scrape jobs of one exporter) are not a
measurement, so the reading is None, like an absent series or a NaN.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from poolscope.bridge.summary import Sample

ByName = dict[str, list[Sample]]


def matching(samples: Sequence[Sample], **labels: str) -> list[Sample]:
    return [s for s in samples if all(s[0].get(k) == v for k, v in labels.items())]


def one(samples: Sequence[Sample], **labels: str) -> float | None:
    """The value of the series these labels select, None when absent or ambiguous."""
    values = {v for _, v in matching(samples, **labels)}
    return values.pop() if len(values) == 1 else None


def label_of(samples: Sequence[Sample], label: str, **labels: str) -> str | None:
    """The one value of `label` among the selected series, None when absent or mixed."""
    values = {s[0].get(label) for s in matching(samples, **labels)}
    return values.pop() if len(values) == 1 else None


@dataclass
class PoolSeries:
    """Series with an instance_id, per Instance; the Proxy's own (queues, up) apart."""

    instances: dict[str, ByName] = field(default_factory=dict)
    pool: ByName = field(default_factory=dict)

    @classmethod
    def index(cls, samples: Iterable[Sample]) -> PoolSeries:
        out = cls()
        for labels, value in samples:
            name = labels.get("__name__", "")
            instance_id = labels.get("instance_id")
            target = out.pool if instance_id is None else out.instances.setdefault(
                instance_id, {})
            target.setdefault(name, []).append((labels, value))
        return out

    def of(self, instance_id: str) -> Mapping[str, list[Sample]]:
        return self.instances.get(instance_id, {})
