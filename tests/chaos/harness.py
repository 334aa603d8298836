"""One chaos run and many: a small fabric on the real apiserver, the controller behind the fault
proxy (killed and restarted at random points), Kueue and an adversarial scheduler around it
(running pods fail now and then, and their job controller creates replacements: ``actors``),
then an audit of the final API state.

Killing in-process: the controller's port is wrapped in ``CrashingPort``. Once killed, every call
any of the controller's threads makes raises ``Crash`` (a ``BaseException``, so no handler in
the controller swallows it): from that instant the dead controller has no further effect on
the cluster, wherever it was, as after SIGKILL. Besides kills at random times, the port kills
the controller on its own between computing a decision and writing it, and right after the
write (before the decision record), at ``crash_rate`` per decision write. A fresh ``Controller``
then starts from nothing but the API.

The audit (``audit``), on the final state, after faults stop and a clean controller has had
the chance to decide what is left:

- ``double_booked``: a node where bound pods plus the owed pods the ledger (rebuilt by a fresh
  controller from a list of the API) counts there exceed allocatable;
- ``unplaceable_owed``: owed pods, counted independently from the API (admitted count minus the
  pods of that decision bound and unfinished, minus those that succeeded), that no assignment
  fits in their nodeSelector domain;
- ``lost``: Workloads Atoll must decide (quota held, not evicted, entry Pending) left undecided;
- ``duplicate_decisions``: decision records beyond one per quota reservation Kueue made;
- ``dual_leaders`` (with ``replicas``: two controllers electing a leader on a Lease, the leader
  killed at random): decision records of one lease term written by two replicas, records written
  with no term, and moments when two live replicas both held a valid term;
- ``writes_outside_term`` (with ``replicas``): writes the apiserver applied from a replica
  when the Lease's history says it did not hold the Lease. The proxy records each write as it
  forwards it, with the server's answer: the resourceVersion it answered, and for each Lease
  write it accepted, the holder. A write must be applied after its sender's hold of the Lease
  was accepted and before any other replica's Lease write, in the server's order of revisions
  (``terms``). That order is exact on this test server only: it keeps every object in one
  etcd, whose revision is one store-wide counter, and answers an object's last revision as its
  resourceVersion; the Kubernetes API calls resourceVersion opaque, and Atoll never reads it
  this way. ``writes_answered_late`` counts the writes answered after a takeover began that
  were applied before it. Terms are real (the short ``LEASE``); a replica killed in-process is
  a paused one: a write it had in flight still lands unless its timeout ends it first.
"""

from __future__ import annotations

import copy
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from kubernetes import client

from admission.controller import (
    ConfigSettings,
    Controller,
    DecisionSettings,
    KueueSettings,
    Recorder,
    Settings,
    WatchSettings,
    check_invariant,
    decode_planned,
)
from admission.controller._invariant import Demand, OwedPods, place_owed, pod_shape
from admission.kube import WORKLOADS, ApiRetrySettings, KubePort, LeaderElector, LeaderSettings, Obj, Resource
from tests.admission.fabric import BLOCK, CLIQUE, POOL, profiles_doc
from tests.chaos.actors import (
    FINISHED,
    Kueue,
    NodeSpec,
    Scheduler,
    actionable,
    admitted,
    decision_of,
    entry_of,
    failed_node_of,
    gpus_of,
    phase_of,
)
from tests.chaos.proxy import FaultProxy
from tests.chaos.terms import AGENT, writes_answered_late, writes_outside_term
from tests.kube_objects import (
    GROUP,
    VERSION,
    KueueActor,
    admission_check,
    cluster_queue,
    create_node,
    is_true,
    local_queue,
    node,
    resource_flavor,
    topology,
    workload,
)
from topology import ResourceVector

__all__ = ["AGENT", "Crash", "CrashingPort", "RunConfig", "RunResult", "run_once", "writes_answered_late", "writes_outside_term"]


