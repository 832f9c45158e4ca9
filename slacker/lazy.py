"""A package's public names loaded on first use (PEP 562), so importing one light module of a
package does not import all of its heavy ones: a CLI command pays only for what it runs."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """The package's `__getattr__`: `where` maps each public name to the submodule that defines it."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{where[name]}", package), name)
        namespace[name] = value
        return value
    return __getattr__
