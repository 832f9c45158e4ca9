"""Whole-server tenants on a node: the node's `TenantManager` (slacker/tenants.py) seen as `LocalTenants`.

The supervisor, the reconciler and migrations work on the `TenantManager` itself (a live move is built for
this kind); this adapter is what the agent's tenant routes ask.
"""

from __future__ import annotations

import os

from ..tenants import DEFAULT_BUFFER_POOL_BYTES, Tenant
from .local import CreateOptions, LocalTenant, LocalTenants


class ServerTenants(LocalTenants):
    def __init__(self, node, kind) -> None:
        self.node, self.kind = node, kind
        self.tenants = node.tenants

    def view(self, t: Tenant) -> LocalTenant:
        return LocalTenant(id=t.id, kind=self.kind, host=t.host, port=t.port, desired_state=t.info.desired_state,
                           fenced=t.info.fenced, running=t.is_running(), password_file=t.app_password_file,
                           datadir=t.datadir, buffer_pool_bytes=t.info.buffer_pool_bytes)

    def list(self) -> list[LocalTenant]:
        return [self.view(t) for t in self.tenants.list()]

    def ports(self) -> set[int]:
        return self.tenants.local_ports()

    def holds(self, tenant_id: str) -> bool:
        return os.path.lexists(self.tenants.tenant_dir(tenant_id))

    def get(self, tenant_id: str) -> LocalTenant:
        return self.view(self.tenants.get(tenant_id))

    def create(self, tenant_id: str, port: int, options: CreateOptions) -> LocalTenant:
        return self.view(self.tenants.create(tenant_id, port=port,
                                             buffer_pool_bytes=options.buffer_pool_bytes or DEFAULT_BUFFER_POOL_BYTES))

    def delete(self, tenant_id: str) -> None:
        self.tenants.delete(tenant_id)
        self.node.supervisor.forget(tenant_id)

    def healthy(self, tenant: LocalTenant) -> bool:
        return self.tenants.health(self.tenants.get(tenant.id))["healthy"]

    def stop_all(self) -> None:
        for t in self.tenants.list():
            self.tenants.stop_tenant(t)
