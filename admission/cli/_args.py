"""The argument parser every ``atoll`` command uses: a mistake gets one line naming the flag,
with the nearest real option ("did you mean --occupancy?"), not a page of usage."""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

__all__ = ["PARKING", "Parser", "announce_at_first_compile", "counted", "number", "quota_factor", "seed", "suggest", "whole"]

PARKING: dict[str, bool | None] = {"profile": None, "on": True, "off": False}
"""``--parking`` of ``atoll simulate`` and ``atoll bench quality`` → ``SimSettings.parking``: the
override of each profile's ``queueing.parkWaiting`` (None: no override)."""

def quota_factor(text: str) -> float:
    """``--quota-factor`` of ``atoll simulate`` and ``atoll bench quality``: each ClusterQueue's
    nominal GPU quota as this multiple of its flavor's healthy GPUs (``SimSettings.quota_factor``);
    a number of at least 1, else argparse's one-line error naming the flag."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (a multiple of the flavor's GPUs, at least 1, e.g. 1.5)") from None
    if not value >= 1.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is below 1 or not finite (quota below the flavor's GPUs would leave healthy GPUs "
                                         "no Workload may use); give a factor of at least 1, e.g. 1.5")
    return value


def seed(text: str) -> int:
    """``--seed``: a whole number of at least 0 (the first of the run's seeds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (the first seed, e.g. 0)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0; seeds start at 0")
    return value


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` (up to ``high``). A bad value is argparse's
    one line naming the flag: ``--pods: expected a whole number ≥ 1, got 0``."""
    takes = f"a whole number ≥ {low}" if high is None else f"a whole number from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {takes}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {takes}, got {value}")
        return value

    return parse


def number(low: float | None = None, high: float | None = None, *, above: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a finite number ≥ ``low`` (or > ``above``) and ≤ ``high``; a bad value is
    one line naming the flag: ``--load: expected a number > 0, got -3.0``."""
    if low is not None and high is not None:
        takes = f"a number from {low:g} to {high:g}"
    else:
        bounds = [f"> {above:g}" if above is not None else f"≥ {low:g}" if low is not None else "", f"≤ {high:g}" if high is not None else ""]
        takes = " and ".join(b for b in bounds if b)
        takes = f"a number {takes}" if takes else "a finite number"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {takes}, got {text!r}") from None
        if not math.isfinite(value) or (above is not None and not value > above) or (low is not None and not value >= low) \
                or (high is not None and not value <= high):
            raise argparse.ArgumentTypeError(f"expected {takes}, got {text}")
        return value

    return parse


def announce_at_first_compile(line: str) -> Callable[[], None]:
    """Print ``line`` to stderr when numba starts compiling the first function of this run, and
    never again. A note such as "compiling the kernels" belongs to a compile that happens: a
    mistyped flag, a missing file or a bad row gets its one error line alone, and a run that finds
    the kernels in numba's cache prints nothing. Returns the call that withdraws the note when the
    run ends without a compile. (The simulator's sweep compiles in its own process before it forks
    workers, so the note is printed once, not once per worker.)"""
    from numba.core import event

    pending = [True]

    class _Once(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            withdraw()
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

        def on_end(self, ev: event.Event) -> None:
            pass

    once = _Once()
    event.register("numba:compile", once)  # type: ignore[no-untyped-call]

    def withdraw() -> None:
        if pending[0]:
            pending[0] = False
            event.unregister("numba:compile", once)  # type: ignore[no-untyped-call]

    return withdraw


def counted(n: int, noun: str) -> str:
    """``1 seed``, ``5 seeds``: a count and its noun, plural when the count is not one."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def suggest(word: str, choices: list[str]) -> str:
    """`` (did you mean X?)`` for the nearest of ``choices``, else ``""``."""
    near = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {near[0]}?" if near else ""


def _plain(message: str) -> str:
    """argparse's wording of a bad value, as the rest of Atoll's errors read: the flag first, then
    what it takes: ``--seed: expected a whole number, got 'x'`` for ``argument --seed: invalid int value: 'x'``."""
    flag, sep, rest = message.removeprefix("argument ").partition(": ")
    if not message.startswith("argument ") or not sep:
        return message
    flag = flag.split("/")[-1]  # "-h/--help": the long form
    kind = re.fullmatch(r"invalid (int|float) value: (.*)", rest)
    if kind:
        return f"{flag}: expected {'a whole number' if kind.group(1) == 'int' else 'a number'}, got {kind.group(2)}"
    choice = re.fullmatch(r"invalid choice: (.*) \(choose from (.*)\)", rest)
    if choice:
        return f"{flag}: expected one of {choice.group(2)}, got {choice.group(1)}"
    return f"{flag}: {rest}"


class Parser(argparse.ArgumentParser):
    _argv: list[str] = []

    def parse_args(self, args: Sequence[str] | None = None, namespace: None = None) -> argparse.Namespace:  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        if message.startswith("the following arguments are required:"):
            # argparse checks required options before unknown ones: a misspelt flag would be
            # reported as the option it was meant to be missing
            unknown = [w for w in self._argv if w.startswith("--") and w.split("=", 1)[0] not in options]
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}"
        message = _plain(message)
        hint = ""
        if message.startswith("unrecognized arguments:"):
            flags = [w for w in message.split(":", 1)[1].split() if w.startswith("-")]
            hint = next((h for h in (suggest(f.split("=", 1)[0], options) for f in flags) if h), "")
        sys.stderr.write(f"{self.prog}: {message}{hint} ({self.prog} --help lists the options)\n")
        raise SystemExit(2)
