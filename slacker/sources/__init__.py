"""The latency source kinds behind `--latency-source KIND[,key=value...]`, one module each, as the controller
kinds are (slacker.controller.settings): its `parse` (the spec's keys), its `build` (the LatencySource a
migration reads) and its `seed` (the load's own latency before the copy, from a window already kept: the
agents' per-tenant windows, the routers' per-second rings; None: measured). The registry is KINDS; `parse`
and `build` dispatch through it. A node's latency over its tenants -- one figure for the controller's seed,
the target guard, the drain, the rebalancer and the planner -- is computed in one place (node.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import InvalidInput
from ..latency import LatencySource, LatencySourceSpec

SPEC_HINT = (
    "for example prometheus,url=http://127.0.0.1:9464/metrics,tenant=t1 "
    "or performance-schema,exclude-user=slacker or router,table=transactions"
)


@dataclass(frozen=True)
class SourceKind:
    name: str  # the spec's kind (LatencySourceSpec.kind)
    aliases: tuple[str, ...]  # other names a spec may give it
    chosen_as: str  # its name in the default's choice per tenant (slacker.sources.router.LatencyChoice)
    parse: Callable[[str, list[tuple[str, str]], str], LatencySourceSpec]  # (the spec's text, key=value pairs, node)
    build: Callable[..., LatencySource]  # (node, spec, window_s, step_s, tenant_id, choice)
    seed: Callable[..., float | None] | None  # (node, choice, spec, tenant_id, target, settings); None: measured


def running_tenants(node) -> list[str]:
    """The ids of the node's running tenants of every kind (whole servers and its shared server's), whose
    load a seed reads: a node of shared tenants alone is a node with a load too."""
    kinds = getattr(node, "kinds", None)
    if not kinds:
        return [t.id for t in node.tenants.list() if t.info.desired_state == "running"]
    return [t.id for m in kinds.values() for t in m.list() if t.desired_state == "running"]


def _kinds() -> dict[str, SourceKind]:
    from . import performance_schema, prometheus, router

    return {k.name: k for k in (prometheus.KIND, performance_schema.KIND, router.KIND)}


_KINDS: dict[str, SourceKind] | None = None


def kinds() -> dict[str, SourceKind]:
    """The registry, name -> kind (loaded on first use: the kinds' modules import the sources' own)."""
    global _KINDS
    if _KINDS is None:
        _KINDS = _kinds()
    return _KINDS


def kind(name: str) -> SourceKind | None:
    """A kind by its name or an alias, or by the name the default's choice gives it; None if there is none."""
    name = name.lower()
    for k in kinds().values():
        if name == k.name or name in k.aliases or name == k.chosen_as:
            return k
    return None


def parse(text: str) -> LatencySourceSpec:
    """Parse `KIND[,key=value...]`; `node=source|target` is every kind's key, the rest the kind's own."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InvalidInput(f"invalid latency source {text!r}", "it is empty", SPEC_HINT)
    name, pairs = parts[0].lower(), []
    for p in parts[1:]:
        key, sep, value = p.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InvalidInput(f"invalid latency source {text!r}", f"{p!r} is not key=value", SPEC_HINT)
        pairs.append((key.strip(), value.strip()))
    node = "source"
    for key, value in pairs:
        if key == "node":
            if value not in ("source", "target"):
                raise InvalidInput(f"invalid latency source {text!r}", "node must be source or target", SPEC_HINT)
            node = value
    k = kind(name)
    if k is None:
        raise InvalidInput(f"invalid latency source {text!r}", f"unknown kind {name!r}", SPEC_HINT)
    return k.parse(text, [(key, v) for key, v in pairs if key != "node"], node)


def build(node, spec: LatencySourceSpec, window_s: float, step_s: float, tenant_id: str = "",
          choice=None) -> LatencySource:
    """The source `spec` names on `node` (its kind's build)."""
    return kinds()[spec.kind].build(node, spec, window_s, step_s, tenant_id, choice)


def seed(chosen: str | None, node, choice, spec: LatencySourceSpec, tenant_id: str, target: str | None,
         settings) -> float | None:
    """The load's latency from the window the chosen kind keeps (None: the kind keeps none, or it is not known:
    measured)."""
    k = kind(chosen) if chosen else None
    if k is None or k.seed is None:
        return None
    return k.seed(node, choice, spec, tenant_id, target, settings)
