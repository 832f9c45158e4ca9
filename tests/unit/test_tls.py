"""The cluster CA and node certificates (slacker/tls.py), and the TLS keys of the config files."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from slacker import tls
from slacker.config import load_agent_config, load_cluster
from slacker.errors import InvalidInput


def test_pki_keys_private_and_certificates_name_the_node(tmp_path):
    pki = tls.ensure_cluster_pki(tmp_path, {"node-1": ["127.0.9.2", "node-1"], "node-2": ["127.0.9.3", "node-2"]})
    for p in (tmp_path / "ca.key", pki["node-1"].key, pki["node-2"].key):
        assert p.stat().st_mode & 0o777 == 0o600
    assert set(tls.cert_names(pki["node-2"].cert)) == {"127.0.9.3", "node-2"}
    # Idempotent: a second run keeps the CA and the certificates.
    before = pki["node-1"].cert.read_bytes(), (tmp_path / "ca.crt").read_bytes()
    again = tls.ensure_cluster_pki(tmp_path, {"node-1": ["127.0.9.2", "node-1"]})
    assert (again["node-1"].cert.read_bytes(), (tmp_path / "ca.crt").read_bytes()) == before
    # A node that gained an address gets a new certificate from the same CA.
    moved = tls.ensure_cluster_pki(tmp_path, {"node-1": ["127.0.9.9", "node-1"]})
    assert "127.0.9.9" in tls.cert_names(moved["node-1"].cert)
    assert (tmp_path / "ca.crt").read_bytes() == before[1]


def _handshake(server_ctx, client_ctx, server_hostname):
    """A real TLS handshake over a socket pair; returns the client's error or None."""
    a, b = socket.socketpair()
    box = {}

    def serve():
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.recv(1)
        except (OSError, ssl.SSLError) as exc:
            box["server"] = exc

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_hostname) as c:
            c.sendall(b"x")
        return None
    except ssl.SSLError as exc:
        return exc
    finally:
        b.close()
        t.join(5)


def test_node_certificate_verifies_for_its_address_only(tmp_path):
    pki = tls.ensure_cluster_pki(tmp_path / "a", {"node-1": ["127.0.9.2", "node-1"]})
    server = tls.server_context(pki["node-1"])
    client = tls.client_context(pki["node-1"].ca)
    assert _handshake(server, client, "127.0.9.2") is None
    assert "mismatch" in str(_handshake(server, client, "127.0.9.3")).lower()
    # A certificate of another cluster's CA is refused.
    other = tls.ensure_cluster_pki(tmp_path / "b", {"node-1": ["127.0.9.2"]})
    err = _handshake(tls.server_context(other["node-1"]), client, "127.0.9.2")
    assert err is not None and "certificate verify failed" in str(err)


def test_agent_config_tls_keys_all_or_none_and_key_private(tmp_path):
    pki = tls.ensure_cluster_pki(tmp_path / "tls", {"node-1": ["127.0.9.2"]})["node-1"]
    base = 'node = "node-1"\ncluster = "c.toml"\ndata_root = "d"\nlisten = "127.0.9.2:7701"\n'
    cfg = tmp_path / "agent.toml"
    cfg.write_text(base + f'tls_ca = "{pki.ca}"\ntls_cert = "{pki.cert}"\ntls_key = "{pki.key}"\n')
    loaded = load_agent_config(cfg)
    assert loaded.tls == pki and loaded.tenant_require_tls is True
    cfg.write_text(base + f'tls_cert = "{pki.cert}"\n')
    with pytest.raises(InvalidInput, match="tls_ca, tls_cert and tls_key together"):
        load_agent_config(cfg)
    pki.key.chmod(0o644)
    cfg.write_text(base + f'tls_ca = "{pki.ca}"\ntls_cert = "{pki.cert}"\ntls_key = "{pki.key}"\n')
    with pytest.raises(InvalidInput, match="readable by others"):
        load_agent_config(cfg)


def test_cluster_file_https_needs_the_ca(tmp_path):
    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    f = tmp_path / "cluster.toml"
    f.write_text(f'token_file = "{token}"\n[[nodes]]\nname = "node-1"\nurl = "https://127.0.9.2:7701"\n')
    with pytest.raises(InvalidInput, match="no tls_ca"):
        load_cluster(str(f))
    f.write_text(f'token_file = "{token}"\ntls_ca = "tls/ca.crt"\n'
                 '[[nodes]]\nname = "node-1"\nurl = "https://127.0.9.2:7701"\n')
    assert load_cluster(str(f)).tls_ca == tmp_path / "tls" / "ca.crt"


def test_a_ca_replaced_at_the_same_path_is_trusted_at_once(tmp_path):
    """A cluster purged and made again at the same path, in the same process: the new CA is used
    by the next context at once (the cache is keyed on the files' contents, not their paths)."""
    import shutil

    d = tmp_path / "tls"
    old = tls.ensure_cluster_pki(d, {"node-1": ["127.0.9.2"]})["node-1"]
    client = tls.client_context(old.ca)
    assert tls.client_context(old.ca) is client  # unchanged files: the context is reused
    assert tls.server_context(old) is tls.server_context(old)
    assert _handshake(tls.server_context(old), client, "127.0.9.2") is None

    shutil.rmtree(d)
    new = tls.ensure_cluster_pki(d, {"node-1": ["127.0.9.2"]})["node-1"]
    assert new.ca == old.ca and new.cert == old.cert  # the same paths, a new CA and certificate
    assert "certificate verify failed" in str(_handshake(tls.server_context(new), client, "127.0.9.2"))
    assert _handshake(tls.server_context(new), tls.client_context(new.ca), "127.0.9.2") is None
    assert _handshake(tls.server_context(new), tls.client_context(new.ca, new.cert, new.key), "127.0.9.2") is None
