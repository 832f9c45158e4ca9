"""Scoped credentials: admin, router and monitor, and which agent route needs which.

The admin credential is a secret held only by database hosts and operators' admin
machines. The router and monitor credentials are derived from it with HMAC-SHA256 and a
generation number, so an agent (which holds the admin secret) verifies every scope without a
list to keep in step, while a host that holds a derived credential cannot compute the
admin secret or another scope's credential. `ACCESS` is the one table of route → scopes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

from .errors import Forbidden, InvalidInput

ADMIN, ROUTER, MONITOR = "admin", "router", "monitor"
SCOPES = (ADMIN, ROUTER, MONITOR)
DERIVED_SCOPES = (ROUTER, MONITOR)
MAX_GENERATION = 1_000_000

# A derived credential names its scope and generation, so a host (and a person reading the file)
# knows what it is without the admin secret; anything else in a credential file is an admin secret.
_DERIVED = re.compile(r"^slacker-(router|monitor)-g(\d{1,7})-([0-9a-f]{64})$")


@dataclass(frozen=True)
class Credential:
    """What one host presents: its scope, generation (1 for admin) and the bearer token itself."""

    scope: str
    token: str = field(repr=False)
    generation: int = 1

    def __str__(self) -> str:  # never the token
        return f"the {self.scope} credential" + (f" (generation {self.generation})" if self.scope != ADMIN else "")


def parse(token: str) -> Credential:
    """The scope of a token as read from a credential file: derived tokens say theirs; the rest is admin."""
    m = _DERIVED.match(token)
    if m:
        return Credential(m.group(1), token, int(m.group(2)))
    return Credential(ADMIN, token)


def derive(admin_secret: str, scope: str, generation: int = 1) -> str:
    """The `scope` credential of generation `generation`, computed from the admin secret."""
    if scope not in DERIVED_SCOPES:
        raise InvalidInput(f"unknown credential scope {scope!r}", f"derived scopes are {', '.join(DERIVED_SCOPES)}",
                           "admin is the secret itself")
    if isinstance(generation, bool) or not isinstance(generation, int) or not 1 <= generation <= MAX_GENERATION:
        raise InvalidInput(f"bad credential generation {generation!r}", f"it is 1 to {MAX_GENERATION}", "")
    mac = hmac.new(admin_secret.encode(), f"slacker credential\0{scope}\0{generation}".encode(), hashlib.sha256)
    return f"slacker-{scope}-g{generation}-{mac.hexdigest()}"


def hold_token(token: str) -> str:
    """The bearer a handover presents to a router's /hold and /release: a hash of the credential that
    router holds, so the router's admin address (plain HTTP) never carries the credential itself and
    the router needs no admin secret to check it. An agent computes it from the router's scope and
    generation (announced in the directory) and the admin secret."""
    return hashlib.sha256(b"slacker-router-hold\0" + token.encode()).hexdigest()


class Keyring:
    """An agent's view of credentials: the admin secret, and the lowest generation of each derived
    scope still accepted (raised to revoke older credentials, docs/deployment.md "Credentials")."""

    def __init__(self, admin_secret: str, min_generation: dict[str, int] | None = None) -> None:
        self.admin_secret = admin_secret
        self.min_generation = {s: int((min_generation or {}).get(s, 1)) for s in DERIVED_SCOPES}

    def verify(self, token: str) -> Credential | None:
        """The credential `token` is, or None if it is none of this cluster's (then: 401)."""
        if hmac.compare_digest(token.encode(), self.admin_secret.encode()):
            return Credential(ADMIN, token)
        cred = parse(token)
        if cred.scope == ADMIN or cred.generation < self.min_generation[cred.scope] \
                or cred.generation > MAX_GENERATION:
            return None
        if hmac.compare_digest(token.encode(), derive(self.admin_secret, cred.scope, cred.generation).encode()):
            return cred
        return None

    def hold_token_for(self, scope: str, generation: int) -> str | None:
        """What a router holding (scope, generation) expects at /hold; None for a revoked or unknown one."""
        if scope == ADMIN:
            return hold_token(self.admin_secret)
        if scope not in DERIVED_SCOPES or generation < self.min_generation[scope]:
            return None
        return hold_token(derive(self.admin_secret, scope, generation))


