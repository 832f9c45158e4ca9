"""The agent's HTTP server under hostile clients: a stalled connection is dropped after the request
timeout without holding up anyone else, the number of requests in progress is bounded, and a wrong
method is a 405 (real sockets, the real server class)."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest

from slacker import protocol_version
from slacker.agent.client import AgentClient
from slacker.agent.server import ApiServer
from slacker.credentials import Keyring
from slacker.errors import AgentUnavailable, InvalidInput

TOKEN = "t" * 32


@pytest.fixture
def make_server():
    servers = []

    def make(**kwargs) -> tuple[ApiServer, AgentClient]:
        node = SimpleNamespace(token=TOKEN, keyring=Keyring(TOKEN), protocol=protocol_version.current(), name="stub",
                               status=lambda: {"node": "stub"})
        srv = ApiServer(node, "127.0.0.1", 0, **kwargs)
        gate = threading.Event()

        @srv.route("GET", "/v1/slow")
        def slow(s, body, q):
            gate.wait(10)
            return {"slow": True}

        srv.gate = gate
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv, AgentClient(f"http://127.0.0.1:{srv.server_address[1]}", TOKEN, "stub", timeout_s=5)

    yield make
    for srv in servers:
        srv.gate.set()
        srv.shutdown()
        srv.server_close()


def test_stalled_client_does_not_block_others_and_is_dropped(make_server):
    srv, client = make_server(request_timeout_s=1.5)
    stalled = [socket.create_connection(srv.server_address) for _ in range(5)]  # connect, send nothing
    half = socket.create_connection(srv.server_address)
    half.sendall(b"POST /v1/status HTTP/1.1\r\nContent-Length: 100\r\n")  # stalls mid-headers
    t0 = time.monotonic()
    for _ in range(10):
        assert client.request("GET", "/v1/status") == {"node": "stub"}
    assert time.monotonic() - t0 < 1.0  # served while the stalled ones wait
    for s in [*stalled, half]:
        s.settimeout(5)
        assert s.recv(1024) == b""  # the server closed it, without an answer
        s.close()
    waited = time.monotonic() - t0
    assert 1.0 < waited < 4.0, f"stalled connections dropped after {waited:.1f}s, timeout 1.5s"
    assert client.request("GET", "/v1/status") == {"node": "stub"}


def test_requests_in_progress_are_bounded(make_server):
    srv, client = make_server(max_workers=3)
    results = []
    threads = [threading.Thread(target=lambda: results.append(client.request("GET", "/v1/slow")))
               for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while srv._slots._value > 0:  # all three slots taken by the slow requests
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(AgentUnavailable, match="agent busy"):
        client.request("GET", "/v1/status")
    srv.gate.set()
    for t in threads:
        t.join(10)
    assert results == [{"slow": True}] * 3
    # Slots come back: a slot is released after its handler has sent the answer, so a client can read the
    # answer a moment before the slot is free again.
    deadline = time.monotonic() + 5
    while srv._slots._value < 3:
        assert time.monotonic() < deadline, "the slots never came back"
        time.sleep(0.01)
    assert client.request("GET", "/v1/status") == {"node": "stub"}


def test_wrong_method_is_405_and_unknown_path_404(make_server):
    srv, client = make_server()
    with pytest.raises(InvalidInput, match="method DELETE not allowed on /v1/status"):
        client.request("DELETE", "/v1/status")
    conn = socket.create_connection(srv.server_address)
    conn.sendall(f"DELETE /v1/status HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n\r\n".encode())
    assert conn.recv(100).startswith(b"HTTP/1.1 405")
    conn.close()
    with pytest.raises(Exception, match="no such endpoint"):
        client.request("GET", "/v1/nothing")
