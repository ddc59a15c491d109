"""The one place a proxy_id enters PromQL.

Unlike the Scheduler bridge, where a proxy_id is only ever a dict key, this bridge
puts its own pool's id into label matchers. An id that could close the string
literal (`a",__name__=~".+`) would turn "this pool" into "every series", so the id
is checked against the Scheduler bridge's allow-list when the process starts AND
escaped as a PromQL string literal every time it is used: either guard alone
keeps a hostile id out of the query's structure.
"""

from __future__ import annotations

from scheduler_bridge.app import PROXY_ID

# PromQL string literals follow Go's escaping; these are the characters that can end
# the literal or the line it is on.
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


class InvalidProxyId(ValueError):
    """The id is not 1-128 of [A-Za-z0-9_.:-]; the bridge refuses to start."""


def validate_proxy_id(proxy_id: str) -> str:
    if not PROXY_ID.fullmatch(proxy_id):
        raise InvalidProxyId(
            f"invalid --proxy-id {proxy_id!r}: expected 1-128 of [A-Za-z0-9_.:-]")
    return proxy_id


def string_literal(value: str) -> str:
    """`value` as a double-quoted PromQL string that evaluates to exactly `value`."""
    return f'"{value.translate(_ESCAPES)}"'


def pool_matcher(proxy_id: str) -> str:
    """The label matcher that confines a selector to one pool."""
    return f"proxy_id={string_literal(proxy_id)}"


def scoped(selector: str, proxy_id: str) -> str:
    """A bare `{...}` selector (the Scheduler bridge's snapshot queries) narrowed to
    one pool; anything else is refused rather than rewritten by guesswork."""
    if not (selector.startswith("{") and selector.endswith("}")) or "}" in selector[:-1]:
        raise ValueError(f"not a bare label selector: {selector!r}")
    return f"{selector[:-1]},{pool_matcher(proxy_id)}}}"
