"""bench/run suite: the test suite's whole verdict as CI gets it (a clean clone, `scripts/test`, install included), and the CLI's start.

--runs N clones HEAD of this checkout N times in a row (as `git clean -xfd` leaves it: no .venv, no router
binary) and runs `scripts/test tests --junitxml ...` in each, timing the whole command; per run: wall
time, verdict (passed / failed / errors) and where the time went, by file (the seconds of each file's
tests, setup and teardown included). --add LABEL:JUNIT:WALL_S adds a run measured elsewhere (the serial
suite before, say) to the same table. --start N times the CLI's start N times each, interleaved, against
bare Python's (median, range): `slacker --version`, `slacker --help`, `slacker locate X --help`; with
--before VENV the same commands of another install (the code before) run interleaved with this one's.

    bench/run suite --runs 3 --start 10 --before /tmp/old/.venv --out docs/data/suite.json --plot docs/img/suite.png

Nothing else may run on the machine meanwhile: the suite's wall time is the claim.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def per_file(junit: Path) -> tuple[dict, dict]:
    """({file: seconds}, {"tests", "failures", "errors", "skipped"}) from a JUnit XML report."""
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    seconds: collections.Counter = collections.Counter()
    for case in root.iter("testcase"):
        parts = case.get("classname", "").split(".")
        name = "/".join(parts[1:3]) if len(parts) >= 3 and parts[0] == "tests" else case.get("classname", "")
        seconds[name] += float(case.get("time") or 0)
    verdict = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return dict(seconds), verdict


def one_run(k: int, keep: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"suite-{k}-", dir="/tmp"))
    try:
        subprocess.run(["git", "clone", "-q", str(REPO), str(work / "repo")], check=True, timeout=120)
        junit = keep / f"suite-run-{k}.xml"
        env = {**os.environ, "CI": "true"}
        env.pop("VIRTUAL_ENV", None)
        t0 = time.monotonic()
        p = subprocess.run(["bash", "scripts/test", "tests", f"--junitxml={junit}"], cwd=work / "repo", env=env,
                           capture_output=True, text=True, timeout=90 * 60)
        wall = time.monotonic() - t0
        (keep / f"suite-run-{k}.log").write_text(p.stdout[-20000:] + p.stderr[-5000:])
        files, verdict = per_file(junit) if junit.exists() else ({}, {})
        line = next((x for x in reversed(p.stdout.splitlines()) if " in " in x and ("passed" in x or "failed" in x)), "")
        return {"label": f"run {k}", "wall_s": round(wall, 1), "exit": p.returncode, "closing_line": line,
                "verdict": verdict, "files": files}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_times(n: int, before: str | None) -> dict:
    python = REPO / ".venv" / "bin" / "python"
    installs = {"after": REPO / ".venv"} | ({"before": Path(before)} if before else {})
    commands = {"--version": ["--version"], "--help": ["--help"], "locate X --help": ["locate", "X", "--help"]}
    times: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([str(python), "-c", "pass"], check=True)
        times["python -c pass"].append(time.perf_counter() - t0)
        for label, argv in commands.items():
            for side, venv in installs.items():
                t0 = time.perf_counter()
                subprocess.run([str(venv / "bin" / "slacker"), *argv], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                times[f"slacker {label} [{side}]"].append(time.perf_counter() - t0)
    return {k: {"median_s": round(statistics.median(v), 4), "min_s": round(min(v), 4), "max_s": round(max(v), 4),
                "n": len(v)} for k, v in times.items()}


def report(data: dict) -> None:
    runs = data["runs"]
    for r in runs:
        v = r.get("verdict") or {}
        print(f"{r['label']:>16}: {r['wall_s'] / 60:5.1f} min  {v.get('tests', '?')} tests, "
              f"{v.get('failures', '?')} failed, {v.get('errors', '?')} errors  {r.get('closing_line', '')}")
    files = sorted({f for r in runs for f in r["files"]}, key=lambda f: -max(r["files"].get(f, 0) for r in runs))
    print("\nseconds by file (tests, setup and teardown):")
    print(f"{'file':48}" + "".join(f"{r['label']:>16}" for r in runs))
    for f in files[:30]:
        print(f"{f:48}" + "".join(f"{r['files'].get(f, 0):16.0f}" for r in runs))
    for k, v in data.get("start", {}).items():
        print(f"{k:36} median {v['median_s'] * 1000:6.0f} ms  [{v['min_s'] * 1000:.0f}-{v['max_s'] * 1000:.0f}]")


def plot(data: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = data["runs"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [2, 1]})
    files = sorted({f for r in runs for f in r["files"]}, key=lambda f: -max(r["files"].get(f, 0) for r in runs))[:20]
    h = 0.8 / max(1, len(runs))
    for i, r in enumerate(runs):
        a.barh([y + i * h for y in range(len(files))], [r["files"].get(f, 0) for f in files], height=h, label=r["label"])
    a.set_yticks([y + 0.4 - h / 2 for y in range(len(files))], [f.split("/")[-1] for f in files], fontsize=7)
    a.invert_yaxis()
    a.set_xlabel("seconds of the file's tests (setup and teardown included)")
    a.legend(fontsize=7)
    a.set_title("where the suite's time goes, by file (20 largest)")
    b.bar(range(len(runs)), [r["wall_s"] / 60 for r in runs], color=["C%d" % i for i in range(len(runs))])
    b.axhline(25, color="k", ls="--", lw=1)
    b.text(len(runs) - 1, 25.5, "budget 25 min", ha="right", fontsize=8)
    b.set_xticks(range(len(runs)), [r["label"] for r in runs], rotation=30, ha="right", fontsize=7)
    b.set_ylabel("wall time of the whole verdict, minutes")
    b.set_title("the suite's wall time")
    fig.suptitle(f"scripts/test on {data['machine']}, {data['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/run suite", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=0, help="full runs of scripts/test on clean clones, one after another")
    ap.add_argument("--add", action="append", default=[], metavar="LABEL:JUNIT:WALL_S",
                    help="a run measured elsewhere (its JUnit XML and wall seconds), shown beside these")
    ap.add_argument("--start", type=int, default=0, metavar="N", help="time the CLI's start N times per command")
    ap.add_argument("--before", metavar="VENV", help="with --start: another install's slacker, run interleaved")
    ap.add_argument("--out", help="write the data (JSON)")
    ap.add_argument("--plot", help="write the figure (PNG)")
    ap.add_argument("--keep", default="/tmp/suite-bench", help="where each run's JUnit XML and log stay")
    args = ap.parse_args()
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    data = {"date": datetime.date.today().isoformat(), "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
            f"Linux {platform.release()}", "runs": [], "start": {}}
    for spec in args.add:
        label, junit, wall = spec.rsplit(":", 2)
        files, verdict = per_file(Path(junit))
        data["runs"].append({"label": label, "wall_s": float(wall), "verdict": verdict, "files": files})
    for k in range(1, args.runs + 1):
        print(f"run {k} of {args.runs} ...", file=sys.stderr, flush=True)
        data["runs"].append(one_run(k, keep))
        r = data["runs"][-1]
        print(f"run {k}: {r['wall_s'] / 60:.1f} min, exit {r['exit']}: {r['closing_line']}", file=sys.stderr, flush=True)
    if args.start:
        data["start"] = start_times(args.start, args.before)
    report(data)
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    if args.plot and data["runs"]:
        plot(data, args.plot)
    return 0 if all(r.get("exit", 0) == 0 for r in data["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
