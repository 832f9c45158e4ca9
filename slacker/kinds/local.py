"""A node's side of the tenant kinds: one manager per kind behind `LocalTenants`, and `LocalTenant`, a tenant
as its node shows it whatever its kind. The agent (slacker/agent/node.py) holds one manager per entry of
`slacker.kinds.KINDS` and asks them in turn; it never asks which kind a tenant is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidInput
from . import Accounts, TenantKind


@dataclass(frozen=True)
class CreateOptions:
    """What `tenant create` may ask beyond the id, validated at the edge (the agent's route)."""

    buffer_pool_bytes: int | None = None  # a whole server's own pool; None: the default
    existing: bool = False  # a database already in the node's shared server, registered without a copy


@dataclass(frozen=True)
class LocalTenant:
    """One tenant on this node, as the agent's API shows it."""

    id: str
    kind: TenantKind
    host: str
    port: int
    desired_state: str
    fenced: bool
    running: bool
    password_file: Path
    datadir: Path
    buffer_pool_bytes: int
    extra: dict = field(default_factory=dict)  # what only this kind has (a shared tenant's server)

    @property
    def accounts(self) -> Accounts:
        return self.kind.accounts(self.id)

    def password(self) -> str:
        return self.password_file.read_text().strip()


class LocalTenants(ABC):
    """A node's tenants of one kind."""

    kind: TenantKind

    @abstractmethod
    def list(self) -> list[LocalTenant]:
        """Every tenant of this kind the node holds (one being made or removed is left out)."""

    @abstractmethod
    def holds(self, tenant_id: str) -> bool:
        """Whether anything of that tenant is here, whole or not (a delete's first question)."""

    @abstractmethod
    def get(self, tenant_id: str) -> LocalTenant:
        """The tenant; NotFound if this kind holds no tenant of that id."""

    def ports(self) -> set[int]:
        """The ports this kind's servers listen on (a new whole server's must be another)."""
        return {t.port for t in self.list()}

    def port(self) -> int | None:
        """The port a new tenant of this kind takes, when it is fixed already (a shared server's); None: chosen."""
        return None

    def port_for_new(self, tenant_id: str) -> int | None:
        """The port a tenant being created registers at, when the kind fixes it (a shared server's, the server
        made first if the node has none); None: the node chooses one."""
        return self.port()

    @abstractmethod
    def create(self, tenant_id: str, port: int, options: CreateOptions) -> LocalTenant:
        """Make the tenant here, listening on `port`, crash-atomically: on a failure nothing is left, and a
        crash leaves what the agent's next start finishes or removes."""

    @abstractmethod
    def delete(self, tenant_id: str) -> None:
        """Remove the tenant and everything of it here, and nothing else."""

    @abstractmethod
    def healthy(self, tenant: LocalTenant) -> bool:
        """Asked now (the supervisor's sample is the usual answer)."""

    def check_options(self, options: CreateOptions) -> None:
        """Refuse options this kind does not take, in one line."""
        if options.existing:
            raise InvalidInput(f"a {self.kind.name} tenant cannot be registered without a copy",
                               "only a database already in a node's shared server can", "use --shared")

    def status(self) -> dict:
        """What the node's status shows of this kind beyond its tenants (a shared server's address)."""
        return {}

    def tick(self) -> None:
        """The supervisor's every tick (its own tenants are its own business; a kind adds what it needs)."""

    def stop_all(self) -> None:
        """Stop every server of this kind (an agent asked to stop its tenants with it)."""


def managers(node) -> dict[str, LocalTenants]:
    """The node's manager of each kind, by the kind's name."""
    from . import KINDS
    return {name: kind.local(node) for name, kind in KINDS.items()}
