"""Kept sources: the old copy of a whole-server tenant left after its move (`--keep-source DURATION`), fenced and
replicating from the new owner, so `slacker migrate --revert` can move the tenant back with a freeze only.

A kept copy is a tenant of this node whose tenant.json carries a `kept` record: the migration that left it, the
new owner (node, address, epoch), the flip's GTID position, and until when it is kept. Its server stays running,
`read_only` (the fence of the move, persisted), and replicates from the owner through the replication
connection a migration target uses (`slacker_migration`), from exactly the flip's position: every write the new
owner acknowledges arrives here. Nothing but a later flip gives it writes again (`may_take_writes`, the rule per
epoch). When its time ends, or on `slacker migrate --release`, it is retired as a source is at the flip.
"""

from __future__ import annotations

import logging
import time

from .. import mariadb
from ..errors import Conflict, NotFound, SlackerError
from ..mariadb import durability, ops, replication

log = logging.getLogger("slacker.migration.kept")

CONNECTION = "slacker_migration"  # the replication connection's name, as a migration target's (delta.applier)
# How a kept copy applies (docs/migration.md, "The way back"): like a target in catch-up mode, since it is not the
# owner and a revert makes it durable before its freeze: commits not synced one by one (durability.RELAXED), and
# parallel optimistic replication with the concurrent applier's starting MPL. Measured (bench/run revert): with
# one durable SQL thread a kept copy fell 81 s behind four closed-loop writers on the owner.
KEPT_APPLIERS = 4
# Not the target's RELAXED (innodb_flush_log_at_trx_commit=0 loses the last second to a killed server): a kept copy
# must survive its server's SIGKILL without a gap, so the redo log is written at each commit (to the OS) and synced
# once a second; a crash of the host itself can lose that second, which replication fetches again.
KEPT_DURABILITY = {"sync_binlog": 0, "innodb_flush_log_at_trx_commit": 2}


def may_take_writes(kept: dict | None, owner: str, epoch: int, node: str) -> bool:
    """The fence's rule per epoch: a copy fenced at epoch N (the flip that made another node the owner) takes
    writes again only as the owner of a later epoch that a flip gave it."""
    if owner != node:
        return False
    return kept is None or epoch > int(kept.get("epoch") or 0)


