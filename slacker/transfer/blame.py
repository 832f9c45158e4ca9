"""Which side of a broken snapshot copy failed, said as one line an operator can act on.

A copy can break at the source (the backup tool), on the link, or at the target (its receiver,
or its whole agent). The pipe only sees a cut or an exit code; asking the target's agent whether
it still answers tells a dead target from a broken link. The message names the node that broke
and the next step; the backup tool's own output stays in the error's `detail` (the agent log,
`--json`, `--debug`), quoted only by its last error line when the tool itself failed.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import MigrationFailed
from ..units import format_size

# Stages after which the target may be the one that broke (a dead receiver cuts the link, and a
# producer writing into a cut pipe dies of it).
_TARGET_MAY_HAVE_BROKEN = ("transport", "receiver", "producer", "timeout", "accept")


def explain(err: MigrationFailed, *, tenant: str, source: str, target: str, bytes_sent: int,
            target_down: Callable[[], str | None]) -> MigrationFailed:
    """`err` (from a ThrottledPipe, with its `stage`) restated from the migration's point of view.
    `target_down()` returns why the target's agent does not answer, or None if it answers."""
    stage = getattr(err, "stage", "")
    if stage not in _TARGET_MAY_HAVE_BROKEN:
        return err
    retry = f"then retry `slacker migrate {tenant} --to {target}`"
    copied = f"after {format_size(bytes_sent)}"
    down = target_down()
    if down is not None:
        what = f"the copy to {target} broke {copied}: {target}'s agent does not answer"
        why = down
        hint = f"start {target}'s agent again (`slacker status` shows which agents answer, its log why it stopped), " \
               f"{retry}"
    elif stage == "producer":
        what = f"the backup tool on {source} failed {copied}"
        why = err.why
        hint = f"see {source}'s agent log for the tool's whole output, {retry}"
    elif stage == "receiver":
        what = f"{target} refused the copy {copied}"
        why = err.why
        hint = f"see {target}'s agent log for why, {retry}"
    elif stage == "timeout":
        return err
    else:
        what = f"the copy to {target} broke {copied} while {target}'s agent answers"
        why = err.why
        hint = f"check the network between {source} and {target} and {target}'s agent log, {retry}"
    out = MigrationFailed(what, why, hint, phase=err.phase, detail=err.detail)
    out.stage = stage  # type: ignore[attr-defined]
    return out
