"""TLS on every channel of a `cluster up --tls` cluster, with real agents, mariadbd and sockets.

Each TLS endpoint refuses a plain-text peer (agent API, snapshot stream, tenant with
require_secure_transport), and a live migration under writes succeeds over TLS with
every acknowledged write on the new owner and equal checksums.
"""

from __future__ import annotations

import hashlib
import http.client
import time

import pymysql
import pytest
from click.testing import CliRunner

from slacker import tls
from slacker.ackwriter import AckedWriter
from slacker.cli import main
from slacker.agent.client import AgentClient, cluster_clients
from slacker.client import resolve
from slacker.config import load_agent_config
from slacker.errors import AgentUnavailable, InvalidInput, MigrationFailed
from slacker.tenants import TenantManager
from slacker.transfer import Receiver, make_pipe, new_token

from benchkit.migration import (acked_ids_present, create_loaded_tenant, follow, node_dir, start_migration,
                                tenant_checksums, wait_migration, wait_phase)

MB = 1_000_000


@pytest.fixture
def pki(tmp_path):
    return tls.ensure_cluster_pki(tmp_path / "tls", {"a": ["127.0.0.1"], "b": ["127.0.0.1"]})


def _receiver(pki, tmp_path, token, **kw):
    out = tmp_path / "out"
    r = Receiver("m1", token, ["cat"], "127.0.0.1", extract_stdout=out, header_timeout_s=2,
                 ssl_context=tls.server_context(pki["b"], stream=True), **kw)
    return r, out


def _client(pki):
    return tls.client_context(pki["a"].ca, pki["a"].cert, pki["a"].key, stream=True)


def test_snapshot_stream_over_tls_arrives_intact(pki, tmp_path):
    src = tmp_path / "payload"
    src.write_bytes(bytes(range(256)) * 40_000)  # ~10 MB
    token = new_token()
    r, out = _receiver(pki, tmp_path, token)
    port = r.start()
    pipe = make_pipe("native", ["cat", str(src)], "127.0.0.1", port, "m1", token, ssl_context=_client(pki))
    pipe.start()
    result = pipe.wait(60)
    got = r.wait(10)
    assert result.acknowledged_bytes == got.bytes_received == src.stat().st_size
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()


def test_plain_text_stream_is_refused_by_a_tls_receiver(pki, tmp_path):
    token = new_token()
    r, out = _receiver(pki, tmp_path, token)
    port = r.start()
    try:
        plain = make_pipe("native", ["head", "-c", str(5 * MB), "/dev/zero"], "127.0.0.1", port, "m1", token)
        plain.start()
        with pytest.raises(MigrationFailed) as exc:
            plain.wait(30)
        assert exc.value.stage == "transport"
        assert r.rejected_connections == 1 and r.listening and r.bytes_received == 0
        # The receiver still takes the real (TLS) sender afterwards.
        ok = make_pipe("native", ["head", "-c", str(MB), "/dev/zero"], "127.0.0.1", port, "m1", token,
                       ssl_context=_client(pki))
        ok.start()
        assert ok.wait(30).acknowledged_bytes == MB
        assert r.wait(10).bytes_received == MB
    finally:
        r.abort()


def test_sender_refuses_a_receiver_without_the_cluster_certificate(pki, tmp_path):
    foreign = tls.ensure_cluster_pki(tmp_path / "other", {"b": ["127.0.0.1"]})
    token = new_token()
    r = Receiver("m1", token, ["cat"], "127.0.0.1", extract_stdout=tmp_path / "out", header_timeout_s=2,
                 ssl_context=tls.server_context(foreign["b"], stream=True))
    port = r.start()
    try:
        pipe = make_pipe("native", ["head", "-c", str(MB), "/dev/zero"], "127.0.0.1", port, "m1", token,
                         ssl_context=_client(pki))
        with pytest.raises(MigrationFailed, match="TLS handshake failed.*certificate verify failed"):
            pipe.start()
    finally:
        r.abort()


def test_pv_nc_pipe_is_refused_when_tls_is_required(pki):
    with pytest.raises(InvalidInput) as exc:
        make_pipe("pv", ["true"], "127.0.0.1", 1, "m1", new_token(), ssl_context=_client(pki))
    assert "requires TLS" in exc.value.one_line() and "\n" not in exc.value.one_line()


def _target_replication_status(cluster, tenant_id: str) -> dict:
    cfg = load_agent_config(node_dir(cluster, "node-2") / "agent.toml")
    t = TenantManager(cfg.data_root, host=cfg.tenant_host, node="node-2").get(tenant_id)
    conn = t.admin_connect()
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            return cur.fetchall()[0]
    finally:
        conn.close()


