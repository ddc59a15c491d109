"""Poolscope's three Grafana dashboards: fleet, one pool, one Instance.

Pool-level panels read the `proxy_pool:*` recording rules, the same series
the Scheduler bridge serves, so a dashboard and the Scheduler can never
disagree. Instance-level panels read the exporters' raw series
(contract/catalog.py), which the rules read straight as well.

Each dashboard has its module (fleet, pool, instance), built from the selectors,
variables and state sets they share (queries) with the Grafana JSON builder
(grafana); this is their index, which `python -m dashboards` writes out.
"""

from __future__ import annotations

from dashboards.fleet import fleet
from dashboards.instance import instance
from dashboards.pool import pool

DASHBOARDS = {"poolscope-fleet.json": fleet, "poolscope-pool.json": pool,
              "poolscope-instance.json": instance}
