"""The engine's finished requests per second, over the exporter's own last minute.

The pool's QPS where no Proxy-side source counts requests (rules/proxy_pool.yml,
load.qps_1m_total): one gauge per Instance for the rule to sum, the window's
coverage settled here (exporters/common/window_rate.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from poolscope.contract import catalog
from poolscope.exporters.common.window_rate import WindowRate
from poolscope.exporters.instance.engine import EngineSample
from poolscope.service.identity import Identity


class SuccessRate:
    """Observes each engine sample; serves the rate of its success counter."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._window = WindowRate()
        self._source: str | None = None

    def observe(self, sample: EngineSample) -> None:
        # Another engine behind the URL counts other requests from another start.
        if sample.source != self._source:
            self._window.reset()
            self._source = sample.source
        self._window.observe(self._monotonic(), sample.request_success)

    def families(self, ids: Identity) -> Iterator[Metric]:
        rate = self._window.rate()
        if rate is not None and self._source is not None:
            metric = catalog.ENGINE_REQUEST_SUCCESS_RATE.new()
            ids.add(metric, self._source, rate)
            yield metric
