"""slacker.migration.remote.follow: a long poll sees a migration's end at once, and an agent that
answers without waiting is not hammered."""

from __future__ import annotations

import time

from slacker.migration.remote import follow


class Agent:
    """Answers GET /v1/migrations/ID: active until `ends_at`; holds the request like the agent does
    when `holds` (until the end or `wait` seconds), else answers at once."""

    def __init__(self, ends_in_s: float, holds: bool) -> None:
        self.ends_at = time.monotonic() + ends_in_s
        self.holds = holds
        self.calls = 0

    def request(self, method, path, body=None, query=None, timeout_s=None):
        self.calls += 1
        wait = float((query or {}).get("wait", 0))
        if self.holds:
            time.sleep(max(0.0, min(wait, self.ends_at - time.monotonic())))
        return {"id": "m", "active": time.monotonic() < self.ends_at}


def test_the_end_is_seen_when_it_happens_not_at_the_next_poll():
    agent = Agent(ends_in_s=0.3, holds=True)
    t0 = time.monotonic()
    doc = follow(agent, {"id": "m", "active": True}, poll_s=1.0)
    assert not doc["active"]
    assert time.monotonic() - t0 < 0.6  # a plain 1 s poll would have taken 1 s


def test_an_agent_that_does_not_hold_the_request_is_polled_every_poll_s():
    agent = Agent(ends_in_s=0.5, holds=False)
    t0 = time.monotonic()
    follow(agent, {"id": "m", "active": True}, poll_s=0.2)
    assert agent.calls <= 5  # ~3-4 polls, not a busy loop
    assert time.monotonic() - t0 >= 0.5
