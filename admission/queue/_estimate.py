"""When running Workloads are expected to end, and so when a domain is expected to have room.

Pure state, no clock and no API: the controller and the simulator tell it what started where
(``Running``) and what finished, and ask when a domain will hold a waiting Workload.

- A Workload's expected end is its start plus Kueue's ``maximumExecutionTimeSeconds`` where set
  (an upper bound Kueue enforces: error 0), otherwise plus the runtime learned from finished
  Workloads of its queue and size band (``RuntimeEstimator``: mean and standard deviation, the
  error shown beside every estimate); a queue with too few samples falls back to all queues.
- A Workload already running longer than its estimate is expected to run one more estimate: the
  runtimes of training jobs have a heavy tail, where what has run long tends to run longer.
- A domain's expected free time for ``gpus`` GPUs is the moment enough of the GPUs its running
  Workloads hold there are expected back (``domain_outlook``). With ``per_pod`` (the GPUs of the
  Workload's largest pod), a node's GPUs count only in whole pods: GPUs free in scraps too small
  for a pod are no room. It is an estimate of the earliest start, never a promise.
- The running Workloads of one flavor are kept by node (``RunningOn``), with their expected ends
  sorted per domain once per moment: every waiting Workload decided at one moment asks for the
  same ends, so a question costs the domains it looks at, not every running Workload again.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from topology import Snapshot

__all__ = ["DomainOutlook", "Estimate", "Running", "RunningOn", "RuntimeEstimator", "band_of", "domain_outlook", "latest_ends", "soonest"]

BANDS = ((1, 7), (8, 15), (16, 63), (64, None))
"""GPU-count bands the runtimes are learned in (the simulator's wait report uses the same)."""


def band_of(gpus: int) -> int:
    for i, (lo, hi) in enumerate(BANDS):
        if gpus >= lo and (hi is None or gpus <= hi):
            return i
    return 0


@dataclass(frozen=True, slots=True)
class Estimate:
    """A runtime in seconds, its error (one standard deviation; 0 for a Kueue limit) and where it comes from."""

    seconds: float
    error: float
    samples: int
    source: str

    def describe(self) -> str:
        if self.source == "limit":
            return f"{self.seconds:.0f}s (maximumExecutionTimeSeconds)"
        return f"{self.seconds:.0f}s ± {self.error:.0f}s ({self.source}, {self.samples} finished)"


class RuntimeEstimator:
    """Runtimes of finished Workloads per (queue, size band), as running mean and variance (Welford)."""

    def __init__(self, min_samples: int = 3) -> None:
        self.min_samples = min_samples
        self._stats: dict[tuple[str | None, int | None], list[float]] = {}
        self._answers: dict[tuple[str | None, int], Estimate | None] = {}
        """``estimate``'s learned answers by (queue, band) until the next ``learn``: a decision
        asks once per running Workload, and the answers change only when something is learned."""
        self.generation = 0
        """Counts what was learned: an answer kept against it (``RunningOn``'s ends) holds until it moves."""

    def learn(self, queue: str | None, gpus: int, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            return
        self._answers.clear()
        self.generation += 1
        band = band_of(gpus)
        for key in ((queue, band), (None, band), (queue, None), (None, None)):
            s = self._stats.setdefault(key, [0.0, 0.0, 0.0])
            s[0] += 1
            delta = seconds - s[1]
            s[1] += delta / s[0]
            s[2] += delta * (seconds - s[1])

    def estimate(self, queue: str | None, gpus: int, limit: float | None = None) -> Estimate | None:
        """The runtime to expect: the Kueue limit where set, else the most specific learned figure
        with ``min_samples`` behind it (queue and band, band, queue, all); None when none has."""
        if limit is not None and limit > 0:
            return Estimate(float(limit), 0.0, 0, "limit")
        band = band_of(gpus)
        try:
            return self._answers[(queue, band)]
        except KeyError:
            pass
        answer = None
        for key, source in (((queue, band), f"queue {queue}, {_band_name(band)} GPUs"), ((None, band), f"all queues, {_band_name(band)} GPUs"),
                            ((queue, None), f"queue {queue}"), ((None, None), "all queues")):
            s = self._stats.get(key)
            if s is not None and s[0] >= self.min_samples:
                answer = Estimate(s[1], math.sqrt(s[2] / (s[0] - 1)) if s[0] > 1 else 0.0, int(s[0]), source)
                break
        self._answers[(queue, band)] = answer
        return answer


def _band_name(band: int) -> str:
    lo, hi = BANDS[band]
    return f"{lo}+" if hi is None else f"{lo}-{hi}"


@dataclass(frozen=True, slots=True)
class Running:
    """An admitted Workload's GPUs on one flavor: node name → GPUs, when it started, its queue and
    its ``maximumExecutionTimeSeconds`` (None: not set)."""

    flavor: str
    nodes: tuple[tuple[str, int], ...]
    started: float
    queue: str | None = None
    limit: float | None = None
    gpus: int = field(init=False, repr=False, compare=False)
    """The GPUs it holds, summed once (every decision reads it for every running Workload)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", sum(g for _, g in self.nodes))

    def expected_end(self, estimator: RuntimeEstimator, now: float) -> tuple[float, float] | None:
        """(expected end, its error), or None when nothing is known about its runtime."""
        est = estimator.estimate(self.queue, self.gpus, self.limit)
        if est is None:
            return None
        end = self.started + est.seconds
        if end < now:  # overdue: a limit ends it now, a learned runtime expects one more of itself
            end = now if est.source == "limit" else now + est.seconds
        return end, est.error


End = tuple[float, float, int, int]
"""A running Workload's GPUs on one node as ``domain_outlook`` reads them: (expected end, its
error, GPUs, node index); an unknown runtime ends at infinity."""


class RunningOn:
    """The running Workloads on one flavor in the order they started, indexed by node, with
    their expected ends kept while the moment, the estimator and the running set stay the same.

    ``domain_outlook`` reads it instead of walking every running Workload: each Workload's
    expected end is computed once per moment and estimator state (``end``), and per level the
    ends are sorted per domain once (``by_domain``), so many waiting Workloads decided at one
    moment share them. Iterating it gives the ``Running`` values, as a list would."""

    __slots__ = ("_by_domain", "_by_node", "_ends", "_ends_for", "_running", "_version", "flavor")

    def __init__(self, flavor: str, running: Iterable[tuple[Hashable, Running]] = ()) -> None:
        self.flavor = flavor
        self._running: dict[Hashable, Running] = {}
        self._by_node: dict[str, list[tuple[Hashable, int]]] = {}
        self._version = 0
        self._ends: dict[Hashable, tuple[float, float] | None] = {}
        self._ends_for: tuple[object, ...] = ()
        self._by_domain: dict[tuple[int, bool], tuple[tuple[int, int, float], tuple[object, ...], list[list[End]]]] = {}
        for key, r in running:
            self.add(key, r)

    @classmethod
    def of(cls, flavor: str, running: Iterable[Running]) -> RunningOn:
        """``running`` itself when it is the index of ``flavor``; else the index of its Workloads on ``flavor``."""
        if isinstance(running, RunningOn) and running.flavor == flavor:
            return running
        return cls(flavor, ((k, r) for k, r in enumerate(running) if r.flavor == flavor))

    def __iter__(self) -> Iterator[Running]:
        return iter(self._running.values())

    def __len__(self) -> int:
        return len(self._running)

    def add(self, key: Hashable, running: Running) -> None:
        """``key`` runs as ``running`` (in place of what it ran as before)."""
        self.remove(key)
        self._running[key] = running
        for name, g in running.nodes:
            self._by_node.setdefault(name, []).append((key, g))
        self._version += 1

    def remove(self, key: Hashable) -> Running | None:
        """``key`` runs no more here: what it ran as, or None."""
        r = self._running.pop(key, None)
        if r is None:
            return None
        for name in {n for n, _ in r.nodes}:
            kept = [e for e in self._by_node[name] if e[0] != key]
            if kept:
                self._by_node[name] = kept
            else:
                del self._by_node[name]
        self._ends.pop(key, None)
        self._version += 1
        return r

    def on_nodes(self, names: Iterable[str]) -> dict[Hashable, Running]:
        """The Workloads running on any of ``names``, by key, each once."""
        return {key: self._running[key] for name in names for key, _ in self._by_node.get(name, ())}

    def end(self, key: Hashable, estimator: RuntimeEstimator, now: float) -> tuple[float, float] | None:
        """``self[key].expected_end(estimator, now)``, kept until ``now`` or what ``estimator`` learned moves."""
        if not (self._ends_for and self._ends_for[0] is estimator and self._ends_for[1:] == (estimator.generation, now)):
            self._ends.clear()
            self._ends_for = (estimator, estimator.generation, now)
        try:
            return self._ends[key]
        except KeyError:
            got = self._ends[key] = self._running[key].expected_end(estimator, now)
            return got

    def by_domain(self, snapshot: Snapshot, lv: int, flat: bool, estimator: RuntimeEstimator, now: float) -> list[list[End]]:
        """Per domain of level ``lv`` of ``snapshot`` (``flat``: one, the whole flavor), the running
        GPUs on its nodes as ``End``s in ascending order, every node counted (eligible or not).
        Kept until the running set, ``now``, what ``estimator`` learned or the structure changes."""
        token = (self._version, estimator.generation, now)
        refs = (estimator, snapshot.node_names, snapshot.node_dom)  # compared by identity: the same objects, the same answer
        have = self._by_domain.get((lv, flat))
        if have is not None and have[0] == token and all(a is b for a, b in zip(have[1], refs, strict=True)):
            return have[2]
        out: list[list[End]] = [[] for _ in range(1 if flat else snapshot.num_domains(lv))]
        dom: list[int] = [] if flat else snapshot.node_dom[lv].tolist()
        index = snapshot.node_index
        for name, held in self._by_node.items():
            i = index.get(name)
            if i is None:
                continue
            row = out[0 if flat else dom[i]]
            for key, g in held:
                got = self.end(key, estimator, now)
                row.append((got[0], got[1], g, i) if got is not None else (math.inf, math.inf, g, i))
        for row in out:
            row.sort()
        self._by_domain[(lv, flat)] = (token, refs, out)
        return out


@dataclass(frozen=True, slots=True)
class DomainOutlook:
    """One domain of a level for a Workload of ``gpus`` GPUs: its GPUs in all, free now, still to
    drain, and when enough are expected free (``now`` when they are; None: some runtime unknown)."""

    domain: int
    path: tuple[str, ...]
    capacity: int
    free: int
    to_drain: int
    free_at: float | None
    error: float


def domain_outlook(snapshot: Snapshot, level: str | None, gpus: int, running: Iterable[Running], estimator: RuntimeEstimator,
                   now: float, blocked: Mapping[str, int] | None = None, per_pod: int = 1) -> list[DomainOutlook]:
    """Per domain of ``level`` (None: the whole flavor) able to hold ``gpus`` GPUs when empty, the
    outlook for a Workload of that size, in domain order. ``snapshot.free`` is what is free now
    (the decision's fork: owed pods counted). ``blocked``: node → GPUs that free up for someone
    else (another gang's reservation), never counted as coming back; nor are GPUs that running
    Workloads hold on a node ``snapshot`` makes ineligible (the Workload cannot use them).
    ``per_pod`` > 1: each node's free GPUs count in whole pods of that many GPUs (``free`` and
    ``to_drain`` in those terms), and a GPU coming back counts when it completes a pod on its node.
    ``running`` as a ``RunningOn`` of the flavor is read by node, its ends kept between questions;
    any other iterable is indexed for this question alone."""
    flat = level is None
    lv = snapshot.level_index(level) if level is not None and level in snapshot.level_labels else 0
    alloc = np.where(snapshot.eligible.astype(bool), snapshot.alloc[:, 0], 0)
    free = np.minimum(snapshot.free[:, 0], alloc)
    usable: list[int] = alloc.tolist()
    free_now: list[int] = free.tolist()
    index = RunningOn.of(snapshot.flavor, running)
    ends: list[list[End]] | None = None
    pod = max(int(per_pod), 1)
    whole = free if pod == 1 else free // pod * pod
    if flat:
        caps, frees = [int(alloc.sum())], [int(whole.sum())]
    else:  # each domain is one contiguous run of nodes: summed per run at once
        base = int(snapshot.bptr[lv])
        starts = snapshot.bounds[base:base + snapshot.num_domains(lv)]
        caps = np.add.reduceat(alloc, starts).tolist() if len(starts) else []
        frees = np.add.reduceat(whole, starts).tolist() if len(starts) else []
    taken = [0] * len(caps)
    for name, g in (blocked or {}).items():
        i = snapshot.node_index.get(name, -1)
        if i >= 0:
            taken[0 if flat else int(snapshot.node_dom[lv, i])] += g
    out = []
    for d, (cap, now_free) in enumerate(zip(caps, frees, strict=True)):
        if cap < gpus:
            continue
        cap -= taken[d]
        if cap < gpus:
            continue
        to_drain = max(0, gpus - now_free)
        free_at: float | None = now
        error = 0.0
        if to_drain:
            if ends is None:
                ends = index.by_domain(snapshot, lv, flat, estimator, now)
            free_at, error = _drained_at(ends[d], usable, free_now, pod, to_drain)
        path = () if flat else snapshot.domain_path(lv, d)
        out.append(DomainOutlook(d, path, cap, now_free, to_drain, free_at, error))
    return out


def _drained_at(ends: Iterable[End], usable: list[int], free_now: list[int], pod: int, to_drain: int) -> tuple[float | None, float]:
    """When ``to_drain`` GPUs (in whole pods of ``pod`` per node) are back, walking ``ends`` in
    order on nodes with ``usable`` GPUs and ``free_now`` free, and that end's error; (None, 0)
    when they never are, or an unknown runtime comes first."""
    got_back = 0
    node_free: dict[int, int] = {}
    for end, err, g, i in ends:
        room = usable[i]
        if not room:  # a node it may not use (ineligible, under its speed floor): never its room
            continue
        if pod == 1:
            got_back += g
        else:  # the whole pods this end completes on its node
            was = node_free.get(i)
            if was is None:
                was = free_now[i]
            back = was + g if was + g < room else room
            node_free[i] = back
            got_back += back // pod * pod - was // pod * pod
        if got_back >= to_drain:
            return (end, err) if math.isfinite(end) else (None, 0.0)
    return None, 0.0


def latest_ends(snapshot: Snapshot, lv: int | None, domain: int, running: Iterable[Running], estimator: RuntimeEstimator,
                now: float) -> dict[int, float]:
    """Node index → the latest expected end of the running Workloads on that node, for the nodes
    of ``domain`` of level ``lv`` (None: the whole flavor) that any holds; never before ``now``,
    infinite when a runtime is unknown. Read from the ``RunningOn`` index as ``domain_outlook`` is."""
    ends = RunningOn.of(snapshot.flavor, running).by_domain(snapshot, 0 if lv is None else lv, lv is None, estimator, now)
    out: dict[int, float] = {}
    for end, _, _, i in ends[0 if lv is None else domain]:
        out[i] = max(out.get(i, now), end)
    return out


def soonest(outlooks: Iterable[DomainOutlook]) -> DomainOutlook | None:
    """The domain expected to have room first (ties: fewer GPUs to drain, then domain order); None when no time is known."""
    known = [o for o in outlooks if o.free_at is not None]
    return min(known, key=lambda o: (o.free_at, o.to_drain, o.domain)) if known else None

