"""GET /status: the same view as HTML, from the JSON routes' snapshot, autoescaped."""

from __future__ import annotations

from html.parser import HTMLParser

from poolscope.bridge.queries import SNAPSHOT_QUERY
from poolscope.scheduler_bridge.idle_instances import IDLE_QUERY
from tests.proxy_bridge.pool_data import Inst
from tests.status.conftest import MakeBridge
from tests.status.fleet import HOSTILE_MODEL, HOSTILE_POOL, blind_pool, busy_pool, hostile_pool


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text, as a browser would parse them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def attrs(self, name: str) -> list[str | None]:
        return [a[name] for _, a in self.tags if name in a]


async def test_the_page_shows_every_pool_and_refreshes_itself(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge([*busy_pool("busy"), *blind_pool("blind")])
    resp = await bridge.http.get("/status")
    assert resp.status == 200 and resp.content_type == "text/html"
    assert "script-src" not in resp.headers["Content-Security-Policy"]
    page = Elements(await resp.text())
    assert ("meta", {"http-equiv": "refresh", "content": "5"}) in page.tags
    assert page.attrs("data-pool").count("busy") == 2  # the pool table and the GPU table
    assert "62%" in page.text and "accepting" in page.text
    # blind: unknown bars, never a 0% bar
    blind_bars = [a for tag, a in page.tags if tag == "span" and "unknown" in (a.get("class") or "")
                  and a.get("title") == "unknown"]
    assert len(blind_bars) == 4 and "0%" not in page.text
    assert not any(tag in ("script", "link", "img") for tag, _ in page.tags)


async def test_the_page_uses_the_cached_snapshot_not_a_query_of_its_own(
        make_bridge: MakeBridge) -> None:
    bridge = await make_bridge(busy_pool("busy"))
    assert (await bridge.http.get("/debug/proxy_pool_resources")).status == 200
    for _ in range(3):
        assert (await bridge.http.get("/status")).status == 200
    # The rollups once, for the JSON; the Instances once, for what can be stopped.
    assert sorted(q for q, _ in bridge.prometheus.rollup_queries) == sorted(
        (SNAPSHOT_QUERY, IDLE_QUERY))


async def test_hostile_labels_are_text_in_every_page(make_bridge: MakeBridge) -> None:
    # A pool, a GPU model and an Instance (idle, so the fleet lists it) as a scrape
    # target could name them: text and attribute values on each page, never markup.
    evil = Inst(HOSTILE_POOL, idle_s=900.0, gpu_model=HOSTILE_MODEL)
    bridge = await make_bridge([*busy_pool("busy"), *hostile_pool()], local={"busy": [evil]})
    pages = {"/status": ("data-pool", "data-model", "data-instance"),
             "/status/pools/busy": ("data-instance",)}
    for path, attrs in pages.items():
        page = Elements(await (await bridge.http.get(path)).text())
        assert [tag for tag, _ in page.tags if tag in ("script", "img")] == [], path
        assert "onerror" not in {name for _, a in page.tags for name in a}, path
        assert HOSTILE_POOL in page.text and HOSTILE_MODEL in page.text, path
        for attr in attrs:
            assert {HOSTILE_POOL, HOSTILE_MODEL} & set(page.attrs(attr)), (path, attr)


async def test_no_snapshot_is_a_503_page_that_says_why(make_bridge: MakeBridge) -> None:
    bridge = await make_bridge([])
    bridge.prometheus.fail_status = 500
    resp = await bridge.http.get("/status")
    assert resp.status == 503 and resp.content_type == "text/html"
    assert "No snapshot recent enough" in await resp.text()
