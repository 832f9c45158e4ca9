"""bench/floor's analysis: pure functions over the runs (medians, spread, the fit, the tables)."""

from __future__ import annotations

import statistics

MB = 1e6
PHASES = ("preflight", "snapshot", "prepare", "delta", "handover", "cleanup")


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}-{max(xs):.2f}" if xs else "-"


def runs_of(res: dict, kind: str, tenant: str | None = None, variant: str | None = None) -> list[dict]:
    return [r for r in res["runs"] if r["kind"] == kind and (tenant is None or r["tenant"] == tenant)
            and (variant is None or r.get("variant") == variant)]


def fit(points: list[tuple[float, float]]) -> dict:
    """Least squares seconds = intercept + bytes x slope: the fixed cost and the marginal rate."""
    n = len(points)
    xs = [x for x, _ in points]
    if n < 3 or max(xs) < 1.5 * min(xs):  # one size (or nearly): no line to fit
        return {}
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return {"intercept_s": my - slope * mx, "slope_s_per_mb": slope * MB,
            "marginal_mb_s": (1 / slope / MB) if slope > 0 else float("inf"), "points": n}


def outside_copy(mig: list[dict]) -> list[float]:
    """Each migration's seconds outside its copy (CLI, preflight, prepare, start, delta, handover,
    cleanup): total minus the copy step. Robust where the copy's own speed swings with the load."""
    return [r["total_s"] - r["steps_ms"]["copy"] / 1000 for r in mig if "copy" in r.get("steps_ms", {})]


def pairs(res: dict, variant: str) -> dict[str, list[float]]:
    """Per tenant: migration / bare ratios, each migration paired with the bare run just before it."""
    out: dict[str, list[float]] = {}
    last_bare: dict[str, float] = {}
    for r in res["runs"]:
        if r["kind"] == "bare":
            last_bare[r["tenant"]] = r["total_s"]
        elif r["kind"] == "migrate" and r.get("variant") == variant and r["tenant"] in last_bare:
            out.setdefault(r["tenant"], []).append(r["total_s"] / last_bare[r["tenant"]])
    return out


def variant_pairs(res: dict, variant: str, base: str) -> dict[str, list[float]]:
    """Per tenant: migration `variant` / migration `base` in the same repeat (the two run back to back
    after the same bare run, their order rotated), e.g. a TLS move over a plain one of the same tenant."""
    by: dict[tuple, dict[str, float]] = {}
    for r in runs_of(res, "migrate"):
        if "repeat" in r:
            by.setdefault((r["tenant"], r["repeat"]), {})[r["variant"]] = r["total_s"]
    out: dict[str, list[float]] = {}
    for (tenant, _), times in by.items():
        if variant in times and base in times:
            out.setdefault(tenant, []).append(times[variant] / times[base])
    return out


def variant_table(res: dict) -> str:
    """Each further variant over the first, paired by repeat; empty with one variant."""
    base, others = res["variants"][0], res["variants"][1:]
    if not others:
        return ""
    lines = [f"| tenant | {' | '.join(f'{v} / {base} (paired, median, min-max)' for v in others)} |",
             "|---|" + "---|" * len(others)]
    for t in res["tenants"]:
        cells = []
        for v in others:
            xs = variant_pairs(res, v, base).get(t, [])
            cells.append(f"{med(xs):.2f}x ({spread(xs)}, n={len(xs)})" if xs else "-")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(res: dict) -> dict:
    tenants = res["tenants"]
    out: dict = {"sizes": {}, "fits": {}}
    for t in tenants:
        bare = runs_of(res, "bare", t)
        row = {"bytes": med([r["bytes"] for r in bare] or [0]), "bare_s": [r["total_s"] for r in bare], "variants": {}}
        for v in res["variants"]:
            mig = runs_of(res, "migrate", t, v)
            row["variants"][v] = {"total_s": [r["total_s"] for r in mig], "ratios": pairs(res, v).get(t, []),
                                  "bytes": med([r["bytes"] for r in mig] or [0])}
        out["sizes"][t] = row
    out["fits"]["bare"] = fit([(r["bytes"], r["total_s"]) for r in runs_of(res, "bare")])
    for v in res["variants"]:
        out["fits"][v] = fit([(r["bytes"], r["total_s"]) for r in runs_of(res, "migrate", variant=v)])
    return out


