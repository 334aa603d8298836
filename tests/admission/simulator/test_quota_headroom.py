"""ClusterQueue quota above the flavor's GPUs (``SimSettings.quota_factor``): Kueue's TAS modes do
not move, job for job, since their admission checks the topology's free capacity, which binds
before a quota above it can; only the count of their placement searches grows (quota no longer
refuses the searches that find no room). An Atoll profile that parks its waits has Workloads
hold more quota than the flavor has GPUs, and its ledger still never double-books a GPU."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest

from admission.simulator._jobs import Job, make_job
from admission.simulator._policies import make_policies
from admission.simulator._sim import SimResult, SimSettings, prepare_workload, simulate
from policies import load_profiles
from topology import ClusterModel

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
DOC = load_profiles(f"""
defaultProfile: parked
profiles:
  parked: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600, retry: {{initialSeconds: 15, maxSeconds: 300}},
            queueing: {{parkWaiting: true}}}}
""")
COUNTS = ("decisions", "decision_seconds", "wall_seconds")
"""What may differ with the quota: how many placement searches ran, and how long they took."""


def cluster() -> ClusterModel:
    """2 SUs × 2 islands × 4 nodes × 4 GPUs: 64 GPUs."""
    return ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "generate": [{"level": SU, "count": 2, "prefix": "u"}, {"level": CLIQUE, "count": 2, "prefix": "r"},
                     {"level": "kubernetes.io/hostname", "count": 4, "prefix": "n"}]}]})


def busy(n: int = 300, seed: int = 7) -> list[Job]:
    """A queue that builds: a job a minute on average, 5-25 minutes each, 1 to 16 GPUs (island-sized gangs among them)."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 60)
        jobs.append(make_job(f"j{i}", t, rng.uniform(300, 1500), rng.choice([1, 2, 4, 4, 8, 8, 16]), 4, "training"))
    return jobs


def run(policy: str, factor: float) -> SimResult:
    model = cluster()
    (pol,) = make_policies([policy], DOC, seed=3)
    return simulate(model, prepare_workload(model, busy()), pol, settings=SimSettings(quota_factor=factor))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


@pytest.mark.parametrize("policy", ["kueue-bestfit", "kueue-required"])
def test_kueue_tas_runs_the_same_jobs_the_same_way_at_twice_the_quota(policy: str) -> None:
    base, wide = run(policy, 1.0), run(policy, 2.0)
    moved = [f.name for f in dataclasses.fields(SimResult) if f.name not in COUNTS and not same(getattr(base, f.name), getattr(wide, f.name))]
    assert moved == []
    assert np.isfinite(base.start).all()  # every job started: the comparison covers them all
    assert wide.decisions > base.decisions  # the searches quota used to refuse now run, and find no room


def test_parked_workloads_hold_quota_beyond_the_gpus_and_no_gpu_is_booked_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    import admission.simulator._sim as sim

    peak = [0]

    class Watched(sim._Flavor):
        """The flavor's ClusterQueue, its quota in use watched at every change."""

        @property
        def used(self) -> int:
            return self._used

        @used.setter
        def used(self, value: int) -> None:
            self._used = value
            peak[0] = max(peak[0], value)

    monkeypatch.setattr(sim, "_Flavor", Watched)
    res = run("atoll-parked", 2.0)
    assert res.total_gpus < peak[0] <= 2 * res.total_gpus  # more Workloads held quota than the GPUs hold, as Kueue allows
    assert res.invariant_checks > 0 and res.invariant_violations == 0  # the controller's invariant, checked after every event
    assert float(res.allocated.max()) <= res.total_gpus
    assert np.isfinite(res.start).all()
