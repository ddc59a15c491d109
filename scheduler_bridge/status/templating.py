"""The status pages' one Jinja environment: templates/ beside this module, autoescaped.

Every label value a page shows (proxy_id, instance_id, gpu_model) comes from a scrape
target: autoescaped, a template cannot forget to escape one, as whatever it prints is
text unless it is Markup (a chart, a section already drawn). StrictUndefined: a name
a template expects and was not given is an error, not an empty cell. Built once, at
import, so each template is compiled once (no reload: they ship with the package).
The filters are the view model's formatting, so the terminal and the pages agree.
"""

from __future__ import annotations

import re
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from jinja2.ext import Extension

from poolscope.scheduler_bridge.status import model
from poolscope.scheduler_bridge.status.pool_view import load_text, resource_text
from poolscope.service.identity import valid_id

_BREAK = re.compile(r"\n\s*")


class Compact(Extension):
    """Drops every line break of a template and the indentation after it: templates
    are laid out to be read, pages stay one line of HTML, and no space a layout adds
    can fall between two inline elements and show. A space a page needs stays within
    a line."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return _BREAK.sub("", source)


ENV = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(("html", "svg")),
    undefined=StrictUndefined,
    auto_reload=False,
    extensions=[Compact],
)
ENV.filters.update((f.__name__, f) for f in (
    model.count, model.duration, model.fill, model.gibibytes, model.level, model.percent,
    model.seconds, model.state, model.timestamp, load_text, resource_text))
ENV.tests["valid_id"] = valid_id
ENV.globals.update(LEGEND=model.LEGEND, NO_TREND=model.NO_TREND, UNKNOWN=model.UNKNOWN,
                   STALE_CAUSE=model.STALE_CAUSE,
                   # The one hatch pattern every chart's gaps use, defined once a page.
                   HATCH_ID="unknown-hatch")
