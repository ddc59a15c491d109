"""Who may read a Poolscope service: a bearer token, basic-auth users, or both.

The bearer token (`--auth-token-file`) was the first way; basic auth with bcrypt
hashes comes with the exporter-toolkit web config (`--web.config.file`), because
that is what Prometheus' `basic_auth` scrape option and every exporter-toolkit
service already speak. A request passes when it satisfies either. /healthz (and any
path the web config excludes) stays open: liveness probes must reach it without a
secret.

bcrypt is slow on purpose (about 70 ms at cost 10), so every answer is remembered,
keyed by an HMAC of user, hash and password under a key made at start-up (never the
password itself, nor a hash of it an offline guesser could test against): a scraper
pays once, and a client repeating a wrong password costs nothing more. Checks run on
one thread of their own, one at a time, so the event loop keeps serving and the
threads the collectors sample on stay free. An unknown user is checked against a
configured user's hash, so the answer takes as long as for a known one.

A flood of new wrong passwords is what is left, and it must not lock out a scraper
whose credentials are new to the process (the second Prometheus of an HA pair, a
rotated password, every scraper after a restart). Waiting checks are queued by
client address and served round robin, at most PEER_WAITING_CHECKS waiting per
address (past that, 429 at once, unchecked): one flooding address then delays
another's new credentials by one check, not by its whole queue, and holds a few
checks' worth of memory. The connection cap closes a connection waiting for its
check before an idle one, from the address holding the most slots first, so the
flood's waiting connections do not keep a scraper out either.

What this cannot do: an attacker on many addresses still gets one check each per
round, so a new credential waits about as many checks as there are flooding
addresses (at 70 ms a check, some 25 addresses take it past a 2 s scrape
deadline; credentials already checked pass at once whatever the flood); and a
scraper behind the flooding address, with credentials not yet checked, shares that
address's queue and may be answered 429 until the flood stops.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import concurrent.futures
import functools
import hmac
import importlib
import itertools
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Middleware

OPEN_PATHS = frozenset({"/healthz"})
_REMEMBERED_MAX = 4096  # answers held of each kind (32-byte keys)
# Checks one client address may have waiting for the bcrypt thread: a scraper has
# one credential at a time, a person trying a few passwords a handful.
PEER_WAITING_CHECKS = 4
BCRYPT_MAX_PASSWORD = 72  # bytes: bcrypt 5 refuses longer ones

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ErrorResponse = Callable[..., web.Response]


@dataclass(frozen=True)
class Access:
    bearer_token: str | None = None
    # user -> bcrypt hash ($2a$, $2b$ or $2y$), as in a web config's basic_auth_users
    basic_users: Mapping[str, bytes] = field(default_factory=dict)
    open_paths: frozenset[str] = OPEN_PATHS

    @property
    def required(self) -> bool:
        return self.bearer_token is not None or bool(self.basic_users)

    def challenges(self) -> list[str]:
        return ([*(['Basic realm="poolscope"'] if self.basic_users else []),
                 *(['Bearer realm="poolscope"'] if self.bearer_token else [])])


def _raw_header(request: web.Request, name: str) -> bytes:
    """The header's bytes as sent: aiohttp decodes them as UTF-8 with surrogate
    escapes, so a value that is not UTF-8 is not an error, only a value."""
    try:
        return request.headers.get(name, "").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # not from the wire: nothing it could equal
        return b""


def _basic_credentials(header: bytes) -> tuple[str, bytes] | None:
    scheme, _, encoded = header.partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, UnicodeDecodeError):
        return None


class Crowded(Exception):
    """The client's address already has PEER_WAITING_CHECKS checks waiting."""


@dataclass
class _Check:
    password: bytes
    hashed: bytes | None
    key: bytes
    answer: asyncio.Future[bool]
    # Whether the client still waits: a check whose connection closed (the cap
    # gave its slot away) is dropped unhashed when its turn comes.
    wanted: Callable[[], bool]


# The connections (aiohttp's protocol objects) whose request waits for a password
# check, and since when (loop time), for the connection cap to read.
_waiting: dict[object, float] = {}


def waiting_since(connection: object) -> float | None:
    """When the request on `connection` began waiting for its password check; None
    when it is not waiting. Such a connection does no work of its own, so the
    connection cap may give its slot to a new one."""
    return _waiting.get(connection)


