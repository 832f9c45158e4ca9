"""What the agents' migration and directory metrics say, from the records they read (pure logic)."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from slacker.agent.metrics import DirectoryHealth
from slacker.migration.metrics import Tally, last_freeze_s, past_flip_s
from slacker.migration.options import HandoverAttempt, MigrationOptions, PhaseTiming
from slacker.migration.telemetry import Telemetry


def migration(phases=(), attempts=(), epoch_after=None, created=100.0, **kw):
    return SimpleNamespace(phases=[PhaseTiming(n, "", s) for n, s in phases], attempts=list(attempts),
                           past_point_of_no_return=epoch_after is not None, created=created,
                           opts=MigrationOptions(target="n2", max_freeze_s=0.5), **kw)


def test_time_past_the_flip_counts_from_the_first_phase_after_it():
    before = migration([("snapshot", 1.0), ("handover", 30.0)])
    assert past_flip_s(before, now=200.0) == 0.0
    after = migration([("handover", 30.0), ("cleanup", 40.0), ("finishing", 45.0)], epoch_after=7)
    assert past_flip_s(after, now=200.0) == 200.0 - 100.0 - 40.0
    recovered = migration([("recovering", 2.0)], epoch_after=7)  # deciding after a restart, flip known
    assert past_flip_s(recovered, now=110.0) == 8.0


def test_last_freeze_and_the_count_over_budget():
    m = migration(attempts=[HandoverAttempt(1, "over budget", 620.0, {}), HandoverAttempt(2, "flipped", 180.0, {})],
                  result="succeeded")
    assert last_freeze_s(m) == 0.18
    assert math.isnan(last_freeze_s(migration()))
    tally = Tally()
    tally.finished(m, m.opts.max_freeze_s)
    tally.finished(migration(attempts=[HandoverAttempt(1, "failed", 90.0, {})], result="failed"), 0.5)
    results, attempts, over = tally.snapshot()
    assert results == {"succeeded": 1, "failed": 1, "aborted": 0}
    assert attempts == {"flipped": 1, "over budget": 1, "failed": 1}
    assert over == 1  # 620 ms against a 500 ms budget; 180 and 90 ms within it


def test_progress_is_a_phase_bytes_a_round_or_a_handover_step(tmp_path):
    m = SimpleNamespace(phase="snapshot", rounds_done=0, attempts_made=0, handover_step="", verification=None)
    t = Telemetry(m, tmp_path / "s.jsonl")
    t._note_progress(10)
    first = t.progress_at = 1.0  # as if long ago
    t._note_progress(10)
    assert t.progress_at == first  # nothing moved
    for change in (lambda: None, lambda: setattr(m, "rounds_done", 1), lambda: setattr(m, "handover_step", "locked"),
                   lambda: setattr(m, "phase", "delta")):
        t.progress_at = first
        change()
        t._note_progress(20)  # bytes moved once, then each other kind of progress alone
        assert t.progress_at > first


class Store:
    def __init__(self, health):
        self.health = lambda: health


def scrape(collector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def test_directory_health_etcd_without_quorum():
    rows = [{"name": "e1", "reachable": True}, {"name": "e2", "reachable": False}, {"name": "e3", "reachable": False}]
    h = DirectoryHealth("n1", Store({"backend": "etcd", "healthy": False, "members": rows}))
    assert 'node="n1"' not in scrape(h)  # nothing said before the first sample
    h.sample()
    text = scrape(h)
    assert 'slacker_directory_healthy{node="n1"} 0.0' in text
    assert 'slacker_directory_members{node="n1"} 3.0' in text
    assert 'slacker_directory_members_up{node="n1"} 1.0' in text


def test_directory_health_sqlite_answering_or_not():
    ok = DirectoryHealth("n2", Store({"backend": "SQLiteDirectory", "healthy": True}))
    ok.sample()
    assert 'slacker_directory_members_up{node="n2"} 1.0' in scrape(ok)
    down = DirectoryHealth("n2", Store({"backend": "agent", "healthy": False, "error": "refused"}))
    down.sample()
    text = scrape(down)
    assert 'slacker_directory_healthy{node="n2"} 0.0' in text and 'slacker_directory_members_up{node="n2"} 0.0' in text


def test_cordon_and_owned_tenants_as_the_directory_and_supervisor_say(tmp_path):
    """`slacker node cordon` shows as slacker_node_cordoned (and since when) at the next sample, and
    uncordon clears it; a node's owned tenants count running and stopped ones, not a migration's
    incoming target or retired source."""
    from slacker.agent.metrics import TenantCollector
    from slacker.directory import SQLiteStore
    store = SQLiteStore(tmp_path / "dir.db")
    h = DirectoryHealth("n1", store)
    h.sample()
    assert 'slacker_node_cordoned{node="n1"} 0.0' in scrape(h)
    assert 'slacker_node_cordoned_since_timestamp_seconds{node="n1"} 0.0' in scrape(h)
    c = store.cordon("n1", reason="drain")
    store.cordon("n2")
    assert 'slacker_node_cordoned{node="n1"} 0.0' in scrape(h)  # what the last sample saw
    h.sample()
    text = scrape(h)
    assert 'slacker_node_cordoned{node="n1"} 1.0' in text
    since = re.search(r'slacker_node_cordoned_since_timestamp_seconds\{node="n1"\} (\S+)', text)
    assert since and float(since.group(1)) == c.since
    store.uncordon("n1")
    h.sample()
    assert 'slacker_node_cordoned{node="n1"} 0.0' in scrape(h)

    states = ["running", "running", "stopped", "incoming", "retired"]
    snap = {f"t{i}": SimpleNamespace(id=f"t{i}", desired_state=s, healthy=True, queries_per_s=0.0, queries_total=0,
                                     connections=0, restarts=0, kind="shared" if i == 1 else "server")
            for i, s in enumerate(states)}
    tenants = scrape(TenantCollector("n1", SimpleNamespace(snapshot=lambda: snap)))
    assert 'slacker_node_tenants{node="n1"} 3.0' in tenants
    # Every tenant's kind, as an info metric.
    assert 'slacker_tenant_info{kind="server",node="n1",tenant="t0"} 1.0' in tenants
    assert 'slacker_tenant_info{kind="shared",node="n1",tenant="t1"} 1.0' in tenants