# ---- which route needs which scope ------------------------------------------------------------------

@dataclass(frozen=True)
class Access:
    """Who may call one route. `route` is the path with `{}` for each argument (`{tenant}` etc. are
    written for the reader and mean the same). Admin may always; `scopes` lists who else may, and with
    `under` only when the route's first argument starts with it (the router's own `routers/` keys)."""

    method: str
    route: str
    action: str  # what a refusal says the credential may not do: "delete tenants"
    scopes: frozenset[str] = frozenset()
    under: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.method, template(self.route)


READ = frozenset({MONITOR})
FOLLOW = frozenset({MONITOR, ROUTER})  # what a router needs of the directory, also a read
_T, _M, _K = "{tenant}", "{migration}", "{key}"

ACCESS: tuple[Access, ...] = (
    # the node and its tenants
    Access("GET", "/v1/status", "read the node's status", READ),
    Access("GET", "/metrics", "read the node's metrics", READ),
    Access("GET", "/v1/tenant-stats", "read tenants' load", READ),
    Access("GET", "/v1/tenants", "list tenants", READ),
    Access("POST", "/v1/tenants", "create tenants"),
    Access("GET", f"/v1/tenants/{_T}", "read a tenant", READ),
    Access("GET", f"/v1/tenants/{_T}/credentials", "read a tenant's password"),
    Access("GET", f"/v1/tenants/{_T}/login", "read a tenant's login hash", frozenset({ROUTER})),
    Access("GET", "/v1/logins", "read every tenant's login hash", frozenset({ROUTER})),
    Access("DELETE", f"/v1/tenants/{_T}", "delete tenants"),
    Access("POST", "/v1/shutdown", "shut agents down"),
    # the directory (the SQLite one an agent serves)
    Access("GET", "/v1/directory/tenants", "list the directory", FOLLOW),
    Access("POST", "/v1/directory/tenants", "register tenants in the directory"),
    Access("POST", "/v1/directory/shared-ports", "claim a port for a node's shared server in the directory"),
    Access("GET", f"/v1/directory/tenants/{_T}", "look owners up", FOLLOW),
    Access("POST", f"/v1/directory/tenants/{_T}/cas", "change a tenant's owner"),
    Access("DELETE", f"/v1/directory/tenants/{_T}", "remove tenants from the directory"),
    Access("GET", f"/v1/directory/tenants/{_T}/watch", "watch owners", FOLLOW),
    Access("GET", "/v1/directory/changes", "follow the directory's changes", FOLLOW),
    Access("GET", "/v1/directory/health", "read the directory's health", FOLLOW),
    Access("GET", "/v1/directory/members", "read the fleet's members", FOLLOW),
    Access("POST", "/v1/directory/members", "register nodes"),
    Access("DELETE", "/v1/directory/members/{node}", "remove nodes"),
    Access("GET", f"/v1/directory/locks/{_K}", "read the directory's locks", READ),
    Access("POST", f"/v1/directory/locks/{_K}", "take the directory's locks (drain, rebalance)"),
    Access("DELETE", f"/v1/directory/locks/{_K}", "release the directory's locks"),
    Access("GET", "/v1/directory/state", "read the directory's state", FOLLOW),
    Access("GET", f"/v1/directory/state/{_K}", "read the directory's state", FOLLOW),
    Access("POST", f"/v1/directory/state/{_K}", "announce a router", frozenset({ROUTER}), under="routers/"),
    Access("DELETE", f"/v1/directory/state/{_K}", "withdraw a router", frozenset({ROUTER}), under="routers/"),
    Access("POST", f"/v1/directory/state/{_K}", "cordon nodes", under="nodes/cordon/"),
    Access("DELETE", f"/v1/directory/state/{_K}", "uncordon nodes", under="nodes/cordon/"),
    Access("POST", f"/v1/directory/state/{_K}", "drain nodes", under="drain/"),
    Access("POST", f"/v1/directory/state/{_K}", "write the directory's state"),
    Access("DELETE", f"/v1/directory/state/{_K}", "write the directory's state"),
    # migrations, as the CLI and the rebalancer ask for them
    Access("POST", "/v1/migrations", "migrate tenants"),
    Access("GET", "/v1/migrations", "list migrations", READ),
    Access("GET", "/v1/budget", "read the node's copy budget", READ),
    Access("POST", "/v1/budget/memory/reset", "reset the node's copy-rate memory"),
    Access("GET", f"/v1/migrations/{_M}", "read a migration", READ),
    Access("POST", f"/v1/migrations/{_M}/abort", "abort migrations"),
    Access("POST", f"/v1/migrations/{_M}/finish", "finish migrations"),
    Access("POST", f"/v1/migrations/{_M}/cutover", "cut migrations over"),
    Access("POST", f"/v1/migrations/{_M}/set", "steer migrations"),
    Access("GET", f"/v1/migrations/{_M}/series", "read a migration's time series", READ),
    # old copies kept after a move (--keep-source), for --revert
    Access("GET", "/v1/kept", "list kept copies", READ),
    Access("POST", f"/v1/kept/{_T}/release", "release kept copies"),
    # the target's half of a migration, as the source's agent (admin) drives it
    Access("GET", f"/v1/incoming/{_M}", "read an incoming migration", READ),
    Access("POST", "/v1/incoming", "receive migrations"),
    *(Access("POST", f"/v1/incoming/{_M}/{step}", "receive migrations")
      for step in ("lease", "stream", "prepare", "start", "replicate", "wait", "durable", "checksums", "verify",
                   "ready", "resume", "activate")),
    Access("DELETE", f"/v1/incoming/{_M}", "receive migrations"),
)


