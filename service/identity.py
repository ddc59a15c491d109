"""The identity labels every Instance-level series carries, and what an id may be.

Collectors only know what they measured and from where; this is the one place
that prepends `proxy_id` and `instance_id` and appends the `source`, in the
catalog's label order, so no collector can get the order wrong.

The id charset lives here, the lowest layer every service imports, because an id
crosses every one of them: an exporter publishes it as a label, the bridges take
it back in a URL path and put it into PromQL. One definition means an id that one
service accepts is never one that another refuses or only partly serves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client.core import Metric

# Short, printable and never in need of quoting: safe as a URL path segment, a
# label value, a PromQL string and a log field. Ids look like "hp_127.0.0.1:8001".
# Not dots alone: "." and ".." are path segments a URL resolves away, so a pool so
# named could never be addressed in the bridges' routes.
ID = re.compile(r"(?!\.+$)[A-Za-z0-9_.:\-]{1,128}")
ID_RULE = "1-128 of [A-Za-z0-9_.:-], not dots alone"


def valid_id(value: str) -> bool:
    """Python hands over a non-UTF-8 argv as surrogate escapes, which would only
    fail later, when the id is encoded for a page; the charset excludes them."""
    return ID.fullmatch(value) is not None


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
