"""The engine's freeze on a real server: what a freeze would wait for is found before it, and the lock
is granted under row-lock contention by interrupting the statements that hold it back."""

from __future__ import annotations

import threading
import time

import pytest

from slacker import oltp
from slacker.client import TenantClient
from slacker.errors import LockNotGranted
from slacker.mariadb import freeze as freezing


def test_blockers_name_long_statements_and_open_write_transactions(tenant, tenant_endpoint):
    admin = tenant.admin_connect()
    oltp.load(admin, accounts=50)
    assert freezing.blockers(admin, older_than_s=0.2) == []
    trx = tenant_endpoint.connect(autocommit=False)
    trx.begin()
    with trx.cursor() as cur:
        cur.execute("UPDATE oltp.accounts SET balance = balance + 1 WHERE id = 7")
    sleeper = tenant_endpoint.connect()
    t = threading.Thread(target=lambda: sleeper.cursor().execute("SELECT SLEEP(3)"), daemon=True)
    t.start()
    time.sleep(1.2)
    found = freezing.blockers(admin, older_than_s=0.5)
    assert len(found) == 2, found
    assert any("SELECT statement running" in line and "user app" in line for line in found), found
    assert any("transaction open" in line for line in found), found
    assert all("balance" not in line for line in found)  # a statement's text is never quoted
    trx.rollback()
    t.join(5)
    assert freezing.blockers(admin, older_than_s=0.5) == []
    for c in (trx, sleeper, admin):
        c.close()


def test_the_lock_is_granted_under_row_lock_contention(tenant, tenant_endpoint):
    admin = tenant.admin_connect()
    oltp.load(admin, accounts=200)
    load = oltp.TransferLoad(lambda: TenantClient("t1", lambda: tenant_endpoint), threads=8, accounts=200).start()
    try:
        time.sleep(1.5)
        granted = []
        for _ in range(5):
            held = freezing.freeze(tenant.admin_connect, lock_timeout_s=0.25)
            granted.append(held.granted_ms)
            freezing.unfreeze(held.conn)
            time.sleep(0.3)
        # Without interrupting, a statement that runs past the timeout holds the lock back. One of the load's own
        # may or may not be running at that moment (a busy machine slows the clients): a long read makes it sure.
        sleeper = tenant_endpoint.connect()
        reader = threading.Thread(daemon=True, target=lambda: sleeper.cursor().execute(
            "SELECT SLEEP(2) FROM oltp.accounts WHERE id = 1"))
        reader.start()
        time.sleep(0.3)
        with pytest.raises(LockNotGranted) as info:
            freezing.freeze(tenant.admin_connect, lock_timeout_s=0.25, interrupt_after_s=3600)
        assert "held back by connection" in info.value.why
        reader.join(5)
        sleeper.close()
    finally:
        load.stop()
    assert max(granted) < 250, granted
    check = oltp.check(admin, load.acked, load.failed)
    assert check.ok, check
    admin.close()
