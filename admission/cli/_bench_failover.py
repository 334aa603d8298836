"""``atoll bench failover``: how long a failover takes, to the new leader's first decision, with a
warm standby and with a cold one.

For each mode it starts a real kube-apiserver with Kueue's CRDs and a GB200-like fabric (the
same objects as ``atoll bench controller``), submits a backlog of Workloads, and runs two
``atoll run`` processes electing a leader on the Lease (the chart's two replicas, default lease
terms). Once the leader has decided the backlog, it is killed with SIGKILL and one more
Workload is submitted; the run measures, from the kill:

- ``takeover_s``: until the Lease names the standby (the lease duration, mostly);
- ``first_decision_s``: until the standby's decision for that Workload is written;
- ``after_takeover_s``: the difference, what the standby spends before it can decide (a cold
  standby lists every resource and compiles its kernels then; a warm one did that while it
  waited).

Each mode repeats ``--repeat`` times (a fresh standby each time). With ``--goal-seconds`` the
command exits 1 when the warm standby's worst ``after_takeover_s`` misses it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from admission.cli._args import Parser, number, whole

__all__ = ["main", "run_failover"]

LEASE = "atoll-controller"


def _replica(kubeconfig: Path, ns: str, identity: str, warm: bool, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", "import sys; from admission.cli import main; sys.exit(main())", "run", "--kubeconfig", str(kubeconfig),
             "--namespace", ns, "--admission-check", "atoll-topology", "--metrics-port", "0", "--health-port", "0", "--leader-elect",
             "--warm-standby" if warm else "--no-warm-standby", "--identity", identity, "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=out, stdin=subprocess.DEVNULL)


def _holder(port: Any, ns: str) -> str:
    from admission.kube import LEASES, errors

    try:
        return str((port.get(LEASES, LEASE, ns).get("spec") or {}).get("holderIdentity") or "")
    except errors.NotFound:
        return ""


def _state(port: Any, ns: str, name: str) -> str:
    from admission.kube import WORKLOADS

    entries = (port.get(WORKLOADS, name, ns).get("status") or {}).get("admissionChecks") or []
    return str(next((e.get("state") for e in entries if e.get("name") == "atoll-topology"), ""))


def _wait(what: str, predicate: Any, timeout: float, poll: float = 0.02) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(poll)
    raise TimeoutError(f"{what}: not within {timeout:g}s")


def _one_mode(warm: bool, *, islands: int, per_island: int, backlog: int, repeat: int, standby_seconds: float,
              workdir: Path) -> list[dict[str, Any]]:
    from admission.cli._bench_controller import NS, _install, _install_namespace, _reserve, _workload
    from admission.kube import WORKLOADS, KubePort
    from tests.envtest import ApiServer, ensure_kueue_crds, install_kueue_crds

    crds = ensure_kueue_crds()  # one line naming what is missing and how to provide it
    rows = []
    mode = "warm" if warm else "cold"
    with ApiServer() as api:
        install_kueue_crds(api.api_client(), crds)
        port = KubePort(api.api_client())
        _install(port, islands, per_island, 4)
        _install_namespace(port, NS)

        def submit(name: str) -> None:
            port.create(WORKLOADS, _workload(NS, name, 1, 1, "strict"))
            _reserve(port, NS, name, 1, 1)

        for i in range(backlog):
            submit(f"w{i:05d}")
        procs: list[subprocess.Popen[bytes]] = []
        try:
            leader = _replica(api.kubeconfig_path, NS, f"{mode}-0", warm, workdir / f"{mode}-0.log")
            procs.append(leader)
            _wait("the first leader", lambda: _holder(port, NS) == f"{mode}-0", 120, 0.2)
            _wait("the backlog decided", lambda: all((e := [c for c in (w.get("status") or {}).get("admissionChecks") or []])
                                                     and e[0].get("state") != "Pending"
                                                     for w in port.list(WORKLOADS, namespace=NS).items), 600, 1.0)
            for r in range(1, repeat + 1):
                standby = _replica(api.kubeconfig_path, NS, f"{mode}-{r}", warm, workdir / f"{mode}-{r}.log")
                procs.append(standby)
                time.sleep(standby_seconds)  # the standby has started and, if warm, listed and compiled
                killed = time.monotonic()
                os.kill(leader.pid, signal.SIGKILL)
                leader.wait()
                probe = f"probe-{r}"
                submit(probe)
                took = _wait("the takeover", lambda r=r: _holder(port, NS) == f"{mode}-{r}", 120)
                decided = _wait("the first decision", lambda probe=probe: _state(port, NS, probe) not in ("", "Pending"), 300)
                rows.append({"standby": mode, "nodes": islands * per_island, "workloads": backlog + r,
                             "takeover_s": round(took - killed, 2), "first_decision_s": round(decided - killed, 2),
                             "after_takeover_s": round(decided - took, 2)})
                leader = standby
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return rows


def run_failover(*, islands: int = 32, per_island: int = 18, backlog: int = 500, repeat: int = 2, standby_seconds: float = 20.0,
                 workdir: Path | None = None) -> dict[str, Any]:
    import tempfile

    workdir = workdir or Path(tempfile.mkdtemp(prefix="atoll-failover-"))
    rows = []
    for warm in (True, False):
        rows += _one_mode(warm, islands=islands, per_island=per_island, backlog=backlog, repeat=repeat,
                          standby_seconds=standby_seconds, workdir=workdir)

    def summary(mode: str) -> dict[str, float]:
        mine = [r for r in rows if r["standby"] == mode]
        return {k: round(float(np.median([r[k] for r in mine])), 2) for k in ("takeover_s", "first_decision_s", "after_takeover_s")} \
            | {"worst_after_takeover_s": max(r["after_takeover_s"] for r in mine)}

    return {"runs": rows, "warm": summary("warm"), "cold": summary("cold"), "logs": str(workdir)}


def main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench failover", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--islands", type=whole(1), default=32, help="NVLink islands of 18 nodes (8 per block)")
    p.add_argument("--nodes-per-island", type=whole(1), default=18)
    p.add_argument("--workloads", type=whole(0), default=500, help="Workloads decided before the first failover")
    p.add_argument("--repeat", type=whole(1), default=2, help="failovers per mode")
    p.add_argument("--standby-seconds", type=number(0), default=20.0, help="how long a fresh standby waits before the leader is killed")
    p.add_argument("--goal-seconds", type=number(above=0), default=None,
                   help="exit 1 when a warm standby takes longer than this from takeover to its first decision")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    try:  # the test control plane is test infrastructure: it lives in a clone's tests/, never in the installed package
        from tests.envtest import EnvtestError
    except ImportError:
        print("atoll bench failover: it starts the test control plane of Atoll's repository (tests/envtest): run it from "
              "the root of a clone, after `make envtest`", file=sys.stderr)
        return 1

    try:
        out = run_failover(islands=args.islands, per_island=args.nodes_per_island, backlog=args.workloads, repeat=args.repeat,
                           standby_seconds=args.standby_seconds)
    except (EnvtestError, TimeoutError) as exc:
        print(f"atoll bench failover: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(out))
    else:
        columns = ("standby", "nodes", "workloads", "takeover_s", "first_decision_s", "after_takeover_s")
        print(" | ".join(columns))
        for r in out["runs"]:
            print(" | ".join(str(r[c]) for c in columns))
        for mode in ("warm", "cold"):
            s = out[mode]
            print(f"{mode} standby (median): takeover {s['takeover_s']} s, first decision {s['first_decision_s']} s after the kill, "
                  f"{s['after_takeover_s']} s after the takeover")
    if args.goal_seconds is not None:
        worst = out["warm"]["worst_after_takeover_s"]
        ok = worst <= args.goal_seconds
        print(f"{'PASS' if ok else 'FAIL'} failover: a warm standby decides {worst} s after taking over (goal ≤ {args.goal_seconds:g} s)")
        return 0 if ok else 1
    return 0
