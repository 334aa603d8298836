"""The simulator's inputs and cost model: jobs, trace readers, synthetic workloads, slowdown.

``atoll simulate`` replays these jobs against a cluster model; see ``_cost`` for the cost model.
The run itself: ``prepare_workload`` then ``simulate`` per policy (``make_policies``), numbers
from ``summarize``; ``_sim`` documents how Kueue and Atoll are modelled.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from admission.simulator._cohort import CohortError, CohortShape, load_cohort
from admission.simulator._cost import (
    SOURCES,
    CostError,
    CostParams,
    parse_bandwidths,
    parse_comm_fraction,
    parse_link_model,
    parse_overlap,
)
from admission.simulator._jobs import (
    Job,
    JobKind,
    make_job,
    split_into_pods,
)
from admission.simulator._metrics import INVARIANT_KEYS, format_table, summarize
from admission.simulator._policies import AtollPolicy, JobShape, Policy, PolicyError, make_policies
from admission.simulator._sim import PreparedWorkload, SimResult, SimSettings, build_snapshots, prepare_workload, simulate
from admission.simulator._synthetic import (
    DEFAULT_SIZE_MIX,
    SyntheticParams,
    synthetic_jobs,
)
from admission.simulator._traces import (
    NodeGroup,
    NodeMix,
    OpenbTrace,
    TraceError,
    TraceFormat,
    offered_load,
    read_itp,
    read_openb,
    read_openb_nodes,
    read_trace,
    scale_load,
)

if TYPE_CHECKING:
    from admission.simulator._compare import (
        Comparison,
        compare,
        comparison_json,
        format_comparison,
        format_islands,
        format_sweep,
        summary_lines,
        verdict,
        verdict_lines,
    )
    from admission.simulator._plots import write_plots, write_sweep_plots
    from admission.simulator._port import CHECK_NAME, PROFILES_NAMESPACE, MemoryCluster, cluster_objects, profiles_for_cluster, quantities, workload_object
    from admission.simulator._reservations import (
        ReservationCell,
        format_reservations,
        reservation_cell,
        reservation_variants,
        reservations_goal,
        reservations_json,
    )
    from admission.simulator._serving import LLAMA3_70B_FP16, read_azure_llm, serve_on
    from admission.simulator._slicing import Slicing, slice_workload, sliced_jobs
    from admission.simulator._sweep import (
        GPU_PERF_TAIL,
        RunFailed,
        SweepSpec,
        WorkloadSpec,
        available_cores,
        cluster_gpus,
        gather_records,
        parse_loads,
        run_sweep,
        seeds_of,
        with_gpu_perf,
        workload_jobs,
    )

__all__ = [
    "CHECK_NAME",
    "DEFAULT_SIZE_MIX",
    "GPU_PERF_TAIL",
    "INVARIANT_KEYS",
    "LLAMA3_70B_FP16",
    "PROFILES_NAMESPACE",
    "SOURCES",
    "AtollPolicy",
    "CohortError",
    "CohortShape",
    "Comparison",
    "CostError",
    "CostParams",
    "Job",
    "JobKind",
    "JobShape",
    "MemoryCluster",
    "NodeGroup",
    "NodeMix",
    "OpenbTrace",
    "Policy",
    "PolicyError",
    "PreparedWorkload",
    "ReservationCell",
    "RunFailed",
    "SimResult",
    "SimSettings",
    "Slicing",
    "SweepSpec",
    "SyntheticParams",
    "TraceError",
    "TraceFormat",
    "WorkloadSpec",
    "available_cores",
    "build_snapshots",
    "cluster_gpus",
    "cluster_objects",
    "compare",
    "comparison_json",
    "format_comparison",
    "format_islands",
    "format_reservations",
    "format_sweep",
    "format_table",
    "gather_records",
    "load_cohort",
    "make_job",
    "make_policies",
    "offered_load",
    "parse_bandwidths",
    "parse_comm_fraction",
    "parse_link_model",
    "parse_loads",
    "parse_overlap",
    "prepare_workload",
    "profiles_for_cluster",
    "quantities",
    "read_azure_llm",
    "read_itp",
    "read_openb",
    "read_openb_nodes",
    "read_trace",
    "reservation_cell",
    "reservation_variants",
    "reservations_goal",
    "reservations_json",
    "run_sweep",
    "scale_load",
    "seeds_of",
    "serve_on",
    "simulate",
    "slice_workload",
    "sliced_jobs",
    "split_into_pods",
    "summarize",
    "summary_lines",
    "synthetic_jobs",
    "verdict",
    "verdict_lines",
    "with_gpu_perf",
    "workload_jobs",
    "workload_object",
    "write_plots",
    "write_sweep_plots",
]

_LAZY = {"CHECK_NAME": "_port", "GPU_PERF_TAIL": "_sweep", "format_islands": "_compare", "Comparison": "_compare", "MemoryCluster": "_port", "PROFILES_NAMESPACE": "_port", "RunFailed": "_sweep", "Slicing": "_slicing", "SweepSpec": "_sweep", "WorkloadSpec": "_sweep", "available_cores": "_sweep", "cluster_gpus": "_sweep", "gather_records": "_sweep", "cluster_objects": "_port", "compare": "_compare", "comparison_json": "_compare", "format_comparison": "_compare", "format_sweep": "_compare", "parse_loads": "_sweep", "profiles_for_cluster": "_port", "quantities": "_port", "run_sweep": "_sweep", "seeds_of": "_sweep", "slice_workload": "_slicing", "sliced_jobs": "_slicing", "summary_lines": "_compare", "verdict": "_compare", "verdict_lines": "_compare", "with_gpu_perf": "_sweep", "workload_jobs": "_sweep", "workload_object": "_port", "write_plots": "_plots", "write_sweep_plots": "_plots"}
_LAZY.update({"LLAMA3_70B_FP16": "_serving", "read_azure_llm": "_serving", "serve_on": "_serving"})
_LAZY.update({n: "_reservations" for n in ("ReservationCell", "format_reservations", "reservation_cell", "reservation_variants", "reservations_goal",
                                           "reservations_json")})
"""Names whose modules ``import admission.simulator`` does not load, imported on first use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
