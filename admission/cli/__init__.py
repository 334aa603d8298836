"""The ``atoll`` command. Each subcommand lives in its own module, imported only when used,
so ``atoll place`` does not pay for the Kubernetes client and ``atoll run`` not for plotting."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# subcommand → (module with ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("admission.cli._simulate", "replay a workload on a cluster model, all policies side by side"),
    "place": ("admission.cli._place", "what-if: where would this Workload/Job go on this cluster model"),
    "run": ("admission.cli._run", "run the admission-check controller against a cluster"),
    "audit": ("admission.cli._audit", "query decision records"),
    "explain": ("admission.cli._explain", "why a Workload waits, or why it was placed where it was"),
    "bench": ("admission.cli._bench", "benchmarks: finder, controller"),
    "baseline": ("admission.cli._baseline", "run a baseline placement (kueue-bestfit) on a scenario"),
}


def _usage() -> str:
    lines = ["usage: atoll <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "atoll <command> --help shows a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    name = args[0]
    if name not in COMMANDS:
        print(f"atoll: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    code: int = module.main(args[1:])
    return code


if __name__ == "__main__":
    raise SystemExit(main())