def test_tls_cluster_refuses_plain_text_and_migrates_without_loss(make_cluster):
    cluster = make_cluster(tls=True)
    agents, directory = cluster_clients(cluster)
    n1 = cluster.node("node-1")
    assert n1.url.startswith("https://") and cluster.tls_ca is not None

    # Agent API: plain HTTP to the HTTPS port gets no answer; HTTPS with the token does.
    plain_url = n1.url.replace("https://", "http://")
    with pytest.raises(AgentUnavailable):
        AgentClient(plain_url, cluster.token(), timeout_s=5).request("GET", "/v1/status")
    # ... and an HTTPS client that does not know the cluster CA refuses the agent.
    conn = http.client.HTTPSConnection(n1.tenant_host, int(n1.url.rsplit(":", 1)[1]), timeout=5)
    with pytest.raises(OSError, match="certificate verify failed"):
        conn.request("GET", "/v1/status")
    assert agents["node-1"].request("GET", "/v1/status")["node"] == "node-1"
    # `status` says the cluster is on TLS, and with which CA.
    status = CliRunner().invoke(main, ["--cluster", str(cluster.path), "status"])
    assert status.exit_code == 0 and f"transport: TLS (CA {cluster.tls_ca})" in status.output
    # Kept-open connections: after warm() the calls reuse them (no TLS handshake, as in a freeze).
    client = AgentClient(n1.url, cluster.token(), ca_file=cluster.tls_ca)
    client.warm(2)
    opened = {id(conn.sock) for _, conn in client._idle}
    for _ in range(3):
        client.request("GET", "/v1/status")
    assert len(opened) == 2 and {id(conn.sock) for _, conn in client._idle} <= opened
    client.close()

    # A migration over TLS under writes: 0 acknowledged writes lost, equal checksums.
    create_loaded_tenant(cluster, "mig", rows=1500)
    ep = resolve("mig", cluster)
    assert ep.ssl_ca is not None
    # Tenant: a client without TLS is refused (require_secure_transport); the same account with TLS gets in.
    with pytest.raises(pymysql.err.OperationalError):
        pymysql.connect(host=ep.host, port=ep.port, user=ep.user, password=ep.password, ssl_disabled=True,
                        connect_timeout=5)
    with ep.connect().cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1].startswith("TLSv1.")

    before = directory.lookup("mig")
    writer = AckedWriter(follow(cluster, "mig"), rate_per_s=150).start()
    try:
        time.sleep(1.0)
        doc = start_migration(cluster, "mig", target="node-2", verify=True, hold_s={"delta": 5})
        wait_phase(cluster, "node-1", doc["id"], "delta", timeout_s=120)
        # Replication from the source is MASTER_SSL with the source's certificate verified.
        deadline = time.monotonic() + 4
        while True:  # the IO thread may still be connecting ("Preparing", "Connecting")
            st = _target_replication_status(cluster, "mig")
            if st["Slave_IO_Running"] == "Yes" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert st["Master_SSL_Allowed"] == "Yes" and st["Master_SSL_Verify_Server_Cert"] == "Yes"
        assert st["Slave_IO_Running"] == "Yes", st.get("Last_IO_Error")
        doc = wait_migration(cluster, "node-1", doc["id"], timeout_s=180)
        time.sleep(0.5)
    finally:
        writer.stop()
    assert doc["result"] == "succeeded", doc.get("error")
    after = directory.lookup("mig")
    assert (after.node, after.epoch) == ("node-2", before.epoch + 1)
    assert doc["verified"] is True  # equal on both sides at one position, before the handover
    assert len(writer.acked) > 50
    assert acked_ids_present(cluster, "mig", writer.acked) == set(), "acknowledged writes lost"
    assert writer.client.endpoint.node == "node-2"
    assert tenant_checksums(cluster, "mig").get("shop.items") is not None
    assert {side["path"] for side in doc["copy_stages"].values()} == {"tls"}

    # --plain-stream, the operator's opt-out: only the snapshot stream goes in plain text, the rows arrive.
    sums = tenant_checksums(cluster, "mig")
    doc = start_migration(cluster, "mig", target="node-1", plain_stream=True)
    doc = wait_migration(cluster, "node-2", doc["id"], timeout_s=180)
    assert doc["result"] == "succeeded", doc.get("error")
    assert {side["path"] for side in doc["copy_stages"].values()} == {"copy"}
    assert directory.lookup("mig").node == "node-1"
    assert tenant_checksums(cluster, "mig") == sums

    # The pv | nc pipe is refused up front on a TLS cluster, with a one-line reason.
    with pytest.raises(InvalidInput, match="requires TLS"):
        start_migration(cluster, "mig", target="node-1", pipe="pv")
