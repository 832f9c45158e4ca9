"""The scale bench's stand-in node: over HTTP it answers, as an agent would, the login hash of each alias (its
real tenant's), every hash at once, and its tenants; anything else is a one-line NotFound."""

from __future__ import annotations

import pytest

from benches.scale.aliases import NODE, StandIn, Target
from slacker.agent.client import AgentClient
from slacker.errors import NotFound
from slacker.router.control import password_hash


@pytest.fixture
def stand_in():
    s = StandIn().start()
    yield s
    s.stop()


def test_the_stand_in_answers_what_router_and_cli_ask(stand_in):
    real = Target("base1", "127.0.0.9", 40001, "secret-one")
    other = Target("base2", "127.0.0.10", 40002, "secret-two")
    stand_in.targets.update({"a00000": real, "a00001": other, "a00002": real})
    agent = AgentClient(stand_in.url, "any", NODE)
    assert agent.request("GET", "/v1/tenants/a00001/login") == {
        "tenant": "a00001", "node": NODE, "user": "app", "hash": password_hash("secret-two")}
    logins = agent.request("GET", "/v1/logins")["logins"]
    assert {x["tenant"]: x["hash"] for x in logins} == {
        "a00000": password_hash("secret-one"), "a00001": password_hash("secret-two"),
        "a00002": password_hash("secret-one")}
    status = agent.request("GET", "/v1/status")
    assert status["node"] == NODE and [t["id"] for t in status["tenants"]] == ["a00000", "a00001", "a00002"]
    assert status["tenants"][1]["host"] == "127.0.0.10" and status["tenants"][1]["port"] == 40002
    stand_in.targets["a00003"] = other  # a new alias shows at once
    assert len(agent.request("GET", "/v1/tenants")["tenants"]) == 4
    with pytest.raises(NotFound):
        agent.request("GET", "/v1/tenants/zzz/login")
    with pytest.raises(NotFound):
        agent.request("GET", "/v1/tenant-stats")
