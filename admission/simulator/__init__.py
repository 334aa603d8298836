"""The simulator's inputs and cost model: jobs, trace readers, synthetic workloads, slowdown.

``atoll simulate`` replays these jobs against a cluster model; see ``_cost`` for the cost model.
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
    "Job",
    "JobKind",
    "NodeGroup",
    "NodeMix",
    "OpenbTrace",
    "SyntheticParams",
    "TraceError",
    "TraceFormat",
    "default_model_gb",
    "make_job",
    "offered_load",
    "read_itp",
    "read_openb",
    "read_openb_nodes",
    "read_trace",
    "ring_allreduce_s",
    "scale_load",
    "split_into_pods",
    "step_slowdown",
    "synthetic_jobs",
]
