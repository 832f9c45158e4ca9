"""The YCSB-style open-loop benchmark harness (`slacker ycsb load|run`), usable from Python too.

In-process:   run_benchmark(RunConfig(targets=[TenantTarget.fixed(endpoint, 100)],
                                      workload=load_workload(["workloads/slacker"]), duration_s=60))
Subprocess:   run_benchmark_subprocess(["t1", "-P", "workloads/slacker", "--rate", "100"], timeout_s=300)
Both return a RunResult. The latency histogram the controller reads is LATENCY_METRIC.
"""

from .loader import LoadConfig, LoadResult, load_table
from .metrics import LATENCY_BUCKETS_S, LATENCY_METRIC, Gap, LatencySummary
from .process import BenchmarkProcess, run_benchmark_subprocess
from .properties import Workload, load_workload
from .results import IntervalRecord, RunResult, TenantResult
from .runner import Harness, RunConfig, run_benchmark
from .targets import TenantTarget, cluster_resolver, direct_endpoint

__all__ = [
    "BenchmarkProcess", "Gap", "Harness", "IntervalRecord", "LATENCY_BUCKETS_S", "LATENCY_METRIC", "LatencySummary",
    "LoadConfig", "LoadResult", "RunConfig", "RunResult", "TenantResult", "TenantTarget", "Workload",
    "cluster_resolver", "direct_endpoint", "load_table", "load_workload", "run_benchmark", "run_benchmark_subprocess",
]
