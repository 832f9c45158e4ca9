"""The routers' part of a handover: hold a tenant's statements while its source is frozen.

Before the freeze the handover asks every router announced in the directory (its admin
address, `routers/...` state keys) to hold the tenant (POST /hold, a bearer derived from the
credential that router announced it holds, which the agent computes from the admin secret): each router stops passing new commands of the tenant's connections at statement
boundaries and answers once the connections inside a transaction or a statement have
finished them on the source (the drain), or when the drain bound is up. After the flip the
handover releases the hold with the new owner, and the held commands run there; if the
attempt is given up, the release names no owner and they run on the source.

A router that does not answer in time takes no part: its clients see the freeze as they
would without a router (a write may meet the fence), and the fence still keeps every write
off the old owner after the flip. A router that heard the hold but never hears the release
lets its commands go at the hold's own deadline, to whatever owner the directory names by
then. So a router never delays a handover by more than the request timeout, and a handover
never stalls clients for longer than the hold's deadline.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import urllib.request

from ..credentials import ADMIN, Keyring
from ..errors import SlackerError
from .control import login_of_kind, parse_address, registered_routers

log = logging.getLogger("slacker.router.freeze")

REQUEST_TIMEOUT_S = 1.0  # beyond the drain: a router slower than this takes no part
RELEASE_MARGIN_S = 5.0  # the hold outlives drain + freeze by this much: the flip, activation and release fit


def _keyring(keys: Keyring | str) -> Keyring:
    return keys if isinstance(keys, Keyring) else Keyring(keys)


def _announced(directory, keyring: Keyring) -> dict[str, str]:
    """Admin address -> the bearer its router checks at /hold, for every router announced recently.
    A router announces the scope and generation of its credential (one without: an older router,
    which held the admin credential); one whose generation is revoked takes no part."""
    out = {}
    for r in registered_routers(directory):
        if not r.get("admin"):
            continue
        cred = r.get("credential") or {}
        bearer = keyring.hold_token_for(str(cred.get("scope", ADMIN)), int(cred.get("generation", 1)))
        if bearer is None:
            log.warning("router %s presents a revoked or unknown credential (%s): it takes no part in handovers",
                        r["admin"], cred)
            continue
        out[r["admin"]] = bearer
    return out


class RouterHold:
    """The hold of one tenant on every router, for one handover attempt. `keys`: the agent's Keyring
    (or the admin secret itself)."""

    def __init__(self, directory, keys: Keyring | str, tenant: str) -> None:
        self.directory, self.keyring, self.tenant = directory, _keyring(keys), tenant
        self.bearers: dict[str, str] = {}  # admin address -> what that router checks at /hold and /release
        self.held: list[str] = []  # admin addresses that hold the tenant
        self.busy = 0  # connections not drained when the hold answered, over all routers
        self.missing: list[str] = []  # routers that did not answer (not holding)
        self.waited_ms = 0.0

    def _post(self, admin: str, path: str, params: dict, timeout_s: float) -> dict:
        host, port = parse_address(admin, "router admin address")
        url = f"http://{host}:{port}/{path}?{urllib.parse.urlencode(params)}"
        req = urllib.request.Request(url, data=b"", method="POST",
                                     headers={"Authorization": f"Bearer {self.bearers.get(admin, '')}"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())

    def _each(self, admins: list[str], path: str, params: dict, timeout_s: float) -> dict[str, dict | Exception]:
        """The same request to every router at once; each one's answer or error."""
        out: dict[str, dict | Exception] = {}

        def one(admin: str) -> None:
            try:
                out[admin] = self._post(admin, path, params, timeout_s)
            except Exception as exc:  # noqa: BLE001 - a router that does not answer takes no part
                out[admin] = exc

        threads = [threading.Thread(target=one, args=(a,), daemon=True) for a in admins]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 1)
        return out

    @classmethod
    def everywhere(cls, directory, keys: Keyring | str, tenant: str) -> "RouterHold":
        """Every announced router, as if it held the tenant: what an agent restarted mid-handover
        releases (it cannot know which routers heard its predecessor's hold; a release without a
        hold is a no-op on a router)."""
        h = cls(directory, keys, tenant)
        h.bearers = _announced(directory, h.keyring)
        h.held = list(h.bearers)
        return h

    def hold(self, drain_s: float, freeze_s: float) -> "RouterHold":
        """Hold the tenant on every announced router; returns when all drained (or the bound is up)."""
        t0 = time.monotonic()
        self.bearers = _announced(self.directory, self.keyring)
        admins = list(self.bearers)
        if not admins:
            return self
        params = {"tenant": self.tenant, "drain_ms": round(drain_s * 1000, 1),
                  "hold_ms": round((drain_s + freeze_s + RELEASE_MARGIN_S) * 1000, 1)}
        for admin, ans in self._each(admins, "hold", params, drain_s + REQUEST_TIMEOUT_S).items():
            if isinstance(ans, Exception):
                self.missing.append(admin)
                log.warning("router %s did not take part in the handover of %s: %s", admin, self.tenant, ans)
                continue
            if ans.get("held"):
                self.held.append(admin)
            self.busy += int(ans.get("busy") or 0)
        self.waited_ms = round((time.monotonic() - t0) * 1000, 1)
        if self.busy:
            log.info("tenant %s: %d routed connections still inside a transaction after %.0fms: freezing anyway",
                     self.tenant, self.busy, self.waited_ms)
        return self

    def release(self, after_flip: bool = False, own=None) -> None:
        """Let the held commands go: after the flip to the new owner (`own`, the ownership the flip wrote,
        else the directory's: a flip whose answer was lost and found later), else to the source."""
        if not self.held:
            return
        if after_flip and own is None:
            try:
                own = self.directory.lookup(self.tenant)
            except SlackerError as exc:  # the routers' watches bring the owner; the hold just ends
                log.warning("tenant %s: releasing the routers without the new owner: %s", self.tenant, exc.one_line())
        params: dict = {"tenant": self.tenant}
        if own is not None:
            params.update(epoch=own.epoch, node=own.node, host=own.host, port=own.port)
            # The accounts its kind logs in to there: a move may change the kind (a whole server packed into a
            # shared server), and the held sessions go on as the new owner's account, in its database.
            if getattr(own, "kind", None):
                params.update(login_of_kind(own))
        admins, self.held = self.held, []
        for admin, ans in self._each(admins, "release", params, REQUEST_TIMEOUT_S).items():
            if isinstance(ans, Exception):
                log.warning("router %s did not hear the release of %s (its hold ends at its deadline): %s",
                            admin, self.tenant, ans)

    def to_dict(self) -> dict:
        return {"routers_held": len(self.held), "routers_missing": len(self.missing), "busy": self.busy,
                "drain_ms": self.waited_ms}


class Routers:
    """Every router announced in the directory, as a handover's participants
    (slacker.migration.participants): the agent wires one into its migration service."""

    def __init__(self, directory, keys: Keyring | str) -> None:
        self.directory, self.keyring = directory, _keyring(keys)

    def hold(self, tenant: str, drain_s: float, freeze_s: float) -> RouterHold:
        return RouterHold(self.directory, self.keyring, tenant).hold(drain_s=drain_s, freeze_s=freeze_s)

    def held_anywhere(self, tenant: str) -> RouterHold:
        return RouterHold.everywhere(self.directory, self.keyring, tenant)