def template(path_pattern: str) -> str:
    """A route as a template: regex groups and `{name}` placeholders both become `{}`."""
    out = re.sub(r"\((?:[^()\\]|\\.)*\)", "{}", path_pattern)
    return re.sub(r"\{[a-z_]*\}", "{}", out)


_BY_KEY: dict[tuple[str, str], list[Access]] = {}
for _a in ACCESS:
    _BY_KEY.setdefault(_a.key, []).append(_a)


def rules_for(method: str, path_pattern: str) -> list[Access]:
    """The rules of one route as registered (a regex pattern), most specific first; a route missing
    from the table is admin's only (the unit test keeps the table complete)."""
    found = _BY_KEY.get((method, template(path_pattern)))
    return found or [Access(method, template(path_pattern), f"use {method} {template(path_pattern)}")]


def check(rules: list[Access], cred: Credential, args: tuple[str, ...] = ()) -> None:
    """Raise Forbidden (403, one line) unless `cred` may call the route these rules cover with `args`."""
    if cred.scope == ADMIN:
        return
    first = args[0] if args else ""
    rule = next((r for r in rules if not r.under or first.startswith(r.under)), rules[-1])
    if cred.scope in rule.scopes:
        return
    raise Forbidden(f"the {cred.scope} credential may not {rule.action}", f"it needs {_needs(rule)}",
                    "")


def _needs(rule: Access) -> str:
    others = [s for s in SCOPES if s in rule.scopes]
    return " or ".join([ADMIN] + others) if others else ADMIN


def write_scoped_files(admin_secret: str, directory, generation: int = 1) -> dict[str, "Path"]:
    """The derived credentials as files (0600) in `directory`, one per scope: what `cluster up` hands
    its router and what an operator copies to application and monitoring hosts."""
    from pathlib import Path

    from .mariadb import write_secret

    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    out = {}
    for scope in DERIVED_SCOPES:
        path = directory / scope
        write_secret(path, derive(admin_secret, scope, generation) + "\n")
        out[scope] = path
    return out
