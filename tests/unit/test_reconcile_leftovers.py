"""The reconciler's tick on real tenant files and a real (SQLite) directory: a retired copy it
cannot remove (its directory is a mount point: the rename into the trash fails) must not stop it
from fencing a copy that runs writable here while the directory names another node."""

import os
import subprocess
from types import SimpleNamespace

import pytest

from slacker import mariadb
from slacker.agent.supervisor import Supervisor
from slacker.directory.sqlite import SQLiteStore
from slacker.migration.reconcile import Reconciler
from slacker.tenants import TenantManager


def laid_out(mgr: TenantManager, tenant_id: str, port: int, desired_state: str):
    t = mgr.new_tenant(tenant_id, port, 64 * 1024 * 1024, desired_state=desired_state)
    for f in (t.admin_password_file, t.app_password_file):
        mariadb.write_secret(f, "pw\n")
    t.save()
    mgr.put_in_place(t)
    return t


@pytest.fixture
def mounted(tmp_path):
    points = []

    def mount(path):
        if os.geteuid() != 0:
            pytest.skip("needs root to mount a tmpfs")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(path)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
        points.append(path)

    yield mount
    for p in points:
        subprocess.run(["umount", "-l", str(p)], check=False)


def test_an_unremovable_retired_copy_does_not_stop_the_fencing_of_another(tmp_path, mounted):
    mgr = TenantManager(tmp_path / "data", node="node-2")
    directory = SQLiteStore(tmp_path / "directory.db")
    old = laid_out(mgr, "old", 14001, "retired")
    saved = {p.name: p.read_bytes() for p in old.root.iterdir() if p.is_file()}
    mounted(old.root)  # its files now live on a filesystem of their own, as some operators lay them out
    for name, data in saved.items():
        (old.root / name).write_bytes(data)
    stray = laid_out(mgr, "stray", 14002, "running")
    directory.register("stray", "node-1", "127.0.0.1", 14002)  # another node owns it
    node = SimpleNamespace(name="node-2", tenants=mgr, directory=directory, supervisor=Supervisor(mgr), kinds={})
    try:
        Reconciler(node).tick()
    except OSError:
        pass  # the supervisor logs a failed tick and goes on; what matters is what it left undone
    assert mgr.get("stray").info.fenced, "a copy the directory places elsewhere stays writable here"