class _BasicAuth:
    def __init__(self, users: Mapping[str, bytes]) -> None:
        # Imported only when users are configured: bcrypt's extension is half a MiB of
        # the Instance exporter's memory budget (docs/benchmarks.md), on every host.
        self._bcrypt = importlib.import_module("bcrypt")
        self._users = dict(users)
        # An unknown user's password is checked against a real user's hash (and then
        # refused whatever it matched), so the answer takes as long as for a known one.
        self._stand_in = next(iter(self._users.values()))
        self._secret = secrets.token_bytes(32)
        # Passing credentials apart from failing ones: a flood of wrong passwords
        # evicts only wrong ones, never the scraper's.
        self._passed: set[bytes] = set()
        self._failed: dict[bytes, None] = {}
        # Checks waiting, by client address; an address's place in the dict is its
        # turn, and it goes to the back once served.
        self._queues: dict[str, collections.deque[_Check]] = {}
        self._worker: asyncio.Task[None] | None = None

    async def check(self, user: str, password: bytes, request: web.Request) -> bool:
        """Whether the credentials are right; raises Crowded, unchecked, when the
        client's address has too many checks waiting already."""
        hashed = self._users.get(user)
        if len(password) > BCRYPT_MAX_PASSWORD:
            return False  # bcrypt refuses longer passwords: none can match
        key = hmac.digest(self._secret, b"\0".join((user.encode(), hashed or b"", password)),
                          "sha256")
        if key in self._passed:
            return True
        if key in self._failed:
            return False
        queue = self._queues.setdefault(request.remote or "", collections.deque())
        if len(queue) >= PEER_WAITING_CHECKS:
            raise Crowded
        loop = asyncio.get_running_loop()
        check = _Check(password, hashed, key, loop.create_future(),
                       lambda: request.transport is not None
                       and not request.transport.is_closing())
        queue.append(check)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        _waiting[request.protocol] = loop.time()
        try:
            return await check.answer
        finally:
            _waiting.pop(request.protocol, None)

    async def _run(self) -> None:
        """Check the queued passwords one at a time, one address after another."""
        while self._queues:
            address, queue = next(iter(self._queues.items()))
            check = queue.popleft()
            del self._queues[address]
            if queue:
                self._queues[address] = queue  # to the back of the round
            # A request cancelled while it waited (a client gone, the app shutting
            # down) has no answer to set: setting one would end this worker.
            if check.answer.done() or not check.wanted():
                if not check.answer.done():
                    check.answer.set_result(False)  # no one to answer; nothing remembered
                continue
            try:
                ok = await asyncio.get_running_loop().run_in_executor(
                    _hasher(), self._bcrypt.checkpw, check.password,
                    check.hashed or self._stand_in)
            except Exception as e:  # that request's 500; the queue goes on
                if not check.answer.done():
                    check.answer.set_exception(e)
                continue
            ok = self._remember(check, ok)
            if not check.answer.done():
                check.answer.set_result(ok)

    def _remember(self, check: _Check, ok: bool) -> bool:
        if ok and check.hashed is not None:
            if len(self._passed) >= _REMEMBERED_MAX:
                self._passed.clear()
            self._passed.add(check.key)
            return True
        if len(self._failed) >= _REMEMBERED_MAX:  # the oldest tenth makes room
            for old in list(itertools.islice(self._failed, _REMEMBERED_MAX // 10)):
                del self._failed[old]
        self._failed[check.key] = None
        return False


@functools.cache
def _hasher() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread password checks run on, in every app of the process."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="poolscope-bcrypt")


def access_control(access: Access, error: ErrorResponse) -> Middleware:
    """Only an authorized client keeps its connection: any other answer, /healthz
    included, comes with `Connection: close`, so an unauthenticated client holds a
    slot under the connection cap for one request at most. `error` builds the
    service's JSON error response."""
    bearer = f"Bearer {access.bearer_token}".encode() if access.bearer_token else None
    basic = _BasicAuth(access.basic_users) if access.basic_users else None

    async def authorized(request: web.Request) -> bool:
        header = _raw_header(request, "Authorization")
        # constant time: no token oracle
        if bearer is not None and hmac.compare_digest(header, bearer):
            return True
        credentials = _basic_credentials(header) if basic is not None else None
        return (credentials is not None and basic is not None
                and await basic.check(*credentials, request))

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        crowded = False
        try:
            ok = await authorized(request)
        except Crowded:
            ok, crowded = False, True
        if ok:
            return await handler(request)
        if request.path in access.open_paths:
            try:
                response = await handler(request)
            except web.HTTPException as e:  # a 405 for POST /healthz closes as well
                response = error(e.status, e.reason)
        elif crowded:
            # Not a 401: the credentials may be right; they were not looked at.
            response = error(429, f"too many password checks waiting from {request.remote}; "
                                  "retry in a second")
            response.headers["Retry-After"] = "1"
        else:
            response = error(401, "missing or wrong bearer token" if basic is None
                             else "missing or wrong credentials")
            for challenge in access.challenges():
                response.headers.add("WWW-Authenticate", challenge)
        response.force_close()
        return response
    return check