NESTED = ((1, 4), (2, 4), (3, 4), (1, 2), (3, 2), (4, 2), (2, 1), (6, 1))
"""(pods, GPUs per pod) of the Workloads, on 4-GPU nodes: single-node ones get a hostname
selector, multi-node ones a clique selector, so domains nest (a node inside another Workload's
clique) and the scheduler may bind the wide Workload's pods on the narrow one's only node."""
FLAT = ((2, 4), (3, 4), (5, 2), (6, 1))
"""Shapes that never fit on one 4-GPU node, all under the strict profile: every selector is a
whole clique, domains never nest."""
SHAPES = {"nested": NESTED, "flat": FLAT}


class Crash(BaseException):
    """The controller process died here."""


class CrashingPort:
    """A ``ClusterPort`` that can die: ``kill()`` at any time, or on its own around decision writes."""

    def __init__(self, port: KubePort, rng: random.Random, crash_rate: float) -> None:
        self.port = port
        self.rng = rng
        self.crash_rate = crash_rate
        self.dead = threading.Event()
        self.crashes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def single_attempt(self) -> CrashingPort:
        """The same port, dying with it, making one attempt per call (the controller's worker's view)."""
        view = copy.copy(self)
        view.port = self.port.single_attempt()
        return view

    def kill(self, where: str = "random-time") -> None:
        if not self.dead.is_set():
            self.crashes[where] += 1
        self.dead.set()

    def _alive(self) -> None:
        if self.dead.is_set():
            raise Crash("controller killed")

    def list(self, resource: Resource, **kw: Any) -> Any:
        self._alive()
        return self.port.list(resource, **kw)

    def watch(self, resource: Resource, resource_version: str, **kw: Any) -> Any:
        self._alive()
        return self.port.watch(resource, resource_version, **kw)

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        self._alive()
        return self.port.get(resource, name, namespace)

    def create(self, resource: Resource, obj: Obj) -> Obj:
        self._alive()
        return self.port.create(resource, obj)

    def replace(self, resource: Resource, obj: Obj) -> Obj:
        self._alive()
        return self.port.replace(resource, obj)

    def patch(self, resource: Resource, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        self._alive()
        return self.port.patch(resource, name, patch, namespace)

    def apply(self, resource: Resource, obj: Obj, **kw: Any) -> Obj:
        self._alive()
        if resource != WORKLOADS or kw.get("subresource") != "status":
            return self.port.apply(resource, obj, **kw)
        with self._lock:
            roll = self.rng.random()
        if roll < self.crash_rate / 2:
            self.kill("decided-not-written")
            raise Crash("killed between deciding and writing")
        out = self.port.apply(resource, obj, **kw)
        if roll < self.crash_rate:
            self.kill("written-not-recorded")
            raise Crash("killed after writing, before recording")
        return out


@dataclass(frozen=True)
class RunConfig:
    seed: int = 1
    fault_rate: float = 0.2
    seconds: float = 3.0
    """Chaos phase length; the settle phase and the audit come after."""
    blocks: int = 1
    cliques: int = 2
    per_clique: int = 3
    node_gpus: int = 4
    workloads: int = 8
    shapes: str = "nested"
    """``nested`` or ``flat`` (``SHAPES``)."""
    quota_factor: float = 1.5
    """ClusterQueue quota as a multiple of the fabric's GPUs: Kueue reserves more than fits."""
    kill_rate: float = 0.03
    """Chance per harness tick (~50 ms) that the controller is killed at whatever it is doing."""
    crash_rate: float = 0.1
    """Chance per decision write of a kill just before or just after it."""
    bind_rate: float = 0.4
    finish_rate: float = 0.05
    preempt_rate: float = 0.01
    fail_rate: float = 0.05
    """Chance per harness tick that a running pod of an admitted Workload fails and its job
    controller creates a replacement (``actors``): its slot is owed again until the replacement binds."""
    slow_seconds: tuple[float, float] = (0.05, 0.4)
    """How long the proxy holds a request drawn ``slow`` (s, uniform)."""
    faults: tuple[str, ...] | None = None
    """Only these faults (None: all of them)."""
    settle_seconds: float = 1.0
    settle_faults: bool = False
    """Keep the proxy's faults on while settling: a server still slow once the chaos stops, as a
    loaded machine's is (reads timing out)."""
    process: bool = False
    """Run the controller as an ``atoll run`` process killed with SIGKILL (instead of in-process,
    where ``crash_rate`` also kills it around decision writes)."""
    replicas: bool = False
    """Two in-process replicas electing a leader on a Lease (short terms, ``LEASE``); kills go to
    the leader; each write is fenced by its replica's term."""
    write_workers: int = 0
    """``DecisionSettings.write_workers``: decision writes in flight at once (0: serial)."""
    """How long a clean controller must have had nothing to decide before the audit."""


@dataclass
class RunResult:
    double_booked: int = 0
    unplaceable_owed: int = 0
    lost: int = 0
    duplicate_decisions: int = 0
    ledger_mismatch: int = 0
    admissions: int = 0
    decisions: int = 0
    chaos_seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    bound: int = 0
    bound_on_others_plan: int = 0
    preemptions: int = 0
    pods_failed: int = 0
    replacements_bound: int = 0
    dual_leaders: int = 0
    takeovers: int = 0
    writes_received: int = 0
    """Writes of the replicas the apiserver received (the timeline the term audit read)."""
    writes_outside_term: int = 0
    writes_answered_late: int = 0
    """Writes applied inside their sender's term whose answer came after a takeover began."""
    violations: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.double_booked or self.unplaceable_owed or self.lost or self.duplicate_decisions or self.dual_leaders
                    or self.writes_outside_term)