def ratio_table(res: dict) -> str:
    s = summary(res)
    lines = ["| tenant | stream | bare pipeline (s) | " + " | ".join(f"migrate {v} (s) | ratio {v}" for v in res["variants"]) + " |",
             "|---|---|---|" + "---|---|" * len(res["variants"])]
    for t, row in s["sizes"].items():
        cells = [t, f"{row['bytes'] / MB:.0f} MB", f"{med(row['bare_s']):.2f} ({spread(row['bare_s'])})"]
        for v in res["variants"]:
            d = row["variants"][v]
            cells += [f"{med(d['total_s']):.2f} ({spread(d['total_s'])})",
                      f"{med(d['ratios']):.2f}x ({spread(d['ratios'])})"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| outside the copy (s): bare = its prepare; migrate = total - the copy step | bare | "
                 + " | ".join(res["variants"]) + " |")
    lines.append("|---|---|" + "---|" * len(res["variants"]))
    for t in s["sizes"]:
        cells = [t, f"{med([r['prepare_s'] for r in runs_of(res, 'bare', t)]):.2f}"]
        for v in res["variants"]:
            xs = outside_copy(runs_of(res, "migrate", t, v))
            cells.append(f"{med(xs):.2f} ({spread(xs)})" if xs else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| fit: seconds = fixed + bytes / marginal rate | fixed (s) | marginal (MB/s) | runs |")
    lines.append("|---|---|---|---|")
    for k, f in s["fits"].items():
        if f:
            lines.append(f"| {k} | {f['intercept_s']:.2f} | {f['marginal_mb_s']:.0f} | {f['points']} |")
    return "\n".join(lines)


def _stage_val(r: dict, side: str, key: str) -> float | None:
    st = (r.get("copy_stages") or {}).get(side) or {}
    return st.get(key)


def breakdown(res: dict, tenant: str, variant: str) -> list[tuple[str, float, str]]:
    """(item, median seconds, spread) for the migrations of one tenant and variant: the CLI's own time,
    the phases, the fixed steps inside them, and where the copy's sides waited."""
    mig = runs_of(res, "migrate", tenant, variant)
    if not mig:
        return []
    rows: list[tuple[str, float, str]] = []

    def add(name: str, vals: list[float | None]) -> None:
        xs = [x for x in vals if x is not None]
        if xs:
            rows.append((name, med(xs), spread(xs)))
    add("total (CLI exec to exit)", [r["total_s"] for r in mig])
    add("CLI start + follow (outside the agent)", [r["cli_s"] for r in mig])
    for ph in PHASES:
        add(f"phase {ph}", [r["phases"].get(ph) for r in mig])
    keys: list[str] = []
    for r in mig:
        keys += [k for k in r["steps_ms"] if k not in keys]
    for k in keys:
        add(f"  step {k}", [r["steps_ms"][k] / 1000 if k in r["steps_ms"] else None for r in mig])
    for side, items in (("sender", ("first_byte_at_s", "producer_wait_s", "throttle_wait_s", "send_s",
                                    "producer_eof_at_s", "producer_exit_at_s", "verdict_at_s", "cpu_s", "child_cpu_s")),
                        ("receiver", ("first_byte_at_s", "recv_wait_s", "extract_write_s", "stream_end_at_s",
                                      "extractor_exit_at_s", "cpu_s", "child_cpu_s"))):
        for k in items:
            add(f"  copy {side} {k}", [_stage_val(r, side, k) for r in mig])
    return rows


def breakdown_table(res: dict, tenant: str) -> str:
    cols = {v: dict((n, (m, sp)) for n, m, sp in breakdown(res, tenant, v)) for v in res["variants"]}
    names: list[str] = []
    for v in res["variants"]:
        names += [n for n, _, _ in breakdown(res, tenant, v) if n not in names]
    lines = [f"breakdown, tenant {tenant} (median seconds, min-max)",
             "| item | " + " | ".join(res["variants"]) + " |", "|---|" + "---|" * len(res["variants"])]
    for n in names:
        cells = [f"{cols[v][n][0]:.3f} ({cols[v][n][1]})" if n in cols[v] else "-" for v in res["variants"]]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rate_table(res: dict) -> str:
    rs = runs_of(res, "rate")
    if not rs:
        return ""
    lines = ["| variant | asked (MB/s) | achieved (MB/s, median, min-max) | error (median) | runs |", "|---|---|---|---|---|"]
    for v in res["variants"]:
        x = runs_of(res, "rate", variant=v)
        if x:
            ach = [r["achieved"] / MB for r in x]
            lines.append(f"| {v} | {x[0]['asked'] / MB:.1f} | {med(ach):.2f} ({spread(ach)}) | "
                         f"{med([r['error'] for r in x]) * 100:+.1f}% | {len(x)} |")
    return "\n".join(lines)


def merge(labelled: list[tuple[str, dict]]) -> dict:
    """Several results side by side (e.g. before and after a change): each variant is named
    LABEL:VARIANT; runs stay in their order, so every migration keeps its bare run before it."""
    out = {"tenants": [], "variants": [], "runs": [], "merged": [label for label, _ in labelled]}
    for label, res in labelled:
        out["tenants"] += [t for t in res["tenants"] if t not in out["tenants"]]
        out["variants"] += [f"{label}:{v}" for v in res["variants"]]
        for r in res["runs"]:
            out["runs"].append(dict(r, variant=f"{label}:{r['variant']}") if "variant" in r else dict(r))
    return out


def report(res: dict) -> str:
    parts = [ratio_table(res), "", variant_table(res), ""]
    for t in res["tenants"]:
        parts += [breakdown_table(res, t), ""]
    parts.append(rate_table(res))
    return "\n".join(parts)
