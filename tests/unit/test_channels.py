"""Which links may carry a password: TLS, loopback, or the local netns bridge; nothing else."""

from types import SimpleNamespace

import pytest

from slacker.agent import server
from slacker.channels import host_is_machine_local, url_may_carry_secrets
from slacker.errors import InsecureChannel


def test_machine_local_hosts():
    assert host_is_machine_local("127.0.0.1") and host_is_machine_local("127.0.5.9") and host_is_machine_local("::1")
    assert host_is_machine_local("localhost")
    assert not host_is_machine_local("10.77.0.2")
    assert host_is_machine_local("10.77.0.2", "10.77.0.0/24")
    assert not host_is_machine_local("10.77.1.2", "10.77.0.0/24")
    assert not host_is_machine_local("db1.example.com", "10.77.0.0/24")


def test_urls():
    assert url_may_carry_secrets("https://db1.example.com:7701")
    assert url_may_carry_secrets("http://127.0.0.2:7701")
    assert url_may_carry_secrets("http://10.77.0.3:7701", "10.77.0.0/24")
    assert not url_may_carry_secrets("http://10.0.0.3:7701", "10.77.0.0/24")
    assert not url_may_carry_secrets("http://db1.example.com:7701")


@pytest.mark.parametrize("peer,tls,subnet,ok", [
    ("127.0.0.1", False, "", True),
    ("10.77.0.1", False, "10.77.0.0/24", True),
    ("192.0.2.7", False, "10.77.0.0/24", False),
    ("192.0.2.7", True, "", True),
])
def test_the_credentials_route_checks_the_channel(peer, tls, subnet, ok):
    node = SimpleNamespace(cluster=SimpleNamespace(local_subnet=subnet))
    server._request.peer, server._request.tls = peer, tls
    try:
        if ok:
            server.require_private_channel(node)
        else:
            with pytest.raises(InsecureChannel, match="not sent over plain HTTP"):
                server.require_private_channel(node)
    finally:
        del server._request.peer, server._request.tls
