"""The one place a proxy_id enters PromQL.

The Proxy bridge puts its own pool's id into label matchers, and the Scheduler
bridge's status pages put the id of the pool a person drills into. An id that could
close the string literal (`a",__name__=~".+`) would turn "this pool" into "every
series", so the id is checked against the id charset every service shares
(poolscope.service.identity) before it is used (at start-up, or on the request) AND
escaped as a PromQL string literal every time: either guard alone keeps a hostile id
out of the query's structure.
"""

from __future__ import annotations

from poolscope.service.identity import ID_RULE, valid_id

# PromQL string literals follow Go's escaping; these are the characters that can end
# the literal or the line it is on.
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


class InvalidProxyId(ValueError):
    """The id is outside the charset every service shares; the bridge refuses to start."""


def validate_proxy_id(proxy_id: str) -> str:
    if not valid_id(proxy_id):
        raise InvalidProxyId(f"invalid --proxy-id {proxy_id!r}: expected {ID_RULE}")
    return proxy_id


def string_literal(value: str) -> str:
    """`value` as a double-quoted PromQL string that evaluates to exactly `value`."""
    return f'"{value.translate(_ESCAPES)}"'


def pool_matcher(proxy_id: str) -> str:
    """The label matcher that confines a selector to one pool."""
    return f"proxy_id={string_literal(proxy_id)}"


def scoped(query: str, proxy_id: str) -> str:
    """One of the shared rollup queries narrowed to one pool: each holds exactly
    one `{...}` selector, which gets the pool's matcher; anything else is refused
    rather than rewritten by guesswork."""
    start, end = query.find("{"), query.find("}")
    if start < 0 or end < start or query.count("{") != 1 or query.count("}") != 1:
        raise ValueError(f"not a query with one label selector: {query!r}")
    return f"{query[:end]},{pool_matcher(proxy_id)}{query[end:]}"
