"""The identity labels every Instance-level series carries.

Collectors only know what they measured and from where; this is the one place
that prepends `proxy_id` and `instance_id` and appends the `source`, in the
catalog's label order, so no collector can get the order wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import Metric


@dataclass(frozen=True)
class Identity:
    proxy_id: str
    instance_id: str

    def labels(self, source: str, *extra: str) -> list[str]:
        """Label values in catalog order: proxy_id, instance_id, source, extras."""
        return [self.proxy_id, self.instance_id, source, *extra]

    def add(self, metric: Metric, source: str, value: float, *extra: str) -> None:
        """Add one sample to a family built by `Family.new()`."""
        metric.add_metric(self.labels(source, *extra), value)  # type: ignore[attr-defined]
