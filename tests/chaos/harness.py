"""One chaos run: a small fabric on the real apiserver, the controller behind the fault proxy
(killed and restarted at random points: ``crashing``), Kueue and an adversarial scheduler around
it (running pods fail now and then, and their job controller creates replacements: ``actors``),
then a settle phase and the audit of the final API state (``audit``). ``config`` holds what a
run is asked to do and what it found; ``runner`` runs many.
"""

from __future__ import annotations

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

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
)
from admission.controller._invariant import OwedPods
from admission.kube import ApiRetrySettings, KubePort, LeaderElector
from tests.admission.fabric import BLOCK, CLIQUE, POOL, profiles_doc
from tests.chaos.actors import Kueue, NodeSpec, Scheduler, actionable, entry_of
from tests.chaos.audit import audit, owed_from_api, unplaceable_pods
from tests.chaos.config import LEASE, SETTLE_LEASE, SETTLE_MAX_S, SETTLE_QUIET_S, SHAPES, RunConfig, RunResult
from tests.chaos.crashing import Crash, CrashingPort
from tests.chaos.history import History
from tests.chaos.proxy import FaultProxy
from tests.chaos.terms import AGENT
from tests.kube_objects import (
    GROUP,
    VERSION,
    KueueActor,
    admission_check,
    cluster_queue,
    create_node,
    is_true,
    local_queue,
    manifest,
    node,
    resource_flavor,
    topology,
    workload,
)

__all__ = ["SETTLE_MAX_S", "ChaosRun", "RunConfig", "RunResult", "run_once", "unplaceable_pods"]


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
        self._planted = False
        self.history: History | None = None
        """With ``replicas``: the server's own record of the run's objects, for the term audit."""

    # ------------------------------------------------------------------ setup

    def install(self) -> None:
        c = self.cfg
        self.core.create_namespace(manifest({"metadata": {"name": self.ns}}))
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
        self.core.create_namespaced_config_map(self.ns, manifest({"metadata": {"name": "atoll-policies", "namespace": self.ns},
                                                                  "data": {"profiles.yaml": yaml.safe_dump(doc)}}))
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
        listed = cast(dict[str, Any], self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, "workloads"))
        out: list[dict[str, Any]] = listed["items"]
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
            if self.cfg.plant_failure and not self._planted:
                self._planted = self.scheduler.fail_first(now)
            self.scheduler.tick(now, self._finish)
        return wls

    def run(self) -> RunResult:
        c = self.cfg
        self.install()
        if c.replicas:
            self.history = History(KubePort(client.ApiClient(self.api.configuration)), self.ns, self.check).start()
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
        audit(self)

    def owed_from_api(self, wls: list[dict[str, Any]]) -> list[OwedPods]:
        return owed_from_api(self, wls)


    def cleanup(self) -> None:
        """Pods, Workloads and nodes of the run go (forced), so later runs list only their own."""
        for p in self.core.list_namespaced_pod(self.ns).items:
            assert p.metadata is not None and p.metadata.name
            self.core.delete_namespaced_pod(p.metadata.name, self.ns, grace_period_seconds=0)
        for wl in self.workloads():
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, "workloads", wl["metadata"]["name"])
        for n in self.nodes:
            self.core.delete_node(n.name)


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
        if run.history is not None:
            run.history.stop()
    run.cleanup()
    proxy.clear_timeline()  # audited; the next run starts its own
    shutil.rmtree(run._dir, ignore_errors=True)
    result.faults = Counter(proxy.injected) - before
    return result

