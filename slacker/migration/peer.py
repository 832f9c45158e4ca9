"""The target half of the protocol as the source calls it: one method per target-agent route."""

from __future__ import annotations

from ..errors import AgentUnavailable, MigrationFailed, SlackerError


class TargetPeer:
    def __init__(self, node, target: str, mid: str) -> None:
        self.node = node
        self.name = target
        self.mid = mid
        self.base = f"/v1/incoming/{mid}"

    def call(self, method: str, path: str, body: dict | None = None, timeout_s: float = 60.0, phase: str = ""):
        try:
            return self.node.peer(self.name).request(method, path, body, timeout_s=timeout_s)
        except AgentUnavailable as exc:
            raise MigrationFailed(f"target agent {self.name} failed", exc.why or exc.what,
                                  "check the target agent", phase=phase) from None
        except MigrationFailed as exc:
            exc.phase = phase or exc.phase  # the phase of the migration, not of the target's step
            raise
        except SlackerError as exc:
            raise MigrationFailed(f"target {self.name}: {exc.what}", exc.why, exc.hint, phase=phase) from None

    def create(self, body: dict, phase: str) -> dict:
        return self.call("POST", "/v1/incoming", body, timeout_s=60, phase=phase)

    def step(self, name: str, body: dict | None = None, timeout_s: float = 60.0, phase: str = "") -> dict:
        return self.call("POST", f"{self.base}/{name}", body or {}, timeout_s=timeout_s, phase=phase)

    def remove(self, timeout_s: float = 60.0) -> None:
        self.node.peer(self.name).request("DELETE", self.base, timeout_s=timeout_s)
