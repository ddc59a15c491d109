"""Child processes the demo starts, and only those, stopped by process group.

Each child gets its own session (so its process group id is its pid); on exit
the demo signals exactly those groups. Nothing else on the machine is touched,
whatever else happens to listen on the same ports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

# Ports this process handed out lately. With SO_REUSEADDR the kernel may pick the
# same free port twice in a row, and children started together (each port picked
# before any of them binds) would then collide; a few hundred covers any one start.
_HANDED_OUT: deque[int] = deque(maxlen=512)
_TRIES = 100


# POOLSCOPE_PORT_RANGE=LO-HI: pick free ports from LO..HI instead of asking the
# kernel. A port handed to a child is free only until someone else binds it, and the
# kernel hands its ephemeral ports to every process on the host (outgoing
# connections included); processes given disjoint ranges below that range (the
# test workers, tests/conftest.py) cannot take each other's.
PORT_RANGE_ENV = "POOLSCOPE_PORT_RANGE"


def _range_candidates() -> list[int]:
    text = os.environ.get(PORT_RANGE_ENV, "")
    if not text:
        return [0] * _TRIES
    low, _, high = text.partition("-")
    ports = list(range(int(low), int(high) + 1))
    # Start past the last one handed out, so a probe does not walk the same ports.
    start = (_HANDED_OUT[-1] - ports[0] + 1) % len(ports) if _HANDED_OUT and ports else 0
    return ports[start:] + ports[:start]


def port_or_free(preferred: int, host: str = "127.0.0.1") -> int:
    """`preferred` when it can be bound now, else a free port (the kernel's pick, or
    one of POOLSCOPE_PORT_RANGE); never one this process handed out a moment ago."""
    for candidate in ([preferred] if preferred else []) + _range_candidates():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port
    raise OSError(f"no free port on {host}")


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path


@dataclass
class ProcessGroup:
    """Starts children with logs in `logdir`; `stop()` ends their groups."""

    logdir: Path
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> Child:
        log_path = self.logdir / f"{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        child = Child(name, proc, log_path)
        self.children.append(child)
        return child

    def start_python(self, name: str, module: str, *args: str) -> Child:
        return self.start(name, [sys.executable, "-m", module, *args])

    def stop_child(self, name: str, *, crash: bool = False) -> None:
        """Stop the one child started as `name`, so the rest can be watched without it:
        SIGTERM and wait (it shuts down as told to: an engine deregisters first), or with
        `crash` SIGKILL, as a crash would (an engine so killed never deregisters; its
        Proxy only sees the heartbeats stop). KeyError when no child has that name."""
        child = {c.name: c for c in self.children}[name]
        if crash:
            _signal_group(child.process, signal.SIGKILL)
            child.process.wait()
        else:
            stop_group(child.process)

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.process.poll() is not None]

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM every group we started, then SIGKILL what outlives `grace`."""
        for child in self.children:
            _signal_group(child.process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in self.children:
            stop_group(child.process, max(0.0, deadline - time.monotonic()))


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


def stop_group(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM a child's process group (it was started in its own session), then
    SIGKILL it if it outlives `grace`."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def wait_ready(url: str, child: Child | None = None, timeout: float = 30.0) -> None:
    """Wait until `url` answers 200; fail fast, with the log tail, if the child died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child is not None and child.process.poll() is not None:
            raise RuntimeError(f"{child.name} exited with {child.process.returncode}; "
                               f"log {child.log_path}:\n{log_tail(child.log_path)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    where = f"; log {child.log_path}:\n{log_tail(child.log_path)}" if child else ""
    raise TimeoutError(f"{url} not ready after {timeout}s{where}")


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(log unreadable: {e})"
