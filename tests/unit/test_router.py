"""The router's pure parts: address parsing, the stored hash, which routers count as running,
and the data path's own Go tests (packet tracking, the login maths)."""

import hashlib
import os
import shutil
import subprocess

import pytest

from slacker.errors import InvalidInput
from slacker.router.binary import SOURCE
from slacker.router.control import REGISTRY_STALE_S, parse_address, password_hash, registered_routers


def test_parse_address():
    assert parse_address("127.0.0.1:6033") == ("127.0.0.1", 6033)
    assert parse_address("[::1]:0") == ("::1", 0)
    for bad in ("6033", "host:", ":6033", "h:99999", "h:x"):
        with pytest.raises(InvalidInput):
            parse_address(bad)


def test_password_hash_is_what_mariadb_stores():
    # MariaDB's PASSWORD('s3cret') is '*' + the upper-case hex of SHA1(SHA1(password)).
    want = hashlib.sha1(hashlib.sha1(b"s3cret").digest()).hexdigest()
    assert password_hash("s3cret") == want and len(want) == 40


class _Dir:
    def __init__(self, items):
        self.items = items

    def state_list(self, prefix=""):
        return {k: v for k, v in self.items.items() if k.startswith(prefix)}


def test_registered_routers_skips_stale_ones():
    now = 1000.0
    d = _Dir({"routers/a-1": {"address": "a:1", "updated_at": now - 1},
              "routers/b-2": {"address": "b:2", "updated_at": now - REGISTRY_STALE_S - 1},
              "routers/c-3": {"address": "c:3", "updated_at": now - 5}})
    assert [r["address"] for r in registered_routers(d, now)] == ["a:1", "c:3"]


@pytest.mark.skipif(shutil.which("go") is None, reason="golang-go is not installed")
def test_data_path_go_tests():
    env = {**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    env.setdefault("GOCACHE", str(SOURCE.parent / ".venv" / "go-cache"))
    r = subprocess.run(["go", "test", "./..."], cwd=SOURCE, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hold_and_release_on_the_data_path(tmp_path):
    """The handover's hold reaches the real data path through its admin address: refused without the
    derived bearer, held and drained with it (no connection is busy), released; an announced router
    that does not answer takes no part."""
    import json
    import time

    from slacker.router.binary import RouterUnavailable, router_binary
    from slacker.router.control import fetch_status, hold_token
    from slacker.router.freeze import RouterHold

    try:
        binary = router_binary()
    except RouterUnavailable:
        pytest.skip("the data path is not built")
    p = subprocess.Popen([binary, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        admin = json.loads(p.stdout.readline())["admin"]
        for msg in ({"op": "token", "token": hold_token("cluster-secret")},
                    {"op": "route", "tenant": "t1", "node": "node-1", "host": "127.0.0.1", "port": 9, "epoch": 3,
                     "user": "app", "hash": password_hash("pw")}):
            p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()
        time.sleep(0.2)
        d = _Dir({"routers/r-1": {"admin": admin, "updated_at": time.time()},
                  "routers/gone-9": {"admin": "127.0.0.1:9", "updated_at": time.time()}})
        wrong = RouterHold(d, "another-secret", "t1").hold(drain_s=0.1, freeze_s=0.1)
        assert wrong.held == [] and sorted(wrong.missing) == sorted([admin, "127.0.0.1:9"])
        hold = RouterHold(d, "cluster-secret", "t1").hold(drain_s=0.5, freeze_s=0.5)
        assert hold.held == [admin] and hold.missing == ["127.0.0.1:9"] and hold.busy == 0
        assert next(t for t in fetch_status(admin)["tenants"] if t["tenant"] == "t1")["held"] is True

        class Own:
            epoch, node, host, port = 4, "node-2", "127.0.0.2", 9

        hold.release(after_flip=True, own=Own())
        st = next(t for t in fetch_status(admin)["tenants"] if t["tenant"] == "t1")
        assert st["held"] is False and st["holds_total"] == 1 and (st["node"], st["epoch"]) == ("node-2", 4)
    finally:
        p.stdin.close()
        p.wait(5)


def test_a_move_that_changes_the_kind_routes_to_the_new_kinds_accounts():
    """The same client login (app@c1, its hash) reaches the tenant in its new form: a whole server packed into
    a shared server logs in there as c1_app in database c1; given a server of its own again, as app."""
    from slacker.directory import Ownership
    from slacker.router.control import Router

    r = Router(None, None, {}, None)
    sent = []
    r._send = sent.append
    r._logins[("node-1", "c1")] = {"user": "app", "hash": "ab" * 20}
    r._route(Ownership("c1", "node-1", "127.0.0.2", 20001, 1, 1.0, "server"))
    assert "owner_user" not in sent[-1] and "database" not in sent[-1]
    r._route(Ownership("c1", "node-2", "127.0.0.3", 20020, 2, 2.0, "shared"))
    assert (sent[-1]["user"], sent[-1]["hash"], sent[-1]["owner_user"], sent[-1]["database"], sent[-1]["port"]) == (
        "app", "ab" * 20, "c1_app", "c1", 20020)
    r._route(Ownership("c1", "node-3", "127.0.0.4", 20021, 3, 3.0, "shared"))  # shared to shared: kept
    assert (sent[-1]["owner_user"], sent[-1]["database"]) == ("c1_app", "c1")
    r._route(Ownership("c1", "node-1", "127.0.0.2", 20003, 4, 4.0, "server"))
    assert (sent[-1]["user"], sent[-1]["hash"]) == ("app", "ab" * 20)
    assert "owner_user" not in sent[-1] and "database" not in sent[-1]
