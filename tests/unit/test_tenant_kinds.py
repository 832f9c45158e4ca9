"""Tenant kinds (slacker/kinds/): a shared tenant's id is a database name a client types unquoted, its account
name is `<id>_app` and cannot be another tenant's or a service account's, the registry answers for records from
before kinds; the shared server's gtid_domain_id is unique in the fleet, allocated through the directory."""

from __future__ import annotations

import threading

import pytest

from slacker.directory import SQLiteStore
from slacker.errors import InvalidInput
from slacker.kinds import KINDS, MAX_USER_NAME_CHARS, kind_of, shared_user
from slacker.mariadb import SERVICE_USERS
from slacker.shared_server import SERVER_ID_BASE, allocate_domain_id, next_domain_id


def test_the_registry_names_both_kinds_and_a_record_without_one_is_a_whole_server():
    assert set(KINDS) == {"server", "shared"}
    assert kind_of(None).name == kind_of("").name == "server"
    assert kind_of("shared").name == "shared"
    with pytest.raises(InvalidInput, match="unknown tenant kind 'database'"):
        kind_of("database")


def test_a_client_logs_in_as_app_for_both_kinds_and_reaches_its_own_account():
    server, shared = KINDS["server"].accounts("t42"), KINDS["shared"].accounts("t42")
    assert (server.client_user, server.owner_user, server.database) == ("app", "app", None)
    assert (shared.client_user, shared.owner_user, shared.database) == ("app", "t42_app", "t42")


@pytest.mark.parametrize("bad", ["t-42", "42t", "1", "mysql", "sys", "information_schema", "performance_schema",
                                 "slacker", "T42", "t_42", "", "a" * 33, "t42;drop"])
def test_ids_that_are_no_plain_database_name_are_refused_for_a_shared_tenant(bad):
    with pytest.raises(InvalidInput):
        KINDS["shared"].check_id(bad)


def test_a_dashed_id_is_still_a_whole_servers():
    assert KINDS["server"].check_id("shop-eu-1") == "shop-eu-1"
    with pytest.raises(InvalidInput, match="its database's name"):
        KINDS["shared"].check_id("shop-eu-1")


def test_account_names_cannot_collide_between_tenants_or_with_the_service_accounts():
    ids = ["t4", "t42", "t4x", "a" * 32, "app", "slackerx", "backup", "repl"]
    names = [shared_user(KINDS["shared"].check_id(i)) for i in ids]
    assert len(set(names)) == len(names)
    assert not set(names) & set(SERVICE_USERS)
    # The mapping is one way only: the id is everything before the last '_'.
    assert all(n.rsplit("_", 1)[0] == i for n, i in zip(names, ids))
    assert max(len(n) for n in names) == 36 <= MAX_USER_NAME_CHARS
    with pytest.raises(InvalidInput):
        shared_user("t_42")


def test_a_shared_tenant_moves_live_and_what_is_not_built_is_refused_in_one_line():
    assert KINDS["server"].move_refusal("t1", "node-1", "stop-and-copy", True) is None
    assert KINDS["shared"].move_refusal("t42", "node-1") is None
    assert KINDS["shared"].move_refusal("t42", "node-1", "live", True) is None  # --verify: its tables compared
    for verify in (False, True):
        refusal = KINDS["shared"].move_refusal("t42", "node-1", "stop-and-copy", verify)
        assert isinstance(refusal, InvalidInput)
        assert "--mode stop-and-copy" in refusal.one_line() and "\n" not in refusal.one_line()


def test_the_next_domain_id_is_the_smallest_never_given_and_never_zero():
    assert next_domain_id([]) == 1
    assert next_domain_id([1, 2, 4]) == 3
    assert next_domain_id({0, 1, 2, 3}) == 4
    assert SERVER_ID_BASE + next_domain_id([]) > 0x7FFFFFFF  # above every whole server's server_id


def test_domain_ids_allocated_at_once_by_many_nodes_are_all_different(tmp_path):
    store = SQLiteStore(tmp_path / "d.sqlite")
    try:
        got: dict[str, int] = {}
        barrier = threading.Barrier(6)

        def allocate(node: str) -> None:
            barrier.wait()
            got[node] = allocate_domain_id(store, node)

        threads = [threading.Thread(target=allocate, args=(f"node-{i}",)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(got.values()) == [1, 2, 3, 4, 5, 6]
        # A node that makes its shared server anew gets a new id: an old one may live on in replication state.
        assert allocate_domain_id(store, "node-1") == 7
        assert {v["node"] for v in store.state_list("shared/domains/").values()} == {f"node-{i}" for i in range(6)}
        assert store.lock_info("shared-domains") is None  # released
    finally:
        store.close()


def test_a_nodes_shared_kind_holds_no_tenant_whose_id_is_no_database_name(tmp_path):
    """The agent asks every kind's manager whether it holds an id: a whole server's dashed id is not a
    refusal from the shared kind, just not one of its tenants."""
    from types import SimpleNamespace

    from slacker.tenants import TenantManager

    node = SimpleNamespace(name="node-1", tenants=TenantManager(tmp_path / "node"), directory=None)
    shared = KINDS["shared"].local(node)
    assert not shared.holds("shop-eu-1") and not shared.holds("t42")
    assert shared.list() == [] and shared.port() is None and shared.status() == {"shared_server": None}


def test_a_whole_server_is_refused_a_logical_snapshot_in_one_line():
    refusal = KINDS["server"].move_refusal("t1", "node-1", snapshot="logical")
    assert isinstance(refusal, InvalidInput) and "--snapshot logical" in refusal.one_line()
    assert KINDS["server"].move_refusal("t1", "node-1", snapshot="physical") is None
    assert KINDS["shared"].move_refusal("t42", "node-1", snapshot="physical") is None
