"""The target side of a migration: receive the stream, prepare, start hidden, catch up, promote.

An incoming tenant lives in the node's tenants directory with desired state
"incoming": the supervisor leaves it alone and clients cannot find it (the
directory still names the source, and the server runs read_only, which holds
the application account off). Any failure or abort removes it completely.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path

from .. import mariadb
from ..backup import select_tool
from ..delta import make_applier  # issue 13: serial|concurrent applier, catch-up mode
from ..delta.applier import ReplicationApplier, SourceLink
from ..errors import Conflict, InvalidInput, MigrationFailed, NotFound
from ..tenants import Tenant, port_is_free, validate_tenant_id
from ..transfer import Receiver
from .checksums import table_checksums

log = logging.getLogger("slacker.agent.incoming")


class IncomingMigration:
    def __init__(self, node, mid: str, tenant_id: str, port: int, buffer_pool_bytes: int, admin_password: str,
                 app_password: str, token: str, mode: str, expected_bytes: int) -> None:
        self.node = node
        self.id = mid
        self.tenant_id = tenant_id
        self.mode = mode
        self.created = time.monotonic()
        self.tenant: Tenant = node.tenants.new_tenant(tenant_id, port, buffer_pool_bytes, desired_state="incoming")
        self.applier: ReplicationApplier | None = None
        self.receiver: Receiver | None = None
        self.position: dict | None = None
        self.state = "receiving"
        self._lock = threading.Lock()
        try:
            mariadb.write_secret(self.tenant.admin_password_file, admin_password + "\n")
            mariadb.write_secret(self.tenant.app_password_file, app_password + "\n")
            self.tenant.save()
            self.tenant.datadir.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(self.tenant.datadir).free
            if expected_bytes and free < expected_bytes * 1.2 + 64 * 1024 * 1024:
                raise MigrationFailed(f"target node {node.name} lacks disk space",
                                      f"{free} bytes free, the copy needs about {expected_bytes}",
                                      "free space on the target or pick another node", phase="preflight")
            if mode == "stop-and-copy":
                extract = ["tar", "-x", "-f", "-", "-C", str(self.tenant.datadir)]
            else:
                extract = select_tool().extract_argv(self.tenant.datadir)
            self.receiver = Receiver(mid, token, extract, bind_host=node.config.tenant_host)
            self.receiver.start()
        except BaseException:
            self.abort()
            raise

    def describe(self) -> dict:
        return {"id": self.id, "tenant": self.tenant_id, "state": self.state, "mode": self.mode,
                "receiver_host": self.node.config.tenant_host,
                "receiver_port": self.receiver.port if self.receiver else None,
                "bytes_received": self.receiver.bytes_received if self.receiver else 0}

    def finish_stream(self, timeout_s: float) -> dict:
        assert self.receiver is not None
        result = self.receiver.wait(timeout_s)
        self.state = "received"
        return {"bytes_received": getattr(result, "bytes_received", self.receiver.bytes_received)}

    def prepare(self) -> dict:
        tool = select_tool()
        tool.prepare(self.tenant.datadir)
        pos = tool.read_position(self.tenant.datadir)
        self.position = {"binlog_file": pos.binlog_file, "binlog_pos": pos.binlog_pos, "gtid": pos.gtid}
        self.state = "prepared"
        return self.position

    def start(self, read_only: bool, gtid_state: str | None = None) -> None:
        """Start the copy hidden (read_only). The copy's binlog index names the source's files, so the
        target starts a log of its own, seeded with the source's GTID state when given."""
        for stale in self.tenant.datadir.glob("binlog.*"):
            stale.unlink()
        args = ["--skip-slave-start"] + (["--read-only=1"] if read_only else [])
        self.node.tenants.start_tenant(self.tenant, extra_args=args)
        if gtid_state:
            conn = self.tenant.admin_connect(timeout_s=10)
            try:
                with conn.cursor() as cur:
                    cur.execute("RESET MASTER")
                    cur.execute("SET GLOBAL gtid_binlog_state = %s", (gtid_state,))
                    cur.execute("SET GLOBAL gtid_slave_pos = %s", (gtid_state,))
            finally:
                conn.close()
        self.state = "started"

    def replicate(self, source_host: str, source_port: int, start_gtid: str, applier: str = "serial",
                  mpl: int | str = "auto") -> None:
        # issue 13: the applier comes from slacker.delta (serial or concurrent, catch-up mode on).
        self.applier = make_applier(applier, lambda: self.tenant.admin_connect(timeout_s=10), mpl=mpl,
                                    datadir=self.tenant.datadir)
        self.applier.start(SourceLink(source_host, source_port, mariadb.ADMIN_USER, self.tenant.admin_password()),
                           start_gtid)
        self.state = "catching-up"

    def wait_for(self, gtid: str, timeout_s: float) -> float:
        if self.applier is None:
            raise MigrationFailed("no delta applier on the target", "replicate was not called", "", phase="delta")
        return self.applier.wait_for(gtid, timeout_s)

    def applier_stats(self) -> dict:
        return self.applier.stats() if self.applier is not None and hasattr(self.applier, "stats") else {}

    def make_durable(self) -> dict:
        """issue 13: leave catch-up mode before the freeze: durable commits, everything so far on disk."""
        if self.applier is None or not hasattr(self.applier, "restore_durability"):
            return {"durable": True}
        out = self.applier.restore_durability()
        return dict(out, durable=True, catchup=self.applier.relaxed)

    def checksums(self) -> dict:
        conn = self.tenant.admin_connect(timeout_s=10)
        try:
            return table_checksums(conn)
        finally:
            conn.close()

    def promote(self, final_gtid: str | None) -> None:
        """Stop applying at exactly the source's final position and open for writes."""
        if self.applier is not None and final_gtid is not None:
            self.applier.finish(final_gtid)
        conn = self.tenant.admin_connect(timeout_s=10)
        try:
            with conn.cursor() as cur:
                cur.execute("SET GLOBAL read_only = 0")
        finally:
            conn.close()
        self.state = "promoted"

    def commit(self) -> None:
        """The directory now names this node: the tenant is ours and supervised."""
        self.tenant.info.desired_state = "running"
        self.tenant.save()
        self.state = "owned"

    def abort(self) -> None:
        """Remove every trace of the incoming tenant; never raises."""
        with self._lock:
            if self.state in ("owned", "aborted"):
                return
            self.state = "aborted"
        if self.receiver is not None:
            try:
                self.receiver.abort()
            except Exception:
                log.exception("receiver abort failed")
        if self.applier is not None:
            self.applier.abort()
        try:
            self.node.tenants.kill_tenant(self.tenant)
        except Exception:
            log.exception("killing incoming tenant %s failed", self.tenant_id)
        shutil.rmtree(self.tenant.root, ignore_errors=True)
        self.tenant.socket.unlink(missing_ok=True)


