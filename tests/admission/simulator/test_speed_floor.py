"""The class speed floor priced by cost, in the simulator through the deployed decision path: with
``perfFloorIdle: take`` nodes under the floor run jobs whenever they are free while a backlog
waits; weighing each job's expected wait against its slowdown leaves them idle longer."""

from __future__ import annotations

from admission.simulator._jobs import Job, make_job
from admission.simulator._metrics import summarize
from admission.simulator._policies import make_policies
from admission.simulator._sim import STATUS_DONE, SimResult, SimSettings, prepare_workload, simulate
from policies import load_profiles
from topology import ClusterModel

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
SLOW = {"r0n0", "r0n1"}
DOC = load_profiles(f"""
defaultProfile: weigh
profiles:
  weigh: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}}, queueing: {{perfFloorByCost: 0.0}}}}
  take: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
          queueing: {{perfFloorByCost: 0.0, perfFloorIdle: take}}}}
  weigh-idle: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
                queueing: {{perfFloorByCost: 0.0, waitWeight: 4.0}}}}
classes:
  training: {{perfFloor: 0.9, uniformPerf: true}}
""")


def cluster() -> ClusterModel:
    """1 SU × 2 islands × 4 nodes × 4 GPUs; r0n0 and r0n1 at 0.7, under the training floor."""
    return ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": f"r{r}n{n}", "labels": {SU: "u0", CLIQUE: f"r{r}"}, **({"perf": 0.7} if f"r{r}n{n}" in SLOW else {})}
                  for r in range(2) for n in range(4)]}]})


def backlog() -> list[Job]:
    """60 one-node jobs of 3,000 s, one every 300 s: more than the 6 fast nodes can run (one per 500 s)."""
    return [make_job(f"j{i}", 300.0 * i, 3000.0, 4, 4, "training") for i in range(60)]


def run(policy: str) -> SimResult:
    (pol,) = make_policies([policy], DOC, seed=1)
    return simulate(cluster(), prepare_workload(cluster(), backlog()), pol, settings=SimSettings(parking=True))


def test_under_perf_floor_idle_take_nodes_under_the_floor_run_jobs_while_a_backlog_waits() -> None:
    weigh, take = run("atoll-weigh"), run("atoll-take")
    assert (weigh.status == STATUS_DONE).all() and (take.status == STATUS_DONE).all()
    on_slow = {name: int((r.slowdown > 1.2).sum()) for name, r in (("weigh", weigh), ("take", take))}  # 1.39× on the slow nodes
    # weighed, a job takes a slow node only when its expected wait for a fast one exceeds +1,157 s; taken, whenever one is free
    assert on_slow["take"] >= on_slow["weigh"] + 3
    w, t = summarize(weigh), summarize(take)
    assert t["gpu_allocation"] > w["gpu_allocation"] + 0.05  # the slow nodes idle less
    assert t["mean_wait_s"] < w["mean_wait_s"] and t["mean_jct_s"] < w["mean_jct_s"]  # the backlog drains sooner


def test_a_wait_charged_for_the_gpus_it_leaves_idle_runs_more_jobs_on_the_slower_nodes() -> None:
    weigh, idle = run("atoll-weigh"), run("atoll-weigh-idle")
    assert (weigh.status == STATUS_DONE).all() and (idle.status == STATUS_DONE).all()
    # charged four times over, a wait of more than 290 s (not 1,157 s) outweighs the slow node's +1,157 s
    assert int((idle.slowdown > 1.2).sum()) >= int((weigh.slowdown > 1.2).sum()) + 2
    w, i = summarize(weigh), summarize(idle)
    assert i["gpu_allocation"] > w["gpu_allocation"] + 0.03 and i["mean_wait_s"] < w["mean_wait_s"]  # the slow nodes idle less
