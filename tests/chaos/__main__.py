"""``python -m tests.chaos --runs 200 --fault-rate 0.2 --seed 1 [--format json]``: start a real
apiserver, run the chaos runs, print one summary line; exit 1 when any invariant broke."""

from __future__ import annotations

import argparse
import sys

import structlog

from tests.chaos.config import RunConfig
from tests.chaos.proxy import FAULTS
from tests.chaos.runner import run_many
from tests.envtest import (
    ApiServer,
    find_binaries,
    install_kueue_crds,
    kueue_crd_dir,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--fault-rate", type=float, default=0.2, help="share of API requests answered with a fault")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=RunConfig.seconds, help="chaos phase per run (s)")
    ap.add_argument("--workloads", type=int, default=RunConfig.workloads)
    ap.add_argument("--shapes", choices=("nested", "flat"), default="nested",
                    help="nested: node-level domains inside other Workloads' cliques; flat: every domain a whole clique")
    ap.add_argument("--process", action="store_true",
                    help="run the controller as an `atoll run` process killed with SIGKILL (slower: each start imports and warms up)")
    ap.add_argument("--replicas", action="store_true",
                    help="two controllers electing a leader on a Lease; the leader is the one killed, and the audit counts dual leaders")
    ap.add_argument("--kill-rate", type=float, default=RunConfig.kill_rate, help="chance per 50 ms tick of killing the controller")
    ap.add_argument("--fail-rate", type=float, default=RunConfig.fail_rate,
                    help="chance per 50 ms tick that a running pod fails and its job controller creates a replacement")
    ap.add_argument("--faults", default="",
                    help=f"comma-separated: draw only these faults (of {', '.join(FAULTS)}; the opt-in ones only when named)")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    ap.add_argument("--verbose", action="store_true", help="a line per run on stderr")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs: at least 1")
    faults = tuple(f for f in args.faults.split(",") if f) or None
    unknown = sorted(set(faults or ()) - set(FAULTS))
    if unknown:
        ap.error(f"--faults: unknown fault {', '.join(unknown)}; choose from {', '.join(FAULTS)}")
    # the controllers' own logs go nowhere (decision records have their own stream, read back by the audit)
    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())
    crds, binaries = kueue_crd_dir(), find_binaries()
    if crds is None or binaries is None:
        print("no kube-apiserver or Kueue CRDs: run `python -m tests.envtest ensure` (make envtest)", file=sys.stderr)
        return 2
    config = RunConfig(seed=args.seed, fault_rate=args.fault_rate, seconds=args.seconds, workloads=args.workloads,
                       shapes=args.shapes, process=args.process, kill_rate=args.kill_rate, replicas=args.replicas,
                       fail_rate=args.fail_rate, faults=faults)

    def progress(i: int, r: object) -> None:
        if args.verbose:
            print(f"run {i}: {r}", file=sys.stderr)

    with ApiServer(binaries) as server:
        install_kueue_crds(server.api_client(), crds)
        summary = run_many(server, args.runs, config, progress=progress)
    print(summary.json() if args.format == "json" else summary.line())
    return 0 if summary.clean else 1


if __name__ == "__main__":
    sys.exit(main())
