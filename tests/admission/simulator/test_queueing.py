"""The queue manager in the simulator, through the deployed decision path: a large gang behind a
stream of small jobs is admitted within a bounded time once it reserves, where without a
reservation the stream starves it; the GPUs reservations idle are reported."""

from __future__ import annotations

import itertools
import random

import pytest

from admission.simulator._deployed import DeployedAtoll
from admission.simulator._jobs import Job, make_job
from admission.simulator._metrics import summarize
from admission.simulator._policies import make_policies
from admission.simulator._sim import STATUS_DONE, SimResult, SimSettings, _declared, prepare_workload, simulate
from policies import load_profiles
from topology import ClusterModel, ResourceVector

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
RESERVE_AFTER = 600
DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}}}}
  reserving: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
               queueing: {{reserveAfterSeconds: {RESERVE_AFTER}}}}}
""")
_ids = itertools.count()


def job(arrival: float, duration: float, gpus: int) -> Job:
    return make_job(f"j{next(_ids)}", arrival, duration, gpus, 4, "training")


def cluster() -> ClusterModel:
    """1 SU × 2 islands × 4 nodes × 4 GPUs."""
    return ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "generate": [{"level": SU, "count": 1, "prefix": "u"}, {"level": CLIQUE, "count": 2, "prefix": "r"},
                     {"level": "kubernetes.io/hostname", "count": 4, "prefix": "n"}]}]})


def stream(seed: int = 3) -> list[Job]:
    """A 16-GPU gang (one whole island) at t=1500 behind 2-GPU jobs that keep both islands partly used."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for _ in range(160):
        t += rng.uniform(20, 40)
        jobs.append(job(t, rng.uniform(200, 400), 2))
    jobs.append(job(1500.0, 300.0, 16))
    return sorted(jobs, key=lambda j: j.submit_s)


def run(policy: str, parking: bool, declared: float | None = None) -> tuple[SimResult, int]:
    jobs = stream()
    gang = next(i for i, j in enumerate(jobs) if j.gpus == 16)
    (pol,) = make_policies([policy], DOC, seed=1)
    settings = SimSettings(parking=parking, declared_runtime_factor=declared)
    return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=settings), gang


def test_a_gang_behind_a_stream_of_small_jobs_starts_within_a_bounded_time_once_it_reserves() -> None:
    res, gang = run("atoll-reserving", parking=False)
    assert (res.status == STATUS_DONE).all()
    wait = res.start[gang] - res.arrival[gang]
    # it reserves at its first decision after 600 s of waiting (Retries ≤ 120 s apart), then what runs on its nodes ends (≤ 400 s)
    assert wait <= RESERVE_AFTER + 120 + 400
    starved, g = run("atoll-strict", parking=False)
    assert starved.start[g] - starved.arrival[g] > 2 * wait  # the same stream without a reservation keeps it waiting
    assert summarize(res)["reserved_idle_gpu_hours"] > 0  # reserved GPUs sat free while the gang's nodes drained
    assert summarize(starved)["reserved_idle_gpu_hours"] == 0


def test_a_parked_gang_keeps_its_quota_and_is_bounded_too() -> None:
    res, gang = run("atoll-reserving", parking=True)
    assert (res.status == STATUS_DONE).all()
    assert res.start[gang] - res.arrival[gang] <= RESERVE_AFTER + 400


def test_with_declared_runtimes_the_gang_behind_the_stream_is_still_admitted_within_the_bound() -> None:
    # every small job declares its exact runtime, so any whose limit ends before the reserved island drains may backfill it
    res, gang = run("atoll-reserving", parking=False, declared=1.0)
    assert (res.status == STATUS_DONE).all()
    assert res.start[gang] - res.arrival[gang] <= RESERVE_AFTER + 120 + 400


def test_a_job_declares_its_runtime_limit_as_the_factor_over_its_ideal_runtime_rounded_up() -> None:
    j = job(0.0, 300.2, 2)
    assert _declared(SimSettings(declared_runtime_factor=2.0), j) == 601
    assert _declared(SimSettings(), j) is None  # by default no job declares one
    (pol,) = make_policies(["atoll-reserving"], DOC, seed=1)
    atoll = DeployedAtoll(pol.name, pol.profile_name, DOC, cluster())
    per_pod = ResourceVector(gpu=2, cpu_milli=0, memory_mib=0, pods=1)
    assert atoll.workload(0, 0, 1, per_pod, "training", max_seconds=601)["spec"]["maximumExecutionTimeSeconds"] == 601
    assert "maximumExecutionTimeSeconds" not in atoll.workload(1, 0, 1, per_pod, "training")["spec"]


def test_a_declared_runtime_below_the_runtime_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="declared_runtime_factor"):
        SimSettings(declared_runtime_factor=0.5)
