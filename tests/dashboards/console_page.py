"""Reads the fleet console page back as data: one dict per pool row."""

from __future__ import annotations

from html.parser import HTMLParser


class PoolRows(HTMLParser):
    """Collects `<tr data-pool=...>` rows as {pool: {cell class: text}}."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self._pool: str | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "tr" and attr.get("data-pool"):
            self._pool = attr["data-pool"]
            self.rows[self._pool] = {}
        elif tag == "td" and self._pool is not None:
            self._cell = attr.get("class") or ""
            self.rows[self._pool][self._cell] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        elif tag == "tr":
            self._pool = None

    def handle_data(self, data: str) -> None:
        if self._pool is not None and self._cell is not None:
            self.rows[self._pool][self._cell] += data


def pool_rows(html: str) -> dict[str, dict[str, str]]:
    """Each pool row's cells, text with whitespace collapsed."""
    parser = PoolRows()
    parser.feed(html)
    return {pool: {cell: " ".join(text.split()) for cell, text in cells.items()}
            for pool, cells in parser.rows.items()}
