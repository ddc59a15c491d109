"""The source names the rules write by hand are the code's: the membership sources in
their order of precedence, and the engine stand-in's name."""

from __future__ import annotations

import re

import yaml

from harness.prometheus import RULE_FILES
from poolscope.contract import catalog
from poolscope.contract.fields import MEMBERSHIP_SOURCES

RULES = {r["record"]: r["expr"] for path in RULE_FILES
         for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"] if "record" in r}


def _sources_in_order(expr: str) -> list[str]:
    """Every source an expression selects or sets, in the order it names them."""
    found = re.findall(r'source="([^"]+)"|"source", "([^"]+)"', expr)
    return list(dict.fromkeys(a or b for a, b in found))


def test_membership_precedence_is_the_documented_one() -> None:
    assert _sources_in_order(RULES["proxy_pool:instances:count"]) == list(MEMBERSHIP_SOURCES)


def test_the_engine_stand_in_is_named_as_the_catalog_names_it() -> None:
    for record in ("proxy_pool:inflight_requests:sum", "proxy_pool:requests:rate1m"):
        assert _sources_in_order(RULES[record])[-1] == catalog.SOURCE_ENGINE, record


def test_every_gateway_adapter_has_a_place_in_the_precedence() -> None:
    from poolscope.exporters.proxy.gateways import GATEWAYS

    assert [catalog.gateway_source(g) for g in GATEWAYS] == list(MEMBERSHIP_SOURCES[1:-1])
