"""Live migration of one tenant: the phase machine (`machine`), its source and target halves
(`source`, `peer`, `target`), the journal that makes it survive restarts (`journal`), the
reconciliation with the directory (`reconcile`) and the agent's service and routes (`service`).

The names below are imported when first used, so a module of the package that a command needs
(`remote` for `slacker migrate`) does not load the whole phase machine with it."""

from __future__ import annotations

__all__ = ["MODES", "Migration", "MigrationAborted", "MigrationOptions", "RoundReport"]


def __getattr__(name: str):
    if name == "Migration":
        from .machine import Migration
        return Migration
    if name in __all__:
        from . import options
        return getattr(options, name)  # reflective by need: the module's lazy attributes, named at run time
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
