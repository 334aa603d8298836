"""``python -m admission.envtest ensure``: make sure kube-apiserver and etcd are available."""

from __future__ import annotations

import sys

from admission.envtest import EnvtestError, ensure_binaries


def main(argv: list[str]) -> int:
    if argv[:1] != ["ensure"]:
        print("usage: python -m admission.envtest ensure", file=sys.stderr)
        return 2
    try:
        found = ensure_binaries()
    except EnvtestError as exc:
        print(f"envtest: {exc}", file=sys.stderr)
        return 1
    print(f"kube-apiserver: {found.kube_apiserver} ({found.source})\netcd: {found.etcd}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
