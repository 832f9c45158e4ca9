"""The directory: the authority on which node owns which tenant, with an epoch per tenant.

`DirectoryStore` (base.py) is the contract: lookup, compare-and-set on the
epoch, watch (one tenant, or all of them as one stream of changes), the fleet's members, an exclusive
expiring lock and a little JSON state. Backends:
`SQLiteStore` (embedded in one agent, the default for one machine) and
`EtcdStore` (etcd's v3 JSON gateway, for many hosts).
"""

from .base import Cordon, DirectoryStore, LockInfo, Member, OwnerChanges, Ownership
from .etcd import EtcdStore
from .sqlite import SQLiteStore

__all__ = ["Cordon", "DirectoryStore", "EtcdStore", "LockInfo", "Member", "OwnerChanges", "Ownership", "SQLiteStore"]
