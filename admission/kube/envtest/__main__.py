"""``python -m admission.kube.envtest ensure``: make sure kube-apiserver, etcd and Kueue's CRDs are
here (CI runs it before the tests, so a bare machine needs no manual step), and print where they are.
With ``ATOLL_SKIP_APISERVER=1`` a missing piece is reported and not an error (the test run then
skips the apiserver tests loudly)."""

from __future__ import annotations

import os
import sys

from admission.kube.envtest._binaries import EnvtestError, ensure_binaries
from admission.kube.envtest._crds import ensure_kueue_crds

_USAGE = "usage: python -m admission.kube.envtest ensure"


def main(argv: list[str]) -> int:
    if argv != ["ensure"]:
        print(_USAGE, file=sys.stderr)
        return 2
    try:
        found = ensure_binaries()
        crds = ensure_kueue_crds()
    except EnvtestError as exc:
        if os.environ.get("ATOLL_SKIP_APISERVER") == "1":
            print(f"envtest: NOT READY, and ATOLL_SKIP_APISERVER=1 skips the apiserver tests: {exc}", file=sys.stderr)
            return 0
        print(f"envtest: {exc}", file=sys.stderr)
        return 1
    print(f"kube-apiserver {found.version}: {found.kube_apiserver}\netcd: {found.etcd}\nKueue CRDs: {crds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
