"""The kube-scheduler models: the filter never overcommits a node, LeastAllocated spreads by
cpu/memory and ignores GPUs, MostAllocated packs GPUs, ties are seeded, the adversary takes
other Workloads' planned nodes first."""

from __future__ import annotations

import numpy as np
import pytest

from admission.simulator._scheduler import BindingModel

GPU4 = (4, 64_000, 512 * 1024, 110)


def nodes(used_gpu: list[int], used_cpu: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    alloc = np.array([GPU4] * len(used_gpu), dtype=np.int64)
    free = alloc.copy()
    free[:, 0] -= used_gpu
    free[:, 1] -= used_cpu or [0] * len(used_gpu)
    return free, alloc


def test_no_model_binds_a_pod_where_it_does_not_fit() -> None:
    for name in ("least-allocated", "most-allocated", "random", "adversarial"):
        free, alloc = nodes([3, 0, 4])
        got = BindingModel(name, 1).bind(free, alloc, np.array([0, 1, 2]), (2, 0, 0), 3)
        assert got == [(1, 2)], name  # only node 1 holds a 2-GPU pod, twice; the third pod stays Pending
        assert (free >= 0).all()


def test_least_allocated_scores_cpu_and_memory_not_gpus() -> None:
    free, alloc = nodes([3, 0], used_cpu=[0, 32_000])  # node 0: GPUs busy, CPU idle
    got = BindingModel("least-allocated", 0).bind(free, alloc, np.array([0, 1]), (1, 1000, 1024), 1)
    assert got == [(0, 1)]


def test_most_allocated_packs_the_node_with_the_most_gpus_in_use() -> None:
    free, alloc = nodes([0, 2, 1])
    got = BindingModel("most-allocated", 0).bind(free, alloc, np.array([0, 1, 2]), (1, 1000, 1024), 2)
    assert got == [(1, 2)]


def test_ties_are_drawn_from_the_seed() -> None:
    def draw(seed: int) -> list[tuple[int, int]]:
        free, alloc = nodes([0] * 8)
        return BindingModel("least-allocated", seed).bind(free, alloc, np.arange(8), (4, 0, 0), 3)

    assert draw(3) == draw(3)
    assert len({tuple(draw(s)) for s in range(8)}) > 1


def test_the_adversary_takes_nodes_other_workloads_planned_and_avoids_its_own() -> None:
    free, alloc = nodes([0] * 4)
    others = np.array([0, 0, 1, 1])
    got = BindingModel("adversarial", 0).bind(free, alloc, np.arange(4), (4, 0, 0), 3, own=np.array([0, 1]), others=others)
    assert sorted(n for n, _ in got[:2]) == [2, 3] and got[2][0] in (0, 1)


def test_an_unknown_model_is_named() -> None:
    with pytest.raises(ValueError, match="scheduler: 'kind'"):
        BindingModel("kind", 0)


def balance_as_arrays(alloc: np.ndarray, requested: np.ndarray) -> np.ndarray:
    """kube-scheduler 1.36's balancedResourceScore over cpu and memory, on arrays."""
    frac = np.minimum(requested[:, 1:3] / alloc[:, 1:3], 1.0)
    return ((1.0 - np.abs(frac[:, 0] - frac[:, 1]) / 2.0) * 100.0).astype(np.int64)


def scores_as_arrays(free: np.ndarray, alloc: np.ndarray, fit: np.ndarray, req: np.ndarray, name: str) -> np.ndarray:
    """The scheduler's scores written as whole-array arithmetic (the twin of ``_fit_and_best``)."""
    cap = np.maximum(alloc[fit], 1)
    before = alloc[fit] - free[fit]
    share = np.minimum((before + req) * 100 // cap, 100)
    balanced = 50 + (50 + balance_as_arrays(cap, before + req) - balance_as_arrays(cap, before)) // 2
    if req[1] == 0 and req[2] == 0:
        balanced = np.zeros_like(balanced)
    if name == "least-allocated":
        pod = np.array([0, req[1] or 100, req[2] or 200, 0])
        least = (cap - before - pod) * 100 // cap
        return (least[:, 1] + least[:, 2]) // 2 + balanced
    weights = {1: 1, 2: 1, 0: 3}  # cpu, memory, nvidia.com/gpu
    return sum(w * share[:, r] for r, w in weights.items()) // sum(weights.values()) + balanced


@pytest.mark.parametrize("name", ["least-allocated", "most-allocated"])
def test_the_compiled_filter_and_scores_match_the_array_formula(name: str) -> None:
    from admission.simulator._scheduler import _SCORED, _fit_and_best

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 30))
        alloc = np.column_stack([rng.choice([4, 8], n), rng.choice([64_000, 128_000], n), rng.choice([512, 2048], n) * 1024,
                                 np.full(n, 110)]).astype(np.int64)
        free = (alloc * rng.random((n, 4))).astype(np.int64)
        free[rng.random(n) < 0.3, 0] = 0
        req = np.array([int(rng.choice([0, 1, 2, 4])), int(rng.integers(0, 40_000)), int(rng.integers(0, 300_000)), 1], dtype=np.int64)
        cand = rng.permutation(n)[: int(rng.integers(1, n + 1))].astype(np.int64)
        fit, best = _fit_and_best(free, alloc, cand, req, _SCORED[name])
        need = req > 0
        want_fit = cand[(free[cand][:, need] >= req[need]).all(axis=1)]
        assert fit.tolist() == want_fit.tolist()
        if want_fit.size > 1:
            score = scores_as_arrays(free, alloc, want_fit, req, name)
            assert best.tolist() == np.flatnonzero(score == score.max()).tolist()