class KeptCopies:
    """This node's kept sources (one per tenant at most: the tenant's directory on this node is the copy)."""

    def __init__(self, node) -> None:
        self.node = node

    # ---- reading ------------------------------------------------------------------------------
    def get(self, tenant_id: str):
        """The tenant whose copy is kept here; NotFound when there is none."""
        if self.node.tenants.exists(tenant_id):
            t = self.node.tenants.get(tenant_id)
            if t.info.extra.get("kept"):
                return t
        raise NotFound(f"no kept copy of {tenant_id} on {self.node.name}",
                       "the move did not keep its source (--keep-source), or its time ended and it was released", "")

    def tenants(self) -> list:
        return [t for t in self.node.tenants.list() if t.info.extra.get("kept")]

    def describe(self, t) -> dict:
        k = dict(t.info.extra["kept"])
        doc = {"tenant": t.id, "node": self.node.name, "owner": k.get("owner"), "epoch": k.get("epoch"),
               "migration": k.get("migration"), "since": k.get("since"), "until": k.get("until"),
               "left_s": round(max(0.0, float(k.get("until") or 0) - time.time()), 1),
               "fenced": t.info.fenced, "running": t.is_running(), "busy": t.id in self.node.supervisor.busy,
               "replicating": False, "lag_s": None, "applied_gtid": None, "error": ""}
        if not doc["running"]:
            doc["error"] = "its server is not running (the supervisor restarts it)"
            return doc
        try:
            conn = t.admin_connect(timeout_s=3)
            try:
                st = replication.connection_status(conn, CONNECTION)
                doc["applied_gtid"] = replication.gtid_slave_pos(conn)
            finally:
                ops.close_quietly(conn)
        except (SlackerError, Exception) as exc:  # noqa: BLE001 - status reports, never raises
            doc["error"] = f"cannot read its replication: {exc}".splitlines()[0]
            return doc
        doc["replicating"] = st.get("Slave_SQL_Running") == "Yes" and st.get("Slave_IO_Running") == "Yes"
        lag = st.get("Seconds_Behind_Master")
        doc["lag_s"] = None if lag is None else float(lag)
        err = st.get("Last_SQL_Error") or st.get("Last_IO_Error") or ""
        if err:
            doc["error"] = str(err).splitlines()[0]
        return doc

    def _retune(self, t) -> None:
        """A kept copy's server restarted (its supervisor's doing) runs with its config's durable, serial
        replication: tuned again, its replication restarted where it was."""
        if not t.is_running():
            return
        try:
            conn = t.admin_connect(timeout_s=3)
            try:
                if not self._tuned(conn):
                    self._replicate(conn, t, t.info.extra["kept"])
            finally:
                ops.close_quietly(conn)
        except Exception as exc:  # noqa: BLE001 - retried next tick; status shows its replication
            log.warning("tenant %s: tuning its kept copy's replication: %s", t.id, exc)

    def list(self) -> list[dict]:
        return [self.describe(t) for t in self.tenants()]

    # ---- keeping ------------------------------------------------------------------------------
    def keep(self, t, *, migration: str, owner: str, host: str, port: int, epoch: int, final_gtid: str,
             keep_s: float) -> dict:
        """After the flip, instead of the retirement: the old copy stays fenced and replicates from the owner
        from the flip's position. Idempotent (a retry after a failure, or a restarted agent, runs it again)."""
        k = t.info.extra.get("kept") or {}
        if k.get("migration") != migration:
            now = time.time()
            t.info.extra["kept"] = {"migration": migration, "owner": owner, "host": host, "port": int(port),
                                    "epoch": int(epoch), "final_gtid": final_gtid, "since": now,
                                    "until": now + float(keep_s)}
        self.resume(t)  # fenced (persisted first, with `kept`), running, replicating
        log.info("tenant %s: old copy kept on %s until %s, replicating from %s (epoch %d)", t.id, self.node.name,
                 time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t.info.extra["kept"]["until"])), owner, epoch)
        return t.info.extra["kept"]

    def _replicate(self, conn, t, k: dict) -> None:
        """Replication from the owner at the flip's position, unless it already runs from there; tuned to keep up."""
        st = replication.connection_status(conn, CONNECTION)
        if st and st.get("Master_Host") == k["host"] and int(st.get("Master_Port") or 0) == int(k["port"]):
            if not self._tuned(conn):
                replication.stop_all_slaves(conn)
                self._tune(conn)
                replication.start_slave(conn, CONNECTION)
            elif st.get("Slave_SQL_Running") != "Yes" or st.get("Slave_IO_Running") != "Yes":
                replication.start_slave(conn, CONNECTION)
            return
        replication.stop_all_slaves(conn)
        self._tune(conn)
        if st:
            replication.reset_slave_all(conn, CONNECTION)
        replication.set_gtid_slave_pos(conn, k["final_gtid"])
        tls = self.node.config.tls
        replication.change_master(conn, CONNECTION, k["host"], int(k["port"]), mariadb.REPL_USER,
                                  t.repl_password(), **({"ssl_ca": str(tls.ca), "ssl_cert": str(tls.cert),
                                                         "ssl_key": str(tls.key)} if tls else {}))
        replication.start_slave(conn, CONNECTION)

    @staticmethod
    def _tuned(conn) -> bool:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.slave_parallel_threads, @@GLOBAL.slave_parallel_mode")
            threads, mode = cur.fetchone()
            have = durability.durability(cur)
        return int(threads) == KEPT_APPLIERS and str(mode) == "optimistic" and have == KEPT_DURABILITY

    @staticmethod
    def _tune(conn) -> None:
        """With every replication connection stopped: parallel optimistic apply, per-commit fsyncs off."""
        replication.set_parallel_mode(conn, "optimistic")
        replication.set_parallel_threads(conn, KEPT_APPLIERS)
        durability.relax_durability(conn, KEPT_DURABILITY)

    def make_durable(self, t) -> dict:
        """Before a revert's freeze: durable commits again, everything applied so far on disk."""
        conn = t.admin_connect(timeout_s=10)
        try:
            return durability.restore_durability(conn, t.datadir)
        finally:
            ops.close_quietly(conn)

    def resume(self, t) -> None:
        """Fenced, running and replicating from the owner its record names: after the flip, and when a revert that
        did not flip hands the copy back."""
        self.node.tenants.set_fenced(t, True, desired_state="running", live=False)
        if not t.is_running():
            self.node.tenants.start_tenant(t, extra_args=["--skip-slave-start"])  # tuned, then started below
        conn = t.admin_connect(timeout_s=10)
        try:
            ops.ensure_read_only(conn, True)
            self.node.tenants.fence_unsure.discard(t.id)
            self._replicate(conn, t, t.info.extra["kept"])
        finally:
            ops.close_quietly(conn)

    def adopted(self, t) -> None:
        """A later flip named this node the kept copy's owner (the reconciler found it so): its replication
        from the old owner forgotten and its `kept` record dropped, before the fence is lifted."""
        conn = t.admin_connect(timeout_s=10)
        try:
            replication.forget_replication(conn)
        finally:
            ops.close_quietly(conn)
        t.info.extra.pop("kept", None)
        t.save()

    # ---- the end of keeping -------------------------------------------------------------------
    def release(self, tenant_id: str, reason: str = "released by the operator") -> dict:
        """Retire the kept copy (as a source at the flip); refused while a revert holds it."""
        t = self.get(tenant_id)
        self.node.claim(tenant_id)  # Conflict while a revert (or another release) holds it
        try:
            doc = self.describe(t)
            own = None
            try:
                own = self.node.directory.lookup(tenant_id)
            except SlackerError:
                pass
            if own is not None and own.node == self.node.name:
                raise Conflict(f"the copy of {tenant_id} on {self.node.name} is its owner's",
                               f"the directory names {own.node} at epoch {own.epoch}", "nothing to release")
            t.info.extra.pop("kept", None)
            pending = self.node.tenants.retire(t, str(doc.get("migration") or ""))
            if pending is not None:
                pending.finish()
            self.node.supervisor.forget(tenant_id)
        finally:
            self.node.release(tenant_id)
        log.warning("tenant %s: kept copy on %s released (%s)", tenant_id, self.node.name, reason)
        return dict(doc, released=True, reason=reason)

    def tick(self) -> None:
        """Release every kept copy whose time ended, or whose tenant moved on from the owner it replicates from
        (nothing could revert onto it), and that no revert holds (the supervisor's tick)."""
        now = time.time()
        kept = [t for t in self.tenants() if t.id not in self.node.supervisor.busy]
        if not kept:
            return
        try:
            owners = self.node.directory.owners(t.id for t in kept)
        except SlackerError:
            owners = {}
        for t in kept:
            self._retune(t)
            k, own = t.info.extra["kept"], owners.get(t.id)
            if own is not None and own.node != self.node.name and own.node != k.get("owner"):
                reason = f"the tenant moved on to {own.node}: it no longer replicates from its owner"
            elif float(k.get("until") or 0) <= now:
                reason = "its --keep-source time ended"
            else:
                continue
            try:
                self.release(t.id, reason=reason)
            except SlackerError as exc:
                log.warning("releasing the kept copy of %s: %s (retried next tick)", t.id, exc.one_line())