LEASE = LeaderSettings(lease_name="atoll-controller", lease_duration_seconds=1.5, renew_deadline_seconds=1.0, retry_period_seconds=0.1,
                      write_margin_seconds=0.2)
"""Short terms, so a killed leader is replaced within a run's chaos phase."""
SETTLE_LEASE = LeaderSettings(lease_name=LEASE.lease_name)
"""The clean replicas' terms while settling: a chaos term leaves a write 0.8 s to end, which a
loaded apiserver (reads timing out) does not answer in, so a clean leader's writes were
refused by its own fence and it stepped down again and again until the settle ran out, and the
Workloads left undecided counted as lost (``test_a_server_still_slow_while_settling_…``: 11 at
seed 41 with the chaos terms and 20 s). A term a loaded server can renew in is what a
clean deployment runs (client-go's defaults, as ``atoll run`` and the chart have them); every
write is still checked against the term it was sent in (``writes_outside_term``)."""
SETTLE_QUIET_S = 30.0
"""The settle phase ends when nothing is left to decide, or after this long without progress
(fewer Workloads left to decide); ``SETTLE_MAX_S`` in all."""
SETTLE_MAX_S = 120.0


@dataclass
class _Replica:
    identity: str
    ctrl: Controller
    elector: LeaderElector
    ports: tuple[CrashingPort, CrashingPort]
    """The elector's, then the controller's (fenced by the elector's term)."""
    stop: threading.Event
    thread: threading.Thread


def _client(host: str, token: str, identity: str | None = None) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = host
    cfg.api_key = {"authorization": f"Bearer {token}"}
    api = client.ApiClient(cfg)
    if identity is not None:
        api.user_agent = AGENT + identity
    return api


