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
    "queue": ("admission.cli._queue", "the Workloads waiting on Atoll's check, and why, per domain"),
    "yields": ("admission.cli._yields", "Workloads that gave their quota back; --end reactivates them"),
    "bench": ("admission.cli._bench", "benchmarks: finder, simulate, decide, controller, kueue, quality, …"),
    "baseline": ("admission.cli._baseline", "run a baseline placement (kueue-bestfit) on a scenario"),
}


def _usage() -> str:
    lines = ["usage: atoll <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "atoll <command> --help shows a command's options."]
    return "\n".join(lines)


KERNEL_COMMANDS = frozenset({"simulate", "place", "bench"})
"""Commands that run the numba placement kernels (compiled on first use, then cached)."""


def kernels_cached() -> bool:
    """Whether numba has cached the placement kernels: its index files sit in ``__pycache__``
    beside ``topology/_kernels.py``, or under ``NUMBA_CACHE_DIR`` when that is set."""
    import os
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("topology._kernels")
    if spec is None or spec.origin is None:
        return True
    custom = os.environ.get("NUMBA_CACHE_DIR")
    places = [Path(custom)] if custom else [Path(spec.origin).parent / "__pycache__", Path.home() / ".cache" / "numba"]
    return any(next(p.rglob("_kernels.*.nbi"), None) is not None for p in places if p.is_dir())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    name = args[0]
    if name not in COMMANDS:
        from admission.cli._args import suggest

        print(f"atoll: unknown command {name!r}{suggest(name, list(COMMANDS))} (atoll --help lists the commands)", file=sys.stderr)
        return 2
    withdraw = None
    if name in KERNEL_COMMANDS and not any(a in ("-h", "--help") for a in args) and not kernels_cached():
        from admission.cli._args import announce_at_first_compile

        withdraw = announce_at_first_compile("atoll: compiling the placement kernels (about 20 s, once; later runs reuse the cache)")
    module = importlib.import_module(COMMANDS[name][0])
    try:
        code: int = module.main(args[1:])
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (atoll audit | head): stop quietly, as a shell tool does
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141  # 128 + SIGPIPE, what the shell reports for a tool killed by a closed pipe
    finally:
        if withdraw is not None:
            withdraw()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
