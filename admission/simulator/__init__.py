"""The simulator's inputs and cost model: jobs, trace readers, synthetic workloads, slowdown.

``atoll simulate`` replays these jobs against a cluster model; see ``_cost`` for the cost model.
The run itself: ``prepare_workload`` then ``simulate`` per policy (``make_policies``), numbers
from ``summarize``; ``_sim`` documents how Kueue and Atoll are modelled.
"""

from admission.simulator._cost import ring_allreduce_s, step_slowdown
from admission.simulator._jobs import (
    DEFAULT_COMM_FRACTION,
    Job,
    JobKind,
    default_model_gb,
    make_job,
    split_into_pods,
)
from admission.simulator._metrics import format_table, summarize
from admission.simulator._policies import JobShape, PolicyError, make_policies
from admission.simulator._sim import CostModel, PreparedWorkload, SimResult, SimSettings, prepare_workload, simulate
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

__all__ = [
    "DEFAULT_COMM_FRACTION",
    "DEFAULT_SIZE_MIX",
    "CostModel",
    "Job",
    "JobKind",
    "JobShape",
    "NodeGroup",
    "NodeMix",
    "OpenbTrace",
    "PolicyError",
    "PreparedWorkload",
    "SimResult",
    "SimSettings",
    "SyntheticParams",
    "TraceError",
    "TraceFormat",
    "default_model_gb",
    "format_table",
    "make_job",
    "make_policies",
    "offered_load",
    "prepare_workload",
    "read_itp",
    "read_openb",
    "read_openb_nodes",
    "read_trace",
    "ring_allreduce_s",
    "scale_load",
    "simulate",
    "split_into_pods",
    "step_slowdown",
    "summarize",
    "synthetic_jobs",
]