class ChaosRun:
    """One run in its own namespace; ``api`` is a direct client, ``proxy`` the faulty way in."""

    def __init__(self, api: client.ApiClient, token: str, proxy: FaultProxy, ns: str, config: RunConfig,
                 controller_factory: Callable[..., Controller] = Controller) -> None:
        self.api, self.token, self.proxy, self.ns, self.cfg = api, token, proxy, ns, config
        self.rng = random.Random(config.seed)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.flavor, self.topology, self.check, self.cq = f"{ns}-gpu", f"{ns}-topo", f"{ns}-check", f"{ns}-cq"
        self.records = io.StringIO()
        self.recorder = Recorder(self.records)
        self.controller_factory = controller_factory
        self.nodes: list[NodeSpec] = []
        self.result = RunResult()
        self._ctrl: Controller | None = None
        self._port: CrashingPort | None = None
        self._restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._replicas: list[_Replica] = []
        self._lease = LEASE
        """The terms new replicas elect with: the chaos ``LEASE``, ``SETTLE_LEASE`` once settling."""
        self._timeline_from = len(proxy.timeline) if proxy is not None else 0
        self._terms_seen: set[int] = set()
        self._dir = Path(tempfile.mkdtemp(prefix="atoll-chaos-"))

    # ------------------------------------------------------------------ setup

    def install(self) -> None:
        c = self.cfg
        self.core.create_namespace({"metadata": {"name": self.ns}})
        for b in range(c.blocks):
            for q in range(c.cliques):
                for i in range(c.per_clique):
                    name = f"{self.ns}-b{b}c{q}n{i}"
                    labels = {POOL: self.ns, BLOCK: f"{self.ns}-b{b}", CLIQUE: f"{self.ns}-b{b}c{q}"}
                    create_node(self.core, node(name, labels, c.node_gpus))
                    self.nodes.append(NodeSpec(name, {"kubernetes.io/hostname": name, **labels}, c.node_gpus))
        quota = int(len(self.nodes) * c.node_gpus * c.quota_factor)
        self.custom.create_cluster_custom_object(GROUP, VERSION, "topologies", topology(self.topology, [BLOCK, CLIQUE]))
        self.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", resource_flavor(self.flavor, {POOL: self.ns}))
        self.custom.create_cluster_custom_object(GROUP, VERSION, "admissionchecks", admission_check(self.check))
        self.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(self.cq, self.flavor, quota, self.check))
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "localqueues", local_queue(self.ns, "lq", self.cq))
        retry = {"initialSeconds": 1, "maxSeconds": 2}
        doc = profiles_doc(self.flavor, self.topology, profiles={
            "strict": {"requiredLevel": CLIQUE, "retry": retry},
            "elastic": {"preferredLevel": CLIQUE, "maxSpanLevel": BLOCK, "relaxAfterSeconds": 1, "retry": retry}})
        self.core.create_namespaced_config_map(self.ns, {"metadata": {"name": "atoll-policies", "namespace": self.ns},
                                                         "data": {"profiles.yaml": yaml.safe_dump(doc)}})
        actor = KueueActor(self.api, self.check)
        for i in range(c.workloads):
            pods, per_pod = self.rng.choice(SHAPES[c.shapes])
            # an elastic Workload may relax to a block-wide selector, which nests the block's cliques
            profile = self.rng.choice(["strict", "strict", "elastic"]) if c.shapes == "nested" else "strict"
            actor.create(workload(self.ns, f"w{i}", [("main", pods, per_pod)],
                                  podset_annotations={"main": {"atoll.dev/profile": profile}}))
        self.kueue = Kueue(actor, self.ns, self.cq, self.flavor, self.check, quota, random.Random(self.rng.random()),
                           preempt_rate=c.preempt_rate)
        self.scheduler = Scheduler(self.core, self.ns, self.check, self.nodes, random.Random(self.rng.random()),
                                   bind_rate=c.bind_rate, finish_rate=c.finish_rate, fail_rate=c.fail_rate)

    def settings(self) -> Settings:
        return Settings(kueue=KueueSettings(admission_check=self.check), config=ConfigSettings(namespace=self.ns),
                        api=ApiRetrySettings(backoffs=(0.05, 0.1, 0.2, 0.4), request_timeout=5.0),
                        watch=WatchSettings(timeout_seconds=20, error_backoffs=(0.05, 0.1, 0.2)),
                        decisions=DecisionSettings(error_requeue_seconds=(0.1, 0.2, 0.5), write_workers=self.cfg.write_workers))

    # ------------------------------------------------------------------ the controller's life

    def _start(self, crash_rate: float) -> None:
        if self.cfg.replicas:
            while len(self._replicas) < 2:
                self._start_replica(crash_rate)
            return
        self._restarts += 1
        if self.cfg.process:
            self._spawn()
            return
        port = KubePort(_client(self.proxy.url, self.token), settings=self.settings().api)
        self._port = CrashingPort(port, random.Random(self.rng.random()), crash_rate)
        self._ctrl = self.controller_factory(self._port, settings=self.settings(), recorder=self.recorder,
                                             identity=f"chaos-{self.ns}-{self._restarts}")
        self._ctrl.start()

    def _start_replica(self, crash_rate: float) -> None:
        """A replica as ``atoll run`` wires one: an elector on the Lease, and a controller writing
        through a port fenced by the elector's term; both ports die together when it is killed."""
        self._restarts += 1
        identity = f"chaos-{self.ns}-{self._restarts}"
        api = _client(self.proxy.url, self.token, identity)
        rng = random.Random(self.rng.random())
        lease_kube = KubePort(api, settings=self.settings().api.model_copy(update={"backoffs": ()}))
        lease_port = CrashingPort(lease_kube, rng, 0.0)
        elector = LeaderElector(lease_port, namespace=self.ns, identity=identity, settings=self._lease)
        lease_kube.budget = elector.round_budget
        ctrl_port = CrashingPort(KubePort(api, settings=self.settings().api, fence=elector.write_window), random.Random(rng.random()),
                                 crash_rate)
        ctrl = self.controller_factory(ctrl_port, settings=self.settings(), recorder=self.recorder, identity=identity,
                                       lease_term=lambda: elector.term)
        stop = threading.Event()
        ctrl.start(leading=False)  # a warm standby, as `atoll run` starts one
        thread = threading.Thread(target=elector.run, args=(stop, ctrl.lead, lambda: ctrl.stop(timeout=2.0)), daemon=True,
                                  name=f"elector-{identity}")
        self._replicas.append(_Replica(identity, ctrl, elector, (lease_port, ctrl_port), stop, thread))
        thread.start()

    def _kill_replica(self, rep: _Replica, *, count: bool = True) -> None:
        """As SIGKILL: both of its ports die at once (no release of the Lease), then its threads end."""
        was_leader = rep.elector.is_leader  # before its elector's thread winds down
        for port in rep.ports:
            port.kill()
        rep.stop.set()
        rep.thread.join(timeout=5.0)
        rep.ctrl.stop(timeout=2.0)
        if count:
            self.result.kills["leader" if was_leader else "standby"] += 1
            self.result.kills.update(Counter({k: v for k, v in rep.ports[1].crashes.items() if k != "random-time"}))
        self._replicas.remove(rep)

    def _replica_tick(self, *, chaos: bool = True) -> None:
        """Restart the dead, kill the leader at ``kill_rate`` (``chaos``), and look for two valid
        terms at once. Also while settling: a replica that could not renew in time steps down and
        ends, and is restarted, as its pod would be."""
        for rep in list(self._replicas):
            if any(p.dead.is_set() for p in rep.ports) or not rep.thread.is_alive():
                self._kill_replica(rep, count=chaos)
        valid = [rep for rep in self._replicas if rep.elector.valid()]
        if len(valid) > 1:
            self.result.dual_leaders += 1
            self.result.violations.append(f"two valid leaders at once: {', '.join(r.identity for r in valid)}")
        for rep in valid:
            if rep.elector.term is not None and rep.elector.term not in self._terms_seen:
                self._terms_seen.add(rep.elector.term)
                self.result.takeovers += 1
        leader = next((rep for rep in self._replicas if rep.elector.is_leader), None)
        if chaos and leader is not None and self.rng.random() < self.cfg.kill_rate:
            self._kill_replica(leader)
        self._start(self.cfg.crash_rate if chaos else 0.0)

    def _spawn(self) -> None:
        """``atoll run`` through the proxy; its decision records (stdout) go to a file per process."""
        kubeconfig = self._dir / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "chaos",
            "clusters": [{"name": "chaos", "cluster": {"server": self.proxy.url}}],
            "users": [{"name": "chaos", "user": {"token": self.token}}],
            "contexts": [{"name": "chaos", "context": {"cluster": "chaos", "user": "chaos"}}]}))
        with open(self._dir / f"records-{self._restarts}.jsonl", "wb") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from admission.cli import main; sys.exit(main())", "run", "--kubeconfig", str(kubeconfig), "--namespace", self.ns,
                 "--admission-check", self.check, "--metrics-port", "0", "--health-port", "0", "--no-leader-elect",
                 "--identity", f"chaos-{self.ns}-{self._restarts}"],
                stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def _records(self) -> list[dict[str, Any]]:
        lines = self.records.getvalue().splitlines()
        for path in sorted(self._dir.glob("records-*.jsonl")):
            lines += path.read_text(errors="replace").splitlines()
        out = []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut by SIGKILL
                continue
            if isinstance(rec, dict) and rec.get("event") == "decision":
                out.append(rec)
        return out

    def _kill(self, *, count: bool = True) -> None:
        """Kill the controller where it stands; ``count=False`` for the shutdowns around the settle phase."""
        for rep in list(self._replicas):
            self._kill_replica(rep, count=count)
        if self._proc is not None:
            if self._proc.poll() is None:
                os.kill(self._proc.pid, signal.SIGKILL)
                self.result.kills["sigkill"] += count
            self._proc.wait()
            self._proc = None
        if self._port is not None:
            self._port.kill()
            self.result.kills.update(self._port.crashes if count else Counter({k: v for k, v in self._port.crashes.items()
                                                                                if k != "random-time"}))
        if self._ctrl is not None:
            self._ctrl.stop(timeout=2.0)
        self._ctrl, self._port = None, None

    # ------------------------------------------------------------------ the run

    def workloads(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, "workloads")["items"]
        return out

    def _finish(self, wl: dict[str, Any]) -> None:
        self.scheduler.stop_pods(wl, "Succeeded")
        self.kueue.actor.finish(self.ns, wl["metadata"]["name"])

    def _tick(self, *, bind: bool) -> list[dict[str, Any]]:
        wls = self.workloads()
        self.kueue.tick(wls, self.scheduler.stop_pods)
        if bind:
            now = self.workloads()
            self.scheduler.fail(now)
            self.scheduler.tick(now, self._finish)
        return wls

    def run(self) -> RunResult:
        c = self.cfg
        self.install()
        started = time.monotonic()
        self.proxy.enabled = True
        while time.monotonic() - started < c.seconds:
            if c.replicas:
                self._replica_tick()
            elif self._proc is not None and (self._proc.poll() is not None or self.rng.random() < c.kill_rate):
                self._kill()
            elif self._ctrl is None and self._proc is None:
                self._start(c.crash_rate)
            elif self._port is not None and (self._port.dead.is_set() or self.rng.random() < c.kill_rate):
                self._kill()
            self._tick(bind=True)
            time.sleep(0.05)
        self.result.chaos_seconds = time.monotonic() - started
        self._settle()
        self._audit()
        return self.result

    def _settle(self) -> None:
        """Faults off, no new reservations, no more binding: a clean controller decides what is left."""
        self._kill(count=False)
        self.proxy.enabled = self.cfg.settle_faults
        self.kueue.reserving = False
        self._lease = SETTLE_LEASE
        self._start(0.0)
        started = time.monotonic()
        quiet_since = progress_at = started
        left = None
        while time.monotonic() - progress_at < SETTLE_QUIET_S and time.monotonic() - started < SETTLE_MAX_S:
            if self.cfg.replicas:
                self._replica_tick(chaos=False)
            wls = self._tick(bind=False)
            pending = [wl for wl in wls if actionable(wl, self.check) or (entry_of(wl, self.check) or {}).get("state") in ("Retry", "Rejected")
                       and not _evicted(wl)]
            if left is None or len(pending) < left:
                progress_at = time.monotonic()
            left = len(pending)
            if pending:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= self.cfg.settle_seconds:
                break
            time.sleep(0.05)
        self._kill(count=False)

    # ------------------------------------------------------------------ the audit

    def _audit(self) -> None:
        r = self.result
        wls = self.workloads()
        r.lost = sum(actionable(wl, self.check) for wl in wls)
        r.admissions = self.kueue.admissions
        r.preemptions = self.kueue.preemptions
        r.bound, r.bound_on_others_plan = self.scheduler.bound, self.scheduler.on_planned_of_others
        r.pods_failed, r.replacements_bound = self.scheduler.failed, self.scheduler.replacements_bound
        records = self._records()
        r.decisions = len(records)
        per_uid = Counter(str(rec["uid"]) for rec in records if rec.get("namespace") == self.ns)
        r.duplicate_decisions = sum(max(0, n - self.kueue.reservations[uid]) for uid, n in per_uid.items())
        if self.cfg.replicas:  # one writer per lease term, and no write outside a term
            writers: dict[int, set[str]] = {}
            for rec in records:
                if rec.get("namespace") != self.ns:
                    continue
                if rec.get("lease_term") is None:
                    r.dual_leaders += 1
                    r.violations.append(f"{rec.get('controller')} wrote decision {rec.get('decision_id')} holding no lease term")
                    continue
                writers.setdefault(int(rec["lease_term"]), set()).add(str(rec.get("controller")))
            for term, who in sorted(writers.items()):
                if len(who) > 1:
                    r.dual_leaders += len(who) - 1
                    r.violations.append(f"lease term {term} written by {sorted(who)}")
            timeline = self.proxy.timeline[self._timeline_from:]
            r.writes_received = sum(1 for w in timeline if not w.lease and w.agent.startswith(f"{AGENT}chaos-{self.ns}-"))
            late = writes_outside_term(timeline, f"chaos-{self.ns}-")
            r.writes_outside_term = len(late)
            r.writes_answered_late = writes_answered_late(timeline, f"chaos-{self.ns}-")
            r.violations.extend(late[:5])

        ctrl = Controller(KubePort(self.api), settings=self.settings(), recorder=Recorder(io.StringIO()))
        ctrl.sync()
        snap = ctrl.cache.snapshot(self.flavor)
        names = list(snap.node_names)
        alloc = {n: ctrl.cache.nodes[n].allocatable for n in names}
        used = {n: ctrl.cache.usage.get(n, ResourceVector()) for n in names}
        ledger_owed = ctrl.ledger.owed(snap)
        own = self.owed_from_api(wls)
        for v in check_invariant(alloc, used, ledger_owed):
            r.violations.append(f"ledger {v.kind}: {v.message}")
            r.double_booked += v.kind == "overbooked"
        for v in check_invariant(alloc, used, own, check_witness=False):
            r.violations.append(f"api {v.kind}: {v.message}")
            r.double_booked += v.kind == "overbooked"
        r.unplaceable_owed = unplaceable_pods(alloc, used, own)
        if r.violations:
            r.violations.append(self.describe(wls, used))
        if sum(o.pods for o in ledger_owed) != sum(o.pods for o in own):
            r.ledger_mismatch += 1
            r.violations.append(f"ledger owes {sum(o.pods for o in ledger_owed)} pods, the API says {sum(o.pods for o in own)}")

    def describe(self, wls: list[dict[str, Any]], used: dict[str, ResourceVector]) -> str:
        """The state behind a violation: each admitted Workload's selector, plan and bound pods."""
        pods = self.scheduler.pods()
        parts = [f"gpus used {{{', '.join(f'{n}: {u.gpu}' for n, u in sorted(used.items()))}}}"]
        for wl in wls:
            if not admitted(wl, self.check):
                continue
            for u in (entry_of(wl, self.check) or {}).get("podSetUpdates") or []:
                ann = u.get("annotations") or {}
                on = sorted(p["spec"].get("nodeName", "") for p in pods
                            if (p["metadata"].get("annotations") or {}).get("atoll.dev/decision-id") == ann.get("atoll.dev/decision-id"))
                parts.append(f"{wl['metadata']['name']} {gpus_of(wl)} GPUs selector={u.get('nodeSelector')} "
                             f"planned={ann.get('atoll.dev/planned-nodes')} pods on {on}")
        return "; ".join(parts).replace(f"{self.ns}-", "")

    def owed_from_api(self, wls: list[dict[str, Any]]) -> list[OwedPods]:
        """Owed pods read straight from the API, without the controller's code: per admitted
        PodSet, its admitted count minus the pods of its decision bound and unfinished, minus
        those that succeeded (a failed pod's slot is owed until its replacement binds), in the
        domain its nodeSelector allows. They prefer their planned nodes, and a pending
        replacement the node its failed pod ran on, where it binds: the greedy ``place_owed``
        then does not hand that replacement another Workload's planned node (a failure gives a
        wide claim back over narrow ones admitted meanwhile, where a greedy first pick can miss
        an assignment that exists)."""
        pods = self.scheduler.pods()
        out = []
        for wl in wls:
            if not admitted(wl, self.check):
                continue
            counts = {a["name"]: int(a.get("count", 0)) for a in (wl["status"].get("admission") or {}).get("podSetAssignments") or []}
            for ps in wl["spec"]["podSets"]:
                update = next((u for u in (entry_of(wl, self.check) or {}).get("podSetUpdates") or [] if u["name"] == ps["name"]), None)
                if update is None:
                    continue
                ann = update.get("annotations") or {}
                decision = ann.get("atoll.dev/decision-id", "")
                mine = [p for p in pods if decision_of(p) == (decision, ps["name"])]
                running = sum(1 for p in mine if p["spec"].get("nodeName") and phase_of(p) not in FINISHED)
                succeeded = sum(1 for p in mine if phase_of(p) == "Succeeded")
                owed = counts.get(ps["name"], int(ps["count"])) - running - succeeded
                if owed <= 0:
                    continue
                selector = {**(ps["template"]["spec"].get("nodeSelector") or {}), **(update.get("nodeSelector") or {})}
                domain = tuple(n.name for n in self.nodes if all(n.labels.get(k) == v for k, v in selector.items()))
                per_pod_gpu = gpus_of({"spec": {"podSets": [{**ps, "count": 1}]}})
                planned = tuple(decode_planned(ann["atoll.dev/planned-nodes"]).items()) if ann.get("atoll.dev/planned-nodes") else ()
                replacing = Counter(node for p in mine if not p["spec"].get("nodeName") and phase_of(p) not in FINISHED
                                    and (node := failed_node_of(p)) is not None)
                planned = tuple(replacing.items()) + planned
                out.append(OwedPods(f"{self.ns}/{wl['metadata']['name']}", ps["name"], owed,
                                    ResourceVector(per_pod_gpu, 1000, 0, 1), domain, planned))
        return out

    def cleanup(self) -> None:
        """Pods, Workloads and nodes of the run go (forced), so later runs list only their own."""
        for p in self.core.list_namespaced_pod(self.ns).items:
            self.core.delete_namespaced_pod(p.metadata.name, self.ns, grace_period_seconds=0)
        for wl in self.workloads():
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, "workloads", wl["metadata"]["name"])
        for n in self.nodes:
            self.core.delete_node(n.name)


