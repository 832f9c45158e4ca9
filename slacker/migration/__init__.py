"""Live migration of one tenant: the phase machine (`machine`), its source and target halves
(`source`, `peer`, `target`), the journal that makes it survive restarts (`journal`), the
reconciliation with the directory (`reconcile`) and the agent's service and routes (`service`)."""

from .machine import Migration
from .options import MODES, MigrationAborted, MigrationOptions, RoundReport

__all__ = ["MODES", "Migration", "MigrationAborted", "MigrationOptions", "RoundReport"]
