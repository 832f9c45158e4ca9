"""A tenant's port held by a server that is just exiting: the target waits it out; one held for good is
refused naming who listens there."""

from __future__ import annotations

import os
import socket
import threading
import time

from slacker.tenants import port_holders, wait_port_free

HOST = "127.0.66.9"


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind((HOST, 0))
    s.listen()
    return s


def test_a_port_freed_within_the_wait_is_taken():
    s = _listener()
    port = s.getsockname()[1]
    threading.Timer(0.4, s.close).start()
    t0 = time.monotonic()
    assert wait_port_free(HOST, port, 5.0)
    assert 0.3 < time.monotonic() - t0 < 3.0


def test_a_port_held_for_good_names_its_listener():
    s = _listener()
    port = s.getsockname()[1]
    try:
        assert not wait_port_free(HOST, port, 0.3)
        assert any(h.endswith(f"[{os.getpid()}]") for h in port_holders(port))
    finally:
        s.close()
    assert port_holders(port) == []
