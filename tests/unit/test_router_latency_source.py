"""The router's latency source (slacker.latency.RouterLatencySource), the default's choice between it and the
server's performance_schema (slacker.sources.router.LatencyChoice), and the load's latency seeded from the agents'
per-tenant windows (the kinds' seeds, slacker.sources; measure(seed=...)); the node's latency (slacker.sources.node)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slacker.errors import InvalidInput
from slacker.latency import LatencySample, RouterLatencySource, parse_latency_source_spec, router_traffic
from slacker.sources.node import node_latency
from slacker.sources.router import LatencyChoice
from slacker.throttle import measure

M = "slacker_router_transaction_latency_seconds"


def page(tenants: dict[str, tuple[float, int]], conns: dict[str, int] | None = None) -> str:
    out = [f"# HELP {M} x", f"# TYPE {M} histogram"]
    for t, (s, c) in tenants.items():
        out += [f'{M}_bucket{{tenant="{t}",le="+Inf"}} {c}', f'{M}_sum{{tenant="{t}"}} {s}', f'{M}_count{{tenant="{t}"}} {c}']
    out += ["# HELP slacker_router_connections x", "# TYPE slacker_router_connections gauge"]
    out += [f'slacker_router_connections{{tenant="{t}"}} {n}' for t, n in (conns or {}).items()]
    return "\n".join(out) + "\n"


class Routers:
    """Two routers whose counters the test moves; a clock a second a read."""

    def __init__(self) -> None:
        self.totals = {"r1:1": {"t1": (0.0, 0)}, "r2:1": {"t1": (0.0, 0)}}
        self.down: set[str] = set()
        self.now = 0.0

    def fetch(self, admin: str) -> str:
        if admin in self.down:
            raise OSError("connection refused")
        return page(self.totals[admin])

    def clock(self) -> float:
        return self.now

    def add(self, admin: str, n: int, latency_s: float) -> None:
        s, c = self.totals[admin]["t1"]
        self.totals[admin]["t1"] = (s + n * latency_s, c + n)


def test_routers_are_one_population_weighted_by_count():
    r = Routers()
    src = RouterLatencySource("t1", lambda: sorted(r.totals), window_s=3, step_s=1, fetch=r.fetch, clock=r.clock)
    assert src.read().count == 0
    for _ in range(3):
        r.now += 1
        r.add("r1:1", 90, 0.010)  # the busy router's clients: 10 ms
        r.add("r2:1", 10, 0.050)  # a few through the other: 50 ms
        sample = src.read()
    assert sample.ok and sample.count == 300
    assert sample.latency_s == pytest.approx((0.9 * 0.010 + 0.1 * 0.050))  # 14 ms, not the routers' mean 30 ms


def test_a_router_that_does_not_answer_fails_the_sample_and_a_new_one_restarts_the_window():
    r = Routers()
    admins = ["r1:1"]
    src = RouterLatencySource("t1", lambda: admins, window_s=3, step_s=1, fetch=r.fetch, clock=r.clock)
    src.read()
    r.now += 1
    r.add("r1:1", 10, 0.01)
    assert src.read().count == 10
    r.totals["r2:1"]["t1"] = (500.0, 10_000)  # a router with a long history joins: its totals are not this window's
    admins.append("r2:1")
    r.now += 1
    assert src.read().count == 0
    r.down.add("r2:1")
    r.now += 1
    s = src.read()
    assert not s.ok and "r2:1" in s.error
    assert not RouterLatencySource("t1", lambda: [], fetch=r.fetch, clock=r.clock).read().ok  # none announced


def test_router_traffic_says_which_routers_carry_a_tenant():
    pages = {"a:1": page({"t1": (1.0, 50)}, {"t1": 2}), "b:1": page({"t1": (0.5, 20)}, {"t1": 0}),
             "c:1": page({"t2": (1.0, 5)}, {"t2": 1})}

    def fetch(admin):
        if admin == "d:1":
            raise OSError("refused")
        return pages[admin]

    seen, failed = router_traffic("t1", ["a:1", "b:1", "c:1", "d:1"], fetch=fetch)
    assert seen == {"a:1": (50, 2), "b:1": (20, 0), "c:1": (0, 0)}
    assert list(failed) == ["d:1"]


def test_the_router_spec():
    assert parse_latency_source_spec("router").kind == "router"
    assert parse_latency_source_spec("router,table=statements").pfs_kind == "statements"
    for bad in ("router,table=rows", "router,node=target", "router,url=x"):
        with pytest.raises(InvalidInput):
            parse_latency_source_spec(bad)


def _choice(pages: dict[str, str]) -> LatencyChoice:
    choice = LatencyChoice(SimpleNamespace())
    choice.admins = lambda: sorted(pages)
    return choice


def test_the_default_takes_the_routers_for_a_routed_tenant_and_the_server_for_the_others(monkeypatch):
    import slacker.sources.router as router

    pages = {"a:1": page({"t1": (1.0, 50)}, {"t1": 3})}
    monkeypatch.setattr(router, "router_traffic", lambda t, admins, kind: router_traffic(t, admins, kind, fetch=pages.get))
    monkeypatch.setattr(router, "pfs_maker", lambda t, spec, w, s: lambda: SimpleNamespace(name=f"pfs:{t.id}"))
    spec = parse_latency_source_spec("performance-schema")
    choice = _choice(pages)
    routed = choice.maker(SimpleNamespace(id="t1"), spec, 3.0, 1.0)()
    direct = choice.maker(SimpleNamespace(id="t2"), spec, 3.0, 1.0)()
    assert isinstance(routed, RouterLatencySource) and direct.name == "pfs:t2"
    doc = choice.to_dict()
    assert doc["kind"] == "mixed"
    assert doc["tenants"]["t1"]["source"] == "router" and doc["tenants"]["t1"]["routers"] == ["a:1"]
    assert doc["tenants"]["t2"] == {"source": "performance_schema", "why": "none of the 1 router(s) announced carries "
                                    "its clients (no open connection with transactions measured)"}
    none = _choice({})
    none.maker(SimpleNamespace(id="t3"), spec, 3.0, 1.0)()
    assert none.to_dict() == {"kind": "performance_schema", "tenants": {"t3": {
        "source": "performance_schema", "why": "no router is announced in the directory"}}}


class Source:
    def __init__(self, latency_s: float) -> None:
        self.reads = 0
        self.latency_s = latency_s

    def read(self) -> LatencySample:
        self.reads += 1
        return LatencySample("s", float(self.reads), sum_s=self.latency_s * 10, count=10, window_s=1.0,
                             last_sum_s=self.latency_s * 10, last_count=10)


def test_a_seed_under_the_setpoint_starts_the_copy_at_once_and_one_over_it_is_measured():
    src = Source(0.02)
    b = measure(src, 3.0, 0.01, setpoint_s=0.1, seed=0.012)
    assert b.from_history and b.latency_s == 0.012 and src.reads == 1  # one read: the source answers
    src = Source(0.02)
    b = measure(src, 0.03, 0.01, setpoint_s=0.015, seed=0.02)  # over the setpoint: refused (or not) on a measure
    assert not b.from_history and b.latency_s == pytest.approx(0.02) and src.reads > 1


def test_the_agents_windows_weight_tenants_by_their_transactions():
    rows = [{"tenant": "a", "latency_s": 0.010, "transactions_per_s": 90, "window_s": 10, "ok": True},
            {"tenant": "b", "latency_s": 0.050, "transactions_per_s": 10, "window_s": 10, "ok": True},
            {"tenant": "c", "latency_s": None, "transactions_per_s": 0, "window_s": 10, "ok": True}]
    assert node_latency(rows) == pytest.approx(0.014)
    assert node_latency(rows, exclude=["a"]) == pytest.approx(0.050)
    assert node_latency(rows[2:]) is None  # idle: nothing to seed from
    failed = rows[:1] + [dict(rows[1], ok=False, latency_s=None)]
    assert node_latency(failed, failed="unknown") is None  # a seed: a tenant's figures failed, not known
    assert node_latency(failed) == pytest.approx(0.010)  # a guard or a plan: the rest
    # Objects as the planner's samples (no window: a second each), and no floor of transactions for them.
    assert node_latency([SimpleNamespace(latency_s=0.02, transactions_per_s=1.0)], min_transactions=0) == 0.02
    assert node_latency([SimpleNamespace(latency_s=0.02, transactions_per_s=1.0)]) is None  # under 3 in all


def _rings(rings: dict[str, dict[str, tuple[float, int]]], seconds_kept: int = 15):
    """A fake GET /v1/latency/recent: router -> tenant -> (sum_s, count) over the seconds asked; a router
    missing from `rings` does not answer."""
    asked = []

    def fetch(admin: str, query: dict) -> dict:
        asked.append((admin, dict(query)))
        if admin not in rings:
            raise OSError("connection refused")
        s, n = rings[admin].get(query["tenant"], (0.0, 0))
        return {"tenant": query["tenant"], "kind": query["kind"], "seconds": min(int(query["seconds"]), seconds_kept),
                "count": n, "sum_s": s}
    fetch.asked = asked
    return fetch


def test_recent_sums_every_router_and_any_failure_is_unknown():
    fetch = _rings({"a:1": {"t1": (0.2, 10)}, "b:2": {"t1": (0.6, 10)}})
    src = RouterLatencySource("t1", lambda: ["b:2", "a:1"], kind="statements", fetch_recent=fetch)
    assert src.recent(10) == (pytest.approx(0.8), 20)
    assert fetch.asked[0][1] == {"tenant": "t1", "seconds": 10, "kind": "statements"}
    assert RouterLatencySource("t1", lambda: ["a:1", "c:3"], fetch_recent=fetch).recent(10) is None
    assert RouterLatencySource("t1", lambda: [], fetch_recent=fetch).recent(10) is None
    # A router that keeps fewer seconds than asked cannot answer for them.
    assert RouterLatencySource("t1", lambda: ["a:1"], fetch_recent=_rings({"a:1": {}}, 5)).recent(10) is None


def _node(*tenants: str):
    rows = [SimpleNamespace(id=t, info=SimpleNamespace(desired_state="running")) for t in tenants]
    return SimpleNamespace(tenants=SimpleNamespace(list=lambda: rows))


def test_the_routers_rings_seed_the_load_latency_or_leave_it_to_a_measure():
    from slacker.controller.settings import ControllerSettings
    from slacker.sources import parse
    from slacker.sources.router import seed

    def router_baseline(node, choice, kind, tenant, target, c, fetch):
        return seed(node, choice, parse(f"router,table={kind}"), tenant, target, c, fetch)

    c = ControllerSettings(setpoint_s=0.1)
    choice = _choice({"a:1": "", "b:2": ""})
    # Every running tenant of the node, over every router: one population weighted by transactions.
    fetch = _rings({"a:1": {"t1": (0.3, 10)}, "b:2": {"t1": (0.1, 10), "t2": (1.2, 20)}})
    assert router_baseline(_node("t1", "t2"), choice, "transactions", "t1", None, c, fetch) == pytest.approx(0.04)
    # A router that does not answer, or nothing measured in the last seconds: measured instead.
    assert router_baseline(_node("t1"), choice, "transactions", "t1", None, c, _rings({"a:1": {"t1": (0.3, 10)}})) is None
    assert router_baseline(_node("t1"), choice, "transactions", "t1", None, c, _rings({"a:1": {}, "b:2": {}})) is None
    # The seed starts the copy at once under the setpoint, and is recorded as the routers' window...
    src = Source(0.02)
    b = measure(src, 3.0, 0.01, setpoint_s=0.1, seed=0.04)
    assert b.from_history and b.latency_s == 0.04 and src.reads == 1
    # ...and at or over it the load is measured (refused or admitted on a fresh figure), as for the agents' seed.
    src = Source(0.02)
    b = measure(src, 0.03, 0.01, setpoint_s=0.04, seed=0.04)
    assert not b.from_history and src.reads > 1


@pytest.mark.parametrize("sources, given, expect", [
    ({"t1": "router", "t2": "router"}, (), "router window"),
    ({"t1": "router"}, (), "router window"),
    ({"t1": "router", "t2": "performance_schema"}, (), "measured"),  # mixed: neither window holds all
    ({"t1": "router"}, ("router",), "measured"),  # given by hand: measured
])
def test_the_build_seeds_from_the_routers_only_when_every_tenant_is_routed(monkeypatch, sources, given, expect):
    from prometheus_client import CollectorRegistry

    import slacker.throttle as throttle
    from slacker.controller.settings import ControllerSettings

    def build_source(node, spec, window_s, step_s, tenant_id, choice=None):
        if choice is not None:
            choice.tenants.update({t: {"source": s, "why": ""} for t, s in sources.items()})
        return Source(0.02)

    seeded = []
    monkeypatch.setattr(throttle, "build_source", build_source)
    monkeypatch.setattr(throttle.sources, "seed",
                        lambda chosen, *a: (seeded.append(a) or 0.03) if chosen == "router" else
                        (0.01 if chosen == "performance_schema" else None))
    c = ControllerSettings(setpoint_s=0.1, latency_sources=list(given), window_s=0.03, step_s=0.01)
    node = SimpleNamespace(registry=CollectorRegistry())
    policy = throttle.build_rate_policy(node, "t1", SimpleNamespace(controller=c, target=None))
    assert policy.latency_source["load_latency_from"] == expect, policy.latency_source
    assert (policy.baseline_latency_s == 0.03) == (expect == "router window")
    assert bool(seeded) == (expect == "router window")


def test_a_node_of_shared_tenants_alone_is_seeded_from_their_windows_not_measured():
    """The seed reads every running tenant of the node whatever its kind: a node whose tenants are all in its
    shared server has a load too (it was read as none, and every controlled move of a shared tenant waited out
    a measure of the load first: seconds per move, most of a small tenant's move)."""
    from slacker.controller.settings import ControllerSettings
    from slacker.sources import parse, running_tenants
    from slacker.sources import performance_schema
    from slacker.sources.router import seed

    shared = [SimpleNamespace(id=t, desired_state="running") for t in ("s1", "s2")]
    node = SimpleNamespace(tenants=SimpleNamespace(list=lambda: []),
                           kinds={"server": SimpleNamespace(list=lambda: []), "shared": SimpleNamespace(list=lambda: shared)})
    assert running_tenants(node) == ["s1", "s2"]
    c = ControllerSettings(setpoint_s=0.1)
    fetch = _rings({"a:1": {"s1": (0.3, 10), "s2": (0.1, 10)}})
    assert seed(node, _choice({"a:1": ""}), parse("router,table=transactions"), "s1", None, c, fetch) == \
        pytest.approx(0.02)
    rows = {"s1": {"tenant": "s1", "latency_s": 0.01, "transactions_per_s": 10, "window_s": 10, "ok": True},
            "s2": {"tenant": "s2", "latency_s": 0.03, "transactions_per_s": 10, "window_s": 10, "ok": True}}
    node.tenant_stats = SimpleNamespace(snapshot=lambda: {k: SimpleNamespace(to_dict=lambda v=v: v) for k, v in rows.items()})
    assert performance_schema.seed(node, None, parse("performance_schema"), "s1", None, c) == pytest.approx(0.02)
    del rows["s2"]  # a tenant not sampled yet: not known, measured
    assert performance_schema.seed(node, None, parse("performance_schema"), "s1", None, c) is None
