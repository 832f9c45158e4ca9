"""Which links may carry a secret: TLS, or a link that never leaves this machine.

Passwords travel in JSON bodies in two places (a migration hands the tenant's
accounts to the target; a client holding the cluster token asks the owner for
the application's credentials). Over plain HTTP that is only acceptable where
nobody outside this machine can listen: loopback, or the bridge of a local
netns cluster (the cluster file's `local_subnet`). Anything else needs TLS.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse


def host_is_machine_local(host: str, local_subnet: str = "") -> bool:
    """True for a loopback address or one on the cluster's machine-local bridge."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    if ip.is_loopback:
        return True
    return bool(local_subnet) and ip in ipaddress.ip_network(local_subnet, strict=False)


def url_may_carry_secrets(url: str, local_subnet: str = "") -> bool:
    u = urlparse(url)
    return u.scheme == "https" or host_is_machine_local(u.hostname or "", local_subnet)
