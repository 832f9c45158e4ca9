"""The fence of one database on a starved server: when locking its accounts and ending their sessions use up
the lock's whole budget, the fence gives up in one line that says so (not "not granted within -491ms"), asks
for no table lock, and leaves the accounts unlocked: the source keeps serving. The SQL is a fake (pure logic)."""

from __future__ import annotations

import time

import pytest

from slacker.errors import LockNotGranted
from slacker.mariadb import onedb


class FakeConn:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def close(self) -> None:
        pass


@pytest.fixture
def server(monkeypatch):
    conn = FakeConn()
    calls = []
    monkeypatch.setattr(onedb, "_local", lambda c: None)
    monkeypatch.setattr(onedb, "_run", lambda c, stmt, args=None: c.statements.append(stmt) or ())

    def lock_accounts(c, users, locked=True):
        calls.append(("lock" if locked else "unlock", tuple(users)))
        return [(u, "%") for u in users]

    def kill_sessions(c, users, wait_s, busy_only=False):
        time.sleep(0.06)  # a server that answers slowly
        return []

    monkeypatch.setattr(onedb, "lock_accounts", lock_accounts)
    monkeypatch.setattr(onedb, "kill_sessions", kill_sessions)
    monkeypatch.setattr(onedb, "base_tables", lambda c, db: ("items",))
    return conn, calls


def test_a_budget_spent_before_the_lock_gives_up_in_one_line_and_unlocks_the_accounts(server):
    conn, calls = server
    with pytest.raises(LockNotGranted) as err:
        onedb.fence(lambda: conn, "t42", ["t42_app"], lock_timeout_s=0.05)
    text = str(err.value)
    assert "locking its accounts and ending their sessions took" in text and "of the 50ms the lock had" in text
    assert "-" not in text.split("took", 1)[1].split("ms", 1)[0]  # no negative budget
    assert not any("FLUSH TABLES" in s for s in conn.statements)  # no lock was asked for
    assert calls[-1] == ("unlock", ("t42_app",))  # the tenant's users may log in again