def unplaceable_pods(alloc: dict[str, ResourceVector], used: dict[str, ResourceVector], owed: list[OwedPods]) -> int:
    """Owed pods that no assignment (``place_owed``, as ``check_invariant`` builds it) fits in their domain."""
    names = sorted(alloc)
    index = {n: i for i, n in enumerate(names)}
    free = np.maximum(np.array([alloc[n].as_tuple() for n in names], dtype=np.int64).reshape(len(names), 4)
                      - np.array([used.get(n, ResourceVector()).as_tuple() for n in names], dtype=np.int64).reshape(len(names), 4), 0)
    demands = [Demand(o.pods, pod_shape(o.per_pod), tuple((index[n], k) for n, k in o.planned if n in index and n in o.domain),
                      np.array(sorted(index[n] for n in o.domain if n in index), dtype=np.int64)) for o in owed]
    return sum(place_owed(free, demands)[1])


def _evicted(wl: dict[str, Any]) -> bool:
    return is_true(wl, "Evicted")


def run_once(api: client.ApiClient, token: str, proxy: FaultProxy, ns: str, config: RunConfig,
             controller_factory: Callable[..., Controller] = Controller) -> RunResult:
    """One run, its audit, and its cleanup; the controller's threads that die by ``Crash`` die quietly."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not None and issubclass(args.exc_type, Crash):
            return
        previous(args)

    threading.excepthook = hook
    run = ChaosRun(api, token, proxy, ns, config, controller_factory)
    before = Counter(proxy.injected)
    try:
        result = run.run()
    finally:
        threading.excepthook = previous
        run._kill(count=False)
    run.cleanup()
    proxy.clear_timeline()  # audited; the next run starts its own
    shutil.rmtree(run._dir, ignore_errors=True)
    result.faults = Counter(proxy.injected) - before
    return result

