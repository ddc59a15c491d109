"""A real Alertmanager for tests (Debian's binary on a free loopback port) and the
webhook receiver it delivers to, run by the test itself.

What a test checks is what an operator's pager would receive: the notification
Alertmanager posts, with the labels and annotations the rules gave the alert. Either
the routing is deliberately trivial (`delivering_to`: everything to one webhook, each
alert its own group), or it is deploy/alertmanager/alertmanager.yml's, the example
operators start from, with its receivers pointed at the test's webhooks and its timers
shortened (`as_example`); tests/deploy/test_alertmanager_config.py checks its routing
with amtool.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from harness.prometheus import free_port, serving
from harness.static_http import serving_handler

__all__ = ["EXAMPLE", "Alertmanager", "Delivery", "Webhook", "as_example", "delivering_to",
           "running_alertmanager", "webhook_receiver"]

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"


@dataclass(frozen=True)
class Delivery:
    """One alert of one notification, and when this process received it (monotonic
    clock, so a test can order it against what it did to the system)."""

    received_at: float
    status: str  # this alert's own: "firing" or "resolved" (a group's may differ)
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass
class Webhook:
    """The receiver's URL and every notification posted to it so far."""

    url: str
    notifications: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def deliveries(self, alertname: str, status: str | None = None) -> list[Delivery]:
        """Every delivery of the alert `alertname` (with `status`, when given), oldest
        first: Alertmanager repeats and regroups, so a test looks for the one it expects."""
        with self.lock:
            received = list(self.notifications)
        found = [Delivery(at, a["status"], a["labels"], a["annotations"])
                 for at, body in received for a in body["alerts"]]
        return [d for d in found if d.labels.get("alertname") == alertname
                and status in (None, d.status)]


@contextmanager
def webhook_receiver() -> Iterator[Webhook]:
    """Collect the JSON Alertmanager posts (webhook_config's format, version 4)."""
    webhook = Webhook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with webhook.lock:
                webhook.notifications.append((time.monotonic(), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            """Silence per-request logging; the notifications are the record."""

    with serving_handler(Handler) as port:
        webhook.url = f"http://127.0.0.1:{port}/alerts"
        yield webhook


@dataclass(frozen=True)
class Alertmanager:
    """The API of a running Alertmanager (v2, the one Prometheus posts to)."""

    url: str
    address: str  # host:port, as Prometheus' alerting config names it

    def post(self, alerts: list[dict[str, Any]]) -> None:
        """Send alerts as Prometheus would (labels, annotations; no endsAt: firing)."""
        request = urllib.request.Request(
            f"{self.url}/api/v2/alerts", data=json.dumps(alerts).encode(), method="POST",
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10):
            pass

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert it holds, with its status (state, inhibitedBy, silencedBy)."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as r:
            return list(json.load(r))


def delivering_to(receiver_url: str) -> dict[str, Any]:
    """Every alert to one webhook, resolutions included. Each alert is its own group
    (`...`) and group_wait / group_interval are 1 s, so a firing or a resolution is
    posted about a second after Prometheus sends it; repeat_interval is long, so that a
    test sees one notification per change of state instead of a stream of repeats."""
    return {
        "route": {"receiver": "webhook", "group_by": ["..."], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "webhook", "webhook_configs": [
            {"url": receiver_url, "send_resolved": True}]}],
    }


def as_example(urls: dict[str, str], group_wait_s: float = 3.0,
               heartbeat_s: float = 2.0) -> dict[str, Any]:
    """The example config, each receiver's webhook posting to `urls[its name]`, and its
    timers seconds instead of minutes: group_interval 1 s, repeats an hour away (one
    notification per change of state, as in `delivering_to`) but for the Watchdog's
    receiver, which repeats every `heartbeat_s` as a dead man's switch expects. The
    group_wait stays longer than an alert group's interval, as the example's 30 s is
    than ALERT_INTERVAL_S: a cause evaluated in another group a moment after its
    symptom still arrives in time to inhibit it. Routes, matchers and inhibit rules
    are the example's own."""
    config = yaml.safe_load(EXAMPLE.read_text())
    assert {r["name"] for r in config["receivers"]} == urls.keys(), "a receiver per URL"
    for receiver in config["receivers"]:
        for webhook in receiver["webhook_configs"]:
            webhook["url"] = urls[receiver["name"]]

    def shorten(route: dict[str, Any]) -> None:
        heartbeat = route.get("receiver") == "watchdog"
        route |= {"group_wait": f"{group_wait_s:g}s", "group_interval": "1s",
                  "repeat_interval": f"{heartbeat_s:g}s" if heartbeat else "1h"}
        for child in route.get("routes", []):
            shorten(child)

    shorten(config["route"])
    return config


@contextmanager
def running_alertmanager(workdir: Path, config: dict[str, Any]) -> Iterator[Alertmanager]:
    """Start Alertmanager with `config` (delivering_to(url), or an example's); stop its
    process group after.

    `--cluster.listen-address=` (empty) turns off the gossip mesh, which would
    otherwise bind 0.0.0.0:9094 and collide with another test's Alertmanager."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "alertmanager.yml"
    config_path.write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{free_port()}"
    url = f"http://{address}"
    with serving("alertmanager", [
            f"--config.file={config_path}", f"--storage.path={workdir / 'data'}",
            f"--web.listen-address={address}", "--cluster.listen-address="],
            workdir, f"{url}/-/ready"):
        yield Alertmanager(url, address)
