"""Per-round convergence judgement for the delta phase: is the target's apply rate above the source's write rate?

The round loop feeds each round's source commit rate and the applier's report
(best saturated apply rate, at which MPL, whether the adaptive loop has tried its
range). Once the applier has been measured properly and its best rate stays
below the writes for several rounds, the verdict is a one-line reason with both
rates, long before --max-rounds would say the same. Pure logic.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RoundRates:
    n: int
    write_tps: float | None     # the source's commit rate since the previous round
    apply_tps: float | None     # the target's latest saturated apply rate
    best_apply_tps: float | None
    best_mpl: int | None
    mpl: int | None
    explored: bool


class ConvergenceJudge:
    def __init__(self, min_rounds: int = 3, patience_rounds: int = 6, slower_rounds: int = 2) -> None:
        self.min_rounds = min_rounds            # never judge before this many rounds
        self.patience_rounds = patience_rounds  # judge even if the MPL search is not done by then
        self.slower_rounds = slower_rounds      # writes above the best apply this many rounds in a row
        self.rounds: list[RoundRates] = []
        self._slower = 0

    def observe(self, n: int, write_tps: float | None, applier: dict | None) -> str | None:
        """Record one round; returns the reason to stop (one line) or None to go on."""
        a = applier or {}
        r = RoundRates(n, write_tps, a.get("apply_tps"), a.get("best_apply_tps"), a.get("best_mpl"), a.get("mpl"),
                       bool(a.get("explored")))
        self.rounds.append(r)
        best = r.best_apply_tps
        if write_tps is None or best is None:
            self._slower = 0
            return None
        self._slower = self._slower + 1 if write_tps > best else 0
        ready = r.explored or len(self.rounds) >= self.patience_rounds
        if len(self.rounds) >= self.min_rounds and ready and self._slower >= self.slower_rounds:
            return self.reason(write_tps, best, r.best_mpl, a.get("applier"))
        return None

    @staticmethod
    def reason(write_tps: float, apply_tps: float, best_mpl: int | None, applier: str | None) -> str:
        where = f"at best MPL {best_mpl}" if applier != "serial" and best_mpl else "with the serial applier"
        return (f"writes {write_tps:,.0f}/s > apply {apply_tps:,.0f}/s {where}: the delta cannot converge; "
                "migrate at a quieter time or move load first")
