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
