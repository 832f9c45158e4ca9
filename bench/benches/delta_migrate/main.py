"""bench/run delta_migrate: a real live migration under a closed-loop write-heavy load, per applier setting.

A local two-node cluster (real agents), one tenant loaded with workloads/writeheavy,
`slacker ycsb run` closed-loop (16 clients) against it through the directory, then
`slacker migrate`-equivalent requests with each --delta-applier/--delta-mpl given.
Reports whether it converged, its rounds, the MPL, the freeze, or the one-line reason.

    bench/run delta_migrate --settings serial-durable,serial,concurrent:auto --rows 50000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


from slacker import local_cluster
from slacker.agent.client import cluster_clients
from slacker.config import load_cluster
from benchkit import REPO
from benchkit.host import cpu_s

SL = str(REPO / ".venv" / "bin" / "slacker")




def tenant_pid(root: Path, node: str) -> int | None:
    try:
        return int((root / "c" / node / "tenants" / "hot" / "run" / "mariadbd.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def wait(agents, node, mid, timeout_s=900):
    deadline = time.monotonic() + timeout_s
    while True:
        doc = agents[node].request("GET", f"/v1/migrations/{mid}")
        if not doc["active"]:
            return doc
        if time.monotonic() > deadline:
            raise TimeoutError(mid)
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--settings", default="serial,concurrent:auto",
                    help="comma-separated applier[:mpl][-durable] settings, e.g. serial-durable,serial,concurrent:auto "
                         "(-durable: no catch-up mode, every target commit fsynced as before issue 13)")
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--clients", type=int, default=16, help="closed-loop clients per load process")
    ap.add_argument("--procs", type=int, default=1, help="load processes (slacker ycsb run), each --clients")
    ap.add_argument("--rate", default=None, help="open-loop offered rate instead of closed loop")
    ap.add_argument("--max-freeze", type=float, default=0.25)
    ap.add_argument("-p", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                    help="workload property for load and run, e.g. -p insertproportion=0 -p updateproportion=1")
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dm-", dir="/tmp"))
    path = local_cluster.up(root / "c", nodes=2, first_address="127.0.77.2", api_port=47700,
                            port_range="47706-47800")
    env = dict(os.environ, SLACKER_CLUSTER=str(path))
    cluster = load_cluster(str(path))
    agents, directory = cluster_clients(cluster)
    out = []
    try:
        agents["node-1"].request("POST", "/v1/tenants", {"id": "hot", "buffer_pool_bytes": 256 * 1024 * 1024},
                                 timeout_s=180)
        wl = ["-P", str(REPO / "workloads" / "writeheavy"), "-p", f"recordcount={args.rows}"]
        for o in args.overrides:
            wl += ["-p", o]
        subprocess.run([SL, "ycsb", "load", "hot", *wl], check=True, env=env, stdout=subprocess.DEVNULL)
        for setting in args.settings.split(","):
            spec, durable = (setting[:-len("-durable")], True) if setting.endswith("-durable") else (setting, False)
            applier, _, mpl = spec.partition(":")
            src = directory.lookup("hot").node
            dst = "node-2" if src == "node-1" else "node-1"
            loads = [subprocess.Popen([SL, "ycsb", "run", "hot", *wl, "--mpl", str(args.clients), "--duration", "600s",
                                       "--seed", str(100 + i), "--quiet", "--json",
                                       *(["--rate", args.rate] if args.rate else [])],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                     for i in range(args.procs)]
            time.sleep(5)
            pids = {"source": tenant_pid(root, src), "target": None}
            t_cpu = time.monotonic()
            cpu0 = {"source": cpu_s(pids["source"], children=True), "load": sum(cpu_s(p.pid, children=True) for p in loads)}
            body = {"tenant": "hot", "target": dst, "max_freeze_s": args.max_freeze, "delta_applier": applier}
            if durable:
                body["delta_catchup"] = False
            if mpl:
                body["delta_mpl"] = mpl if mpl == "auto" else int(mpl)
            doc = agents[src].request("POST", "/v1/migrations", body, timeout_s=120)
            # The target's server exists once the copy has started: its CPU is counted from then on.
            mid, tgt0, tgt1 = doc["id"], None, None
            deadline = time.monotonic() + 900
            while True:
                d = agents[src].request("GET", f"/v1/migrations/{mid}")
                if pids["target"] is None:
                    pids["target"] = tenant_pid(root, dst)
                    if pids["target"]:
                        tgt0 = (time.monotonic(), cpu_s(pids["target"], children=True))
                        tgt1 = tgt0
                elif d["active"]:
                    c = cpu_s(pids["target"], children=True)  # the last reading while it runs (a failed target is removed)
                    if c:
                        tgt1 = (time.monotonic(), c)
                if d.get("phase") in ("handover", "cleanup") or not d["active"]:
                    break  # the CPU split covers the copy and the delta phase, while the load ran
                if time.monotonic() > deadline:
                    raise TimeoutError(mid)
                time.sleep(0.25)
            t1 = time.monotonic()
            split = {"source": cpu_s(pids["source"], children=True) - cpu0["source"],
                     "load": sum(cpu_s(p.pid, children=True) for p in loads) - cpu0["load"]}
            split = {k: round(v / (t1 - t_cpu), 2) for k, v in split.items()}
            if tgt0:
                c = cpu_s(pids["target"], children=True)
                if c:
                    tgt1 = (time.monotonic(), c)
                split["target"] = round((tgt1[1] - tgt0[1]) / max(1e-3, tgt1[0] - tgt0[0]), 2)
            split["loadavg"] = os.getloadavg()[0]
            doc = wait(agents, src, mid)
            achieved = 0.0
            for load in loads:
                load.send_signal(2)
                res = json.loads(load.communicate(timeout=120)[0] or "{}")
                achieved += (res.get("tenants", [{}])[0].get("achieved_tps") or 0) if res else 0
            r = {"setting": setting, "result": doc["result"], "rounds": len(doc["rounds"]),
                 "freeze_ms": doc.get("freeze_ms"), "error": (doc.get("error") or {}).get("what"),
                 "load_tps": achieved, "delta": {k: v for k, v in (doc.get("delta") or {}).items()},
                 "round_rates": [(r["write_tps"], r["apply_tps"], r["mpl"]) for r in doc["rounds"]],
                 "attempts": doc.get("handover_attempts"), "cores": split,
                 "procs": args.procs, "clients": args.clients, "error_doc": doc.get("error")}
            out.append(r)
            print(f"{setting:<18} {doc['result']:<10} rounds {r['rounds']:>2} freeze "
                  f"{r['freeze_ms'] if r['freeze_ms'] is not None else '-'} ms load {achieved and round(achieved)}/s "
                  f"mpl {r['delta'].get('mpl')} best apply {r['delta'].get('best_apply_tps')} "
                  f"{r['error'] or ''}", flush=True)
            print("   cores while the load ran (source server, load processes, target server):", split, flush=True)
            print("   rounds (write/s, apply/s, mpl):", r["round_rates"], flush=True)
    finally:
        local_cluster.down(root / "c", purge=True)
        shutil.rmtree(root, ignore_errors=True)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
