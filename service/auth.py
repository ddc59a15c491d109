"""Who may read a Poolscope service: a bearer token, basic-auth users, or both.

The bearer token (`--auth-token-file`) was the first way; basic auth with bcrypt
hashes comes with the exporter-toolkit web config (`--web.config.file`), because
that is what Prometheus' `basic_auth` scrape option and every exporter-toolkit
service already speak. A request passes when it satisfies either. /healthz (and any
path the web config excludes) stays open: liveness probes must reach it without a
secret.

bcrypt is slow on purpose (about 70 ms at cost 10), so every answer is remembered,
keyed by a SHA-256 of user, hash and password, as exporter-toolkit does: a scraper
pays once, and a client repeating a wrong password costs nothing more. Checks run on
one thread of their own, one at a time, so the event loop keeps serving and the
threads the collectors sample on stay free; past MAX_WAITING_CHECKS waiting, a new
password is refused unchecked, so a flood (whose clients may hang up at once, freeing
their connection slots) cannot queue minutes of work or memory. An unknown user is
checked against a configured user's hash, so the answer takes as long as for a known
one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import functools
import hashlib
import hmac
import importlib
import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Middleware

OPEN_PATHS = frozenset({"/healthz"})
_REMEMBERED_MAX = 4096  # answers held of each kind (32-byte keys)
# Checks waiting for the bcrypt thread at most (about 0.6 s of work at cost 10).
MAX_WAITING_CHECKS = 8
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


class _BasicAuth:
    def __init__(self, users: Mapping[str, bytes]) -> None:
        # Imported only when users are configured: bcrypt's extension is half a MiB of
        # the Instance exporter's memory budget (docs/benchmarks.md), on every host.
        self._bcrypt = importlib.import_module("bcrypt")
        self._users = dict(users)
        # An unknown user's password is checked against a real user's hash (and then
        # refused whatever it matched), so the answer takes as long as for a known one.
        self._stand_in = next(iter(self._users.values()))
        # Passing credentials apart from failing ones: a flood of wrong passwords
        # evicts only wrong ones, never the scraper's.
        self._passed: set[bytes] = set()
        self._failed: dict[bytes, None] = {}
        self._waiting = 0

    async def check(self, user: str, password: bytes) -> bool:
        hashed = self._users.get(user)
        if len(password) > BCRYPT_MAX_PASSWORD:
            return False  # bcrypt refuses longer passwords: none can match
        key = hashlib.sha256(b"\0".join((user.encode(), hashed or b"", password))).digest()
        if key in self._passed:
            return True
        if key in self._failed:
            return False
        if self._waiting >= MAX_WAITING_CHECKS:
            # Refused unchecked rather than queued: new passwords arrive faster than
            # bcrypt can check them, which only a flood does; known ones still pass.
            return False
        self._waiting += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(
                _hasher(), self._bcrypt.checkpw, password, hashed or self._stand_in)
        finally:
            self._waiting -= 1
        if ok and hashed is not None:
            if len(self._passed) >= _REMEMBERED_MAX:
                self._passed.clear()
            self._passed.add(key)
            return True
        if len(self._failed) >= _REMEMBERED_MAX:  # the oldest tenth makes room
            for old in list(itertools.islice(self._failed, _REMEMBERED_MAX // 10)):
                del self._failed[old]
        self._failed[key] = None
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
        return credentials is not None and basic is not None and await basic.check(*credentials)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        ok = await authorized(request)
        if ok:
            return await handler(request)
        if request.path in access.open_paths:
            try:
                response = await handler(request)
            except web.HTTPException as e:  # a 405 for POST /healthz closes as well
                response = error(e.status, e.reason)
        else:
            response = error(401, "missing or wrong bearer token" if basic is None
                             else "missing or wrong credentials")
            for challenge in access.challenges():
                response.headers.add("WWW-Authenticate", challenge)
        response.force_close()
        return response
    return check
