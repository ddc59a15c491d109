"""Basic auth with bcrypt hashes beside the bearer token: either passes, nothing else."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import AsyncIterator

import aiohttp
import bcrypt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from harness.polling import until
from poolscope.service import auth
from poolscope.service.auth import OPEN_PATHS, Access
from poolscope.service.middleware import guarded

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


def held_checks(monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], threading.Event]:
    """bcrypt held at its first check until the event is set, so that a queue forms
    in the order the test makes it; the passwords checked, in order."""
    checked = []
    release = threading.Event()
    real = bcrypt.checkpw

    def held(password: bytes, hashed: bytes) -> bool:
        checked.append(password)
        release.wait(timeout=60)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", held)
    return checked, release


async def test_a_flood_from_one_address_is_refused_unchecked_past_its_quota(
        both: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past a few checks waiting from one address, its new passwords get 429 (not 401:
    they were not looked at), and a password already checked still passes."""
    assert (await both.get("/metrics", headers=basic("prom", "s3cret"))).status == 200
    checked, release = held_checks(monkeypatch)
    flood = [asyncio.create_task(both.get("/metrics", headers=basic("prom", f"guess-{i}")))
             for i in range(40)]
    known = await both.get("/metrics", headers=basic("prom", "s3cret"))
    # One check under way, its address's quota queued behind it: the rest are answered.
    await until(lambda: sum(task.done() for task in flood),
                lambda n: n >= 40 - 1 - auth.PEER_WAITING_CHECKS, "the quota's 429s")
    release.set()
    responses = [*await asyncio.gather(*flood), known]
    assert responses[-1].status == 200
    crowded = [r for r in responses[:-1] if r.status == 429]
    assert {r.status for r in responses[:-1]} == {401, 429}
    assert all(r.headers["Retry-After"] == "1" and r.headers["Connection"] == "close"
               for r in crowded)
    assert len(checked) == 40 - len(crowded) <= 2 * auth.PEER_WAITING_CHECKS


async def test_new_credentials_wait_one_check_per_flooding_address_not_the_whole_flood(
        both: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checks are served round robin across client addresses: three addresses with a
    full queue each delay a fourth address's new password by one check each."""
    checked, release = held_checks(monkeypatch)
    sessions = {host: aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(host, 0), force_close=True))
        for host in ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")}
    url = both.make_url("/metrics")

    async def get(host: str, password: str) -> int:
        async with sessions[host].get(url, headers=basic("prom", password)) as response:
            return response.status

    try:
        flood = [asyncio.create_task(get(host, f"{host}-{i}"))
                 for i in range(auth.PEER_WAITING_CHECKS) for host in list(sessions)[:3]]
        await until(lambda: len(auth._waiting), lambda n: n == len(flood), "the flood queued")
        scraper = asyncio.create_task(get("127.0.0.5", "s3cret"))
        await until(lambda: len(auth._waiting), lambda n: n == len(flood) + 1,
                    "the scraper queued behind the flood")
        release.set()
        assert await scraper == 200
        assert set(await asyncio.gather(*flood)) == {401}
    finally:
        for session in sessions.values():
            await session.close()
    # FIFO would have checked all 12 guesses first; round robin, at most one per
    # flooding address after the check under way.
    assert checked.index(b"s3cret") <= 1 + 3


async def test_the_answers_remembered_are_capped_however_many_credentials_were_tried() -> None:
    """A flood of wrong passwords, then of right ones under many names: each kind of
    answer is held up to its cap, never one entry per credential ever tried."""
    basic_auth = auth._BasicAuth({"prom": HASH})
    answer = asyncio.get_running_loop().create_future()
    for i in range(3 * auth._REMEMBERED_MAX):
        for hashed, ok in ((None, False), (HASH, True)):
            check = auth._Check(b"pw", hashed, f"{ok}{i}".encode(), answer, lambda: True)
            basic_auth._remember(check, ok)
    assert len(basic_auth._failed) <= auth._REMEMBERED_MAX
    assert len(basic_auth._passed) <= auth._REMEMBERED_MAX
