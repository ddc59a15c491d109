"""Ports handed to children that start together must differ: each is picked before
any child binds it, and the kernel may offer the same free port twice in a row."""

from __future__ import annotations

import socket

from deploy.demo import processes
from deploy.demo.processes import port_or_free


def test_a_port_handed_out_is_not_handed_out_again() -> None:
    first = port_or_free(0)
    # Still bindable (nobody listens on it yet), and still not given a second time.
    assert port_or_free(first) != first


def test_a_free_preferred_port_is_taken() -> None:
    # One this process has not handed out already (an earlier test in the same
    # worker may have been given the port the kernel offers now).
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            unused = s.getsockname()[1]
        if unused not in processes._HANDED_OUT:
            break
    assert port_or_free(unused) == unused


def test_a_busy_preferred_port_gives_way() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        assert port_or_free(busy) != busy
