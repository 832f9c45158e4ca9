"""The ownership flip: the directory's compare-and-set on the epoch, the migration's point of no return.

An unknown outcome (the directory did not answer) fails closed: the source
stays fenced while the directory is asked again, for as long as it takes, and
the answer decides forward or back. Nothing here guesses.
"""

from __future__ import annotations

import logging
import time

from ..errors import AgentUnavailable, Conflict, SlackerError
from .protocol import SourceState
from .seams import Finishing, Flipped, FlipNotSent, Outage, Seam

log = logging.getLogger("slacker.migration.flip")


class Flip:
    def __init__(self, m: Seam, ask_every_s: float = 0.5) -> None:
        self.m = m  # the migration as its roles see it: directory, source side, epochs; outage and flip back
        self.ask_every_s = ask_every_s  # how often an unreachable directory is asked again

    def directory_answer(self, why: str, since: float | None = None):
        """Look the tenant up until the directory answers; an outage is reported, never guessed through."""
        m = self.m
        t0 = since if since is not None else time.monotonic()
        while True:
            try:
                own = m.node.directory.lookup(m.tenant_id)
                if since is not None or time.monotonic() - t0 > 1:
                    m.record(Outage(round(time.monotonic() - t0, 1)))
                m.record(Finishing(""))
                m.end_wait()
                return own
            except AgentUnavailable as exc:
                self._report_outage(why, t0, exc)
                time.sleep(self.ask_every_s)

    def _report_outage(self, why: str, t0: float, exc: SlackerError) -> None:
        m = self.m
        outage_s = round(time.monotonic() - t0, 1)
        m.record(Outage(outage_s))
        m.record(Finishing(f"directory unreachable for {outage_s:.0f}s ({why}); the source stays "
                           f"fenced until it answers: {exc.why or exc.what}"))
        cluster = m.node.cluster
        where = "etcd" if cluster.directory_backend == "etcd" else cluster.directory_node
        m.wait_on("directory", where, False,
                  f"waiting for the directory to answer ({why}; unreachable for {outage_s:.0f}s); the tenant is "
                  "not writable until it does (`slacker status`)")
        if outage_s > m.opts.max_freeze_s:
            m.source.unfreeze()  # the fence alone holds writes off; writers get an error, not a hang

    def settle(self) -> None:
        """The compare-and-set was sent and something broke: the directory says how it ended."""
        m = self.m
        own = self.directory_answer("flip outcome unknown")
        if own.node == m.opts.target and own.epoch == (m.epoch_before or 0) + 1:
            m.record(Flipped(own.epoch))
            m.journal.update(m.entry, state=SourceState.FLIPPED, epoch_after=own.epoch)
        else:
            m.record(FlipNotSent())

    def compare_and_set(self, deadline: float | None = None):
        """Send the flip. Returns the new ownership, or None if someone else moved the epoch first."""
        m = self.m
        target = m.node.cluster.node(m.opts.target)
        port = m.target_port or m.source.tenant().port  # a shared tenant's: the target's shared server's
        while True:
            sent = time.monotonic()
            try:
                own = m.node.directory.compare_and_set(m.tenant_id, m.epoch_before, target.name,
                                                       target.tenant_host, port, kind=m.opts.into)
                m.record(Finishing(""))
                m.end_wait()
                if deadline is not None and time.monotonic() > deadline:
                    # Sent in time, answered late: the freeze outlasted its bound waiting on the directory.
                    # A resend after an outage must not shrink the outage already measured.
                    m.record(Outage(round(time.monotonic() - sent, 3), at_least=True))
                return own
            except (AgentUnavailable, Conflict) as exc:
                since = None
                if isinstance(exc, AgentUnavailable):
                    log.warning("migration %s: flip outcome unknown (%s); asking the directory", m.id,
                                exc.one_line())
                    self._report_outage("flip outcome unknown", sent, exc)
                    since = sent
                own = self.directory_answer("flip outcome unknown", since=since)
                if own.node == target.name and own.epoch == m.epoch_before + 1:
                    m.record(Finishing(""))
                    return own  # our write landed before the connection broke
                if own.epoch != m.epoch_before:
                    return None  # someone else won (the target, giving up on an expired lease)
                # Still at epoch_before: the write never landed; send it again.
