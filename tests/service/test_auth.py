"""Basic auth with bcrypt hashes beside the bearer token: either passes, nothing else."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator

import bcrypt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from poolscope.service import auth
from poolscope.service.auth import OPEN_PATHS, Access
from poolscope.service.web import guarded

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def client_for(access: Access, headers: dict[str, str] | None = None) -> TestClient:
    app = web.Application(middlewares=guarded(access, headers))
    for path in ("/metrics", "/healthz", "/-/ready"):
        app.router.add_get(path, ok)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def both() -> AsyncIterator[TestClient]:
    client = await client_for(Access(bearer_token="tok", basic_users={"prom": HASH},
                                     open_paths=OPEN_PATHS | {"/-/ready"}))
    yield client
    await client.close()


@pytest.mark.parametrize(("headers", "status"), [
    (basic("prom", "s3cret"), 200),
    ({"Authorization": "Bearer tok"}, 200),
    (basic("prom", "wrong"), 401),
    (basic("nobody", "s3cret"), 401),
    (basic("prom", "x" * 100), 401),  # longer than bcrypt takes: refused, not an error
    ({"Authorization": "Basic not-base64!"}, 401),
    ({"Authorization": "Basic " + base64.b64encode(b"no-colon").decode()}, 401),
    ({"Authorization": "Bearer wrong"}, 401),
    ({}, 401),
])
async def test_either_credential_passes_and_nothing_else(
        both: TestClient, headers: dict[str, str], status: int) -> None:
    response = await both.get("/metrics", headers=headers)
    assert response.status == status
    if status == 401:
        assert set(response.headers.getall("WWW-Authenticate")) == {
            'Basic realm="poolscope"', 'Bearer realm="poolscope"'}
        assert response.headers.get("Connection") == "close"
        assert (await response.json())["error"] == "missing or wrong credentials"


async def test_a_password_that_passed_is_remembered_not_hashed_again(
        both: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (await both.get("/metrics", headers=basic("prom", "s3cret"))).status == 200
    calls = []
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda *a: calls.append(a) or real(*a))
    for _ in range(3):
        assert (await both.get("/metrics", headers=basic("prom", "s3cret"))).status == 200
    assert calls == []
    assert (await both.get("/metrics", headers=basic("prom", "other"))).status == 401
    assert len(calls) == 1
    for _ in range(3):  # a client repeating a wrong password costs no more hashing
        assert (await both.get("/metrics", headers=basic("prom", "other"))).status == 401
    assert len(calls) == 1


async def test_password_checks_leave_the_default_executor_to_the_collectors(
        both: TestClient) -> None:
    """bcrypt takes ~70 ms a check: on the threads the collectors sample on, a flood
    of wrong passwords would time their reads out."""
    import threading

    threads = []
    real = bcrypt.checkpw

    def spy(*args: bytes) -> bool:
        threads.append(threading.current_thread().name)
        return real(*args)

    bcrypt.checkpw = spy  # type: ignore[assignment]
    try:
        statuses = await asyncio.gather(*(both.get("/metrics", headers=basic("prom", f"w{i}"))
                                          for i in range(4)))
    finally:
        bcrypt.checkpw = real  # type: ignore[assignment]
    assert [r.status for r in statuses] == [401] * 4
    assert len(threads) == 4 and all(n.startswith("poolscope-bcrypt") for n in threads)


async def test_open_paths_answer_without_credentials(both: TestClient) -> None:
    for path in ("/healthz", "/-/ready"):
        response = await both.get(path)
        assert response.status == 200 and response.headers.get("Connection") == "close"
    refused = await both.post("/healthz")
    assert refused.status == 405 and refused.headers.get("Connection") == "close"


async def test_web_config_headers_are_on_every_answer() -> None:
    client = await client_for(Access(basic_users={"prom": HASH}),
                              {"Strict-Transport-Security": "max-age=31536000"})
    try:
        for headers in ({}, basic("prom", "s3cret")):
            response = await client.get("/metrics", headers=headers)
            assert response.headers["Strict-Transport-Security"] == "max-age=31536000"
    finally:
        await client.close()


async def test_a_flood_of_new_passwords_is_refused_unchecked_past_the_queue(
        both: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drive-by clients can hang up and free their slot while their check waits; past
    a few waiting, a new password is refused unchecked, and a known one still passes."""
    assert (await both.get("/metrics", headers=basic("prom", "s3cret"))).status == 200
    calls = []
    real = bcrypt.checkpw

    def slow(*args: bytes) -> bool:
        calls.append(args)
        time.sleep(0.05)
        return real(*args)

    monkeypatch.setattr(bcrypt, "checkpw", slow)
    flood = [both.get("/metrics", headers=basic("prom", f"guess-{i}")) for i in range(40)]
    statuses = await asyncio.gather(*flood, both.get("/metrics", headers=basic("prom", "s3cret")))
    assert [r.status for r in statuses] == [401] * 40 + [200]
    assert len(calls) < 40 - auth.MAX_WAITING_CHECKS