class IncomingRegistry:
    def __init__(self, node) -> None:
        self.node = node
        self._items: dict[str, IncomingMigration] = {}
        self._lock = threading.Lock()
        self._cleanup_leftovers()

    def _cleanup_leftovers(self) -> None:
        # An incoming tenant from before an agent crash was never owned: remove it.
        for t in self.node.tenants.list():
            if t.info.desired_state == "incoming":
                log.warning("removing unfinished incoming tenant %s", t.id)
                self.node.tenants.kill_tenant(t)
                shutil.rmtree(t.root, ignore_errors=True)

    def create(self, body: dict) -> dict:
        for key in ("migration_id", "tenant", "port", "admin_password", "app_password", "token"):
            if key not in body:
                raise InvalidInput(f"incoming migration lacks {key}", "", "")
        tid = validate_tenant_id(body["tenant"])
        port = int(body["port"])
        if self.node.tenants.exists(tid):
            raise Conflict(f"node {self.node.name} already has a tenant {tid}",
                           "a tenant with that id exists there", "delete it first or pick another target")
        if not port_is_free(self.node.config.tenant_host, port):
            raise Conflict(f"port {port} is in use on {self.node.config.tenant_host}", "the tenant needs its port",
                           "stop whatever listens there")
        self.node._claim(tid)
        try:
            inc = IncomingMigration(self.node, body["migration_id"], tid, port,
                                    int(body.get("buffer_pool_bytes") or 128 * 1024 * 1024),
                                    body["admin_password"], body["app_password"], body["token"],
                                    body.get("mode", "live"), int(body.get("expected_bytes") or 0))
        except BaseException:
            self.node._release(tid)
            raise
        with self._lock:
            self._items[inc.id] = inc
        return inc.describe()

    def get(self, mid: str) -> IncomingMigration:
        with self._lock:
            inc = self._items.get(mid)
        if inc is None:
            raise NotFound(f"no incoming migration {mid} on {self.node.name}", "", "")
        return inc

    def finish(self, mid: str, committed: bool) -> None:
        with self._lock:
            inc = self._items.pop(mid, None)
        if inc is None:
            return
        if committed:
            inc.commit()
        else:
            inc.abort()
        self.node._release(inc.tenant_id)

    def list(self) -> list[dict]:
        with self._lock:
            return [i.describe() for i in self._items.values()]

    def shutdown(self) -> None:
        with self._lock:
            ids = list(self._items)
        for mid in ids:
            self.finish(mid, committed=False)
