"""Tenant kinds: a whole `mariadbd` of its own, or one database in its node's shared server.

Each kind is one small class behind `TenantKind` and one entry of `KINDS` (docs/architecture.md, "Tenant
kinds"): what an id must look like, which MariaDB account and database a client's `USER@TENANT` maps to,
whether a live move is built for it, and the node's manager of its tenants (`slacker/kinds/local.py`,
loaded only by an agent). Nothing here imports the MySQL client: the CLI validates with it at the edge.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from ..config import validate_tenant_id
from ..errors import InvalidInput

DEFAULT_KIND = "server"  # a directory record without a kind (written before kinds existed) is a whole server
APP_USER = "app"  # the account name a client gives, as USER@TENANT at the router, for every kind
# MariaDB 10.11's user names are at most 80 characters (mysql.global_priv.User; MySQL 8's are 32).
MAX_USER_NAME_CHARS = 80
# Schemas of the server itself, never a tenant's database.
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
# A shared tenant's id is its database's name: one a client types without quotes (a dash would need them,
# and is stored on disk as @002d), so letters and digits, starting with a letter.
_SHARED_ID_RE = re.compile(r"^[a-z][a-z0-9]{0,31}$")
# Reserved by the naming below: `slacker_backup` and `slacker_repl` are the shared server's service accounts.
_RESERVED_SHARED_IDS = frozenset({"slacker"})


@dataclass(frozen=True)
class Accounts:
    """How a client's USER@TENANT reaches a tenant's owner: the user it names at the router, the account it
    logs in to the owner as, and the database its session starts in (None: the client's choice)."""

    client_user: str
    owner_user: str
    database: str | None


class TenantKind(ABC):
    """What differs between kinds of tenant, for every part of Slacker that is not the node holding them."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line for help texts and docs

    def check_id(self, tenant_id: str) -> str:
        """The id, validated at the edge for this kind (InvalidInput in one line)."""
        return validate_tenant_id(tenant_id)

    @abstractmethod
    def accounts(self, tenant_id: str) -> Accounts:
        """The accounts a tenant of this kind has (slacker/kinds/local.py creates them)."""

    def move_refusal(self, tenant_id: str, node: str, mode: str = "live", verify: bool = False,
                     snapshot: str = "auto", into: str | None = None) -> InvalidInput | None:
        """Why a move of this tenant (in `mode`, with --verify or not, by `snapshot`, into another kind or not)
        is refused before anything starts; None when it is built."""
        if into == "shared":  # packed into the target's shared server as its database (docs/shared.md)
            try:
                KINDS["shared"].check_id(tenant_id)
            except InvalidInput as exc:
                return InvalidInput(f"tenant {tenant_id} cannot be packed into a shared server", exc.why,
                                    "nothing was started; a whole server keeps its id when it moves into a shared "
                                    "server, so only one that is a valid database name can")
            return None
        if snapshot == "logical":
            return InvalidInput(f"tenant {tenant_id} cannot be copied with --snapshot logical",
                                "it is a whole server: its copy is a hot backup of the server",
                                "nothing was started; leave out --snapshot (docs/shared.md)")
        return None

    @abstractmethod
    def local(self, node):
        """The node's manager of its tenants of this kind (`slacker.kinds.local.LocalTenants`; an agent only)."""


class WholeServer(TenantKind):
    name = "server"
    summary = "a whole mariadbd of its own (its own port, data directory and accounts on *.*)"

    def accounts(self, tenant_id: str) -> Accounts:
        return Accounts(APP_USER, APP_USER, None)

    def local(self, node):
        from .server import ServerTenants
        return ServerTenants(node, self)


def shared_user(tenant_id: str, role: str = APP_USER) -> str:
    """A shared tenant's own MariaDB account: `<tenant>_<role>` (t42_app). Tenant ids hold no '_', so the name
    splits one way only: no two tenants' accounts (nor a tenant's and the server's `slacker_*` service
    accounts, with the id `slacker` refused) can be the same name."""
    name = f"{tenant_id}_{role}"
    if "_" in tenant_id or len(name) > MAX_USER_NAME_CHARS:
        raise InvalidInput(f"no account name for tenant {tenant_id!r}", f"{name!r} is not <id>_<role> within "
                           f"{MAX_USER_NAME_CHARS} characters", "use a shorter id without '_'")
    return name


class Shared(TenantKind):
    name = "shared"
    summary = "a database in its node's shared server (its own account, with grants on that database only)"

    def check_id(self, tenant_id: str) -> str:
        validate_tenant_id(tenant_id)
        if not _SHARED_ID_RE.match(tenant_id) or tenant_id in SYSTEM_SCHEMAS or tenant_id in _RESERVED_SHARED_IDS:
            raise InvalidInput(f"invalid shared tenant id {tenant_id!r}",
                               "a shared tenant's id is its database's name: 1-32 lower-case letters and digits, "
                               "starting with a letter, and not slacker, mysql, sys, information_schema "
                               "or performance_schema", "for example t42 or shopeu1")
        return tenant_id

    def accounts(self, tenant_id: str) -> Accounts:
        return Accounts(APP_USER, shared_user(tenant_id), tenant_id)

    def local(self, node):
        from .shared import SharedTenants
        return SharedTenants(node, self)

    def move_refusal(self, tenant_id: str, node: str, mode: str = "live", verify: bool = False,
                     snapshot: str = "auto", into: str | None = None) -> InvalidInput | None:
        if into == "server" and snapshot == "physical":
            return InvalidInput(f"tenant {tenant_id} cannot be moved --into server with --snapshot physical",
                                "its new server is made empty and takes its database by a logical dump",
                                "nothing was started; leave out --snapshot (docs/shared.md, Consolidation)")
        if mode == "live":
            return None  # with --verify or --verify-only too: the tenant's tables are compared
        what = "--mode stop-and-copy"
        return InvalidInput(f"tenant {tenant_id} cannot be moved with {what}",
                            f"it is a shared tenant (database {tenant_id} in {node}'s shared server): only its live "
                            f"move without {what} is built", "nothing was started; leave it out (docs/shared.md)")


KINDS: dict[str, TenantKind] = {k.name: k for k in (WholeServer(), Shared())}


def kind_of(name: str | None) -> TenantKind:
    """The kind of that name (None or "": a whole server, as records from before kinds say); InvalidInput else."""
    if not name:
        return KINDS[DEFAULT_KIND]
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise InvalidInput(f"unknown tenant kind {name!r}", f"the kinds are {', '.join(KINDS)}", "") from None
