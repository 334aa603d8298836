"""``python -m tests.envtest ensure``: make sure kube-apiserver, etcd and Kueue's CRDs are
here (CI runs it before the tests, so a bare machine needs no manual step), and print where they are.
Where Go is new enough, Atoll's own control plane build is made too even when ``KUBEBUILDER_ASSETS``
names the apiserver: the real-Kueue tier needs its scheduler, controller manager, Kueue, KWOK and JobSet.
With ``ATOLL_SKIP_APISERVER=1`` a missing piece is reported and not an error (the test run then
skips the apiserver tests loudly)."""

from __future__ import annotations

import os
import sys

from tests.envtest._binaries import MIN_GO, EnvtestError, _go_version, ensure_binaries, ensure_current
from tests.envtest._crds import ensure_kueue_crds

_USAGE = "usage: python -m tests.envtest ensure"


def main(argv: list[str]) -> int:
    if argv != ["ensure"]:
        print(_USAGE, file=sys.stderr)
        return 2
    try:
        found = ensure_binaries()
        go = _go_version()
        current = ensure_current() if found.source != "go-modules" and go is not None and go >= MIN_GO else None
        crds = ensure_kueue_crds()
    except EnvtestError as exc:
        if os.environ.get("ATOLL_SKIP_APISERVER") == "1":
            print(f"envtest: NOT READY, and ATOLL_SKIP_APISERVER=1 skips the apiserver tests: {exc}", file=sys.stderr)
            return 0
        print(f"envtest: {exc}", file=sys.stderr)
        return 1
    print(f"{found.describe()}\netcd: {found.etcd}\nKueue CRDs: {crds}")
    for name in ("kube_scheduler", "kube_controller_manager", "kueue", "kwok", "jobset"):
        path = getattr(current or found, name)
        if path is not None:
            print(f"{name.replace('_', '-')}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
