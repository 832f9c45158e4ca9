"""When a converged migration may cut over: the operator's plan (`--cutover`) and what the wait ends in
(`--cutover-timeout`). Pure logic; the source agent's ready phase (`ready.py`) asks it once a second.

- `auto`: the handover begins the moment the delta converges (no ready phase);
- `manual`: only `slacker migrate --cutover-now`;
- `at=TIME`: from TIME (ISO 8601, UTC unless it names an offset) for `AT_WINDOW_S`, while the target keeps up;
- `window=HH:MM-HH:MM[,ZONE]`: inside that daily window (UTC unless a zone is named; it may span midnight),
  while the target keeps up; a window missed because the target lagged waits for the next one.

`--cutover-now` always goes (the operator looked). The timeout counts from the moment the migration became
ready; when it passes with no cutover, `abort` rolls the move back (the source never stopped serving) and
`wait` keeps it ready, flagged as past its timeout: the plan's own moments still apply (a later window), a
past `at` never comes back. Nothing here ever cuts over outside the operator's window or time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time as dtime, timedelta, timezone

from ..errors import InvalidInput
from ..units import parse_duration

KINDS = ("auto", "manual", "at", "window")
TIMEOUT_ACTIONS = ("abort", "wait")
DEFAULT_TIMEOUT_S = 24 * 3600.0
AT_WINDOW_S = 600.0  # `at=TIME` is a moment: the handover may begin in the ten minutes from it, never later
# The target keeps up while its end-to-end lag is at most this: the handover's last rounds then fit the freeze.
KEEPS_UP_LAG_S = 1.0

_HHMM = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class Decision:
    go: bool = False
    end: str = ""      # "abort" when the wait is over and the move rolls back
    why: str = ""      # one line: what the ready phase is waiting for, or why it goes / ends


@dataclass(frozen=True)
class CutoverPlan:
    kind: str = "auto"
    at: datetime | None = None            # kind at: the moment (aware)
    start: dtime | None = None            # kind window: daily start and end, wall clock in `zone`
    end: dtime | None = None
    zone: str = "UTC"
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_timeout: str = "abort"

    @property
    def waits(self) -> bool:
        return self.kind != "auto"

    # ---- the wire and the CLI ------------------------------------------------------------------------
    def spec(self) -> str:
        if self.kind == "at":
            return f"at={self.at.isoformat()}"
        if self.kind == "window":
            return f"window={self.start:%H:%M}-{self.end:%H:%M},{self.zone}"
        return self.kind

    def timeout_spec(self) -> str:
        return f"{self.timeout_s:g}s,{self.on_timeout}"

    @classmethod
    def parse(cls, spec: str | None, timeout: str | None = None, *, now: datetime | None = None,
              strict: bool = True) -> "CutoverPlan":
        """`--cutover WHEN` and `--cutover-timeout DURATION[,abort|wait]`, checked against `now`: a time already
        past is refused when `strict` (the CLI); the agent takes one that passed on the way as now.
        InvalidInput, one line, for anything malformed."""
        now = now or datetime.now(timezone.utc)
        timeout_s, on_timeout = _parse_timeout(timeout)
        text = (spec or "auto").strip()
        if text in ("auto", "manual"):
            return cls(text, timeout_s=timeout_s, on_timeout=on_timeout)
        kind, sep, value = text.partition("=")
        if not sep or kind not in ("at", "window"):
            raise InvalidInput(f"--cutover {text!r} is not a cutover plan",
                               "use auto, manual, at=TIME or window=HH:MM-HH:MM[,ZONE]",
                               "for example --cutover window=02:00-04:00,Europe/Berlin")
        if kind == "at":
            at = _parse_moment(value)
            if at <= now and strict:
                raise InvalidInput(f"--cutover at={value} is in the past", f"it is {now.isoformat(timespec='seconds')}",
                                   "name a later time, or --cutover manual and `--cutover-now` when ready")
            if (at - now).total_seconds() > timeout_s:
                raise InvalidInput(f"--cutover at={value} is after the wait's timeout",
                                   f"--cutover-timeout {timeout_s:g}s ends the ready wait first",
                                   "raise --cutover-timeout")
            return cls("at", at=at, timeout_s=timeout_s, on_timeout=on_timeout)
        window, _, zone = value.partition(",")
        zone = zone.strip() or "UTC"
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # loaded when a window is asked for, not by the CLI's start

        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput(f"--cutover window: unknown time zone {zone!r}", "use an IANA name",
                               "for example Europe/Berlin, or omit it for UTC") from None
        a, dash, b = window.partition("-")
        ma, mb = _HHMM.match(a.strip()), _HHMM.match(b.strip())
        if not dash or not ma or not mb:
            raise InvalidInput(f"--cutover window={value} is malformed", "the window is HH:MM-HH:MM[,ZONE]",
                               "for example window=02:00-04:00")
        start, end = dtime(int(ma[1]), int(ma[2])), dtime(int(mb[1]), int(mb[2]))
        if start == end:
            raise InvalidInput(f"--cutover window={value} is empty", "its start and end are the same minute", "")
        return cls("window", start=start, end=end, zone=zone, timeout_s=timeout_s, on_timeout=on_timeout)

    # ---- the ready phase's question --------------------------------------------------------------
    def in_moment(self, now: datetime) -> bool:
        """Whether `now` is inside the plan's own time (always false for manual; always true for auto)."""
        if self.kind == "auto":
            return True
        if self.kind == "at":
            return self.at <= now < self.at + timedelta(seconds=AT_WINDOW_S)
        if self.kind == "window":
            from zoneinfo import ZoneInfo  # as in parse: only a window needs the zone database

            local = now.astimezone(ZoneInfo(self.zone)).time().replace(second=0, microsecond=0)
            if self.start < self.end:
                return self.start <= local < self.end
            return local >= self.start or local < self.end  # spans midnight
        return False

    def passed(self, now: datetime) -> bool:
        """A one-off moment that is over (only `at`)."""
        return self.kind == "at" and now >= self.at + timedelta(seconds=AT_WINDOW_S)

    def decide(self, now: datetime, ready_for_s: float, lag_s: float | None, *, now_asked: bool,
               behind: bool = False) -> Decision:
        """Once a second while ready: go, keep waiting (with why), or end the wait (`end="abort"`). `behind`:
        the source's latest position has not reached the target yet, so `lag_s` is only a lower bound."""
        if now_asked:
            return Decision(go=True, why="--cutover-now")
        keeps_up = lag_s is not None and lag_s <= KEEPS_UP_LAG_S and not behind
        timed_out = ready_for_s >= self.timeout_s
        if self.in_moment(now) and keeps_up and self.kind != "manual":
            return Decision(go=True, why=f"{self.spec()}: in its time, the target keeps up")
        if timed_out and self.on_timeout == "abort":
            return Decision(end="abort", why=f"ready for {ready_for_s:.0f}s without a cutover "
                                             f"(--cutover-timeout {self.timeout_s:g}s,abort)")
        late = " (past its --cutover-timeout: waiting as asked)" if timed_out else ""
        if self.kind == "manual":
            return Decision(why="waiting for `slacker migrate --cutover-now`" + late)
        if self.passed(now):
            return Decision(why=f"{self.spec()} passed without a cutover; only --cutover-now or --abort now" + late)
        if self.in_moment(now):
            return Decision(why=f"in {self.spec()}, but the target lags "
                                f"({'unknown' if lag_s is None else f'{lag_s * 1000:.0f}ms'}"
                                f"{' and counting' if behind else ''} > "
                                f"{KEEPS_UP_LAG_S * 1000:.0f}ms): not cutting over" + late)
        return Decision(why=f"waiting for {self.spec()}" + late)


AUTO = CutoverPlan()


def _parse_moment(value: str) -> datetime:
    try:
        at = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"--cutover at={value} is not a time", "use ISO 8601",
                           "for example at=2026-12-03T02:30 (UTC) or at=2026-12-03T02:30+01:00") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def _parse_timeout(text: str | None) -> tuple[float, str]:
    if not text:
        return DEFAULT_TIMEOUT_S, "abort"
    dur, _, action = text.partition(",")
    action = action.strip() or "abort"
    if action not in TIMEOUT_ACTIONS:
        raise InvalidInput(f"--cutover-timeout {text!r}: unknown action {action!r}",
                           "after the duration: abort (roll back) or wait (stay ready)", "for example 6h,abort")
    seconds = parse_duration(dur.strip())
    if not 1 <= seconds <= 30 * 24 * 3600:
        raise InvalidInput(f"--cutover-timeout {dur.strip()} is out of range", "use 1s to 30 days", "")
    return float(seconds), action
