"""Reading the YAML documents users write, with errors that name the file and the field.

Cluster models, profiles, Kueue scenarios and workload files share one reading path, so a typo
reads the same wherever it is made: ``<source>: <key path>: <problem>``, every problem listed.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

__all__ = ["describe_validation_error", "describe_yaml_error", "key_path", "load_yaml_model", "read_yaml_file", "read_yaml_text"]

ModelT = TypeVar("ModelT", bound=BaseModel)

# Error types whose rejected input says nothing the message does not already say.
_QUIET_INPUT = frozenset({"extra_forbidden", "value_error", "missing", "assertion_error"})


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """A YAML syntax error on one line: ``not valid YAML at line 11, column 14: <problem> (<context>)``.

    PyYAML's own text spans several lines and quotes the document; the line, column and problem
    are what a reader needs to find the typo."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return "not valid YAML: " + " ".join(str(exc).split())
    def at(mark: yaml.Mark | None) -> str:
        return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""

    text = exc.problem or exc.context or str(exc)
    if exc.problem and exc.context:
        text += f" ({exc.context}{at(exc.context_mark)})"
    return f"not valid YAML{at(exc.problem_mark or exc.context_mark)}: " + " ".join(text.split())


def read_yaml_text(text: str, source: str, error: type[Exception]) -> Any:
    """Parse YAML; a syntax error becomes ``error`` naming ``source``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{source}: {describe_yaml_error(exc)}") from exc


def read_yaml_file(path: str | Path, error: type[Exception]) -> Any:
    """Read and parse a YAML file; unreadable or malformed files become ``error`` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return read_yaml_text(text, str(path), error)


def key_path(loc: Sequence[int | str], data: Any = None) -> str:
    """A pydantic location (which carries the aliases users write) as a key path: ``flavors[gb200].levels[0]``.

    A list item with a ``name`` is shown by that name, since that is what a reader searches for."""
    parts: list[str] = []
    cur = data
    for item in loc:
        if isinstance(item, int):
            named = cur[item] if isinstance(cur, list) and 0 <= item < len(cur) else None
            name = named.get("name") if isinstance(named, dict) else None
            parts.append(f"[{name}]" if isinstance(name, str) and name else f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
        try:
            cur = cur[item]
        except (KeyError, IndexError, TypeError):
            cur = None
    return "".join(parts)


# What a field of each pydantic error type takes, said as what to write there.
_EXPECTED = {
    "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
    "float_parsing": "a number", "float_type": "a number", "finite_number": "a finite number",
    "bool_parsing": "true or false", "bool_type": "true or false",
    "string_type": "a string", "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
}
_BOUNDS = {"greater_than_equal": ("ge", "≥"), "greater_than": ("gt", ">"), "less_than_equal": ("le", "≤"), "less_than": ("lt", "<")}


def _expected(problem: Any) -> str | None:
    """What the field takes, from the error's ``type`` and ``ctx``: ``a whole number``, ``a number ≥ 1``,
    ``'weigh' or 'take'``; None for an error whose message is already the fix."""
    kind, ctx = problem["type"], problem.get("ctx") or {}
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    if kind == "literal_error" and "expected" in ctx:
        return str(ctx["expected"])
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        bound = ctx.get(key)
        if not isinstance(bound, (int, float)):
            return None
        return f"a number {sign} {int(bound) if float(bound).is_integer() else bound}"
    return None


def describe_validation_error(source: str, err: ValidationError, data: Any = None, model: type[BaseModel] | None = None) -> str:
    """One line per problem: the source, the key path, what the field takes (``expected …``) or what is
    wrong, and what was given; an unknown key of ``model``'s schema says the nearest known key and lists them."""
    lines = []
    for problem in err.errors():
        kind = problem["type"]
        expected = _expected(problem)
        msg = ("unknown key" + _known_keys_hint(model, problem["loc"]) if kind == "extra_forbidden"
               else "missing: a required key" if kind == "missing"
               else f"expected {expected}" if expected else str(problem["msg"]).removeprefix("Value error, "))
        given, loc = problem.get("input"), problem["loc"]
        if len(loc) >= 2 and loc[-1] == "[key]":  # a mapping's key failed: the key is what was given
            loc, msg = loc[:-2], f"key {given!r}: {msg}"
        elif kind not in _QUIET_INPUT and not isinstance(given, (dict, list)):
            msg += f", got {given!r}" if expected else f" (got {given!r})"
        where = key_path(loc, data)
        lines.append(f"{source}: {where}: {msg}" if where else f"{source}: {msg}")
    return "\n".join(lines)


def _known_keys_hint(model: type[BaseModel] | None, loc: Sequence[int | str]) -> str:
    """``; did you mean 'x'? (known: …)`` for an unknown key at ``loc`` of ``model``, or ''."""
    cur: Any = model
    skip = False
    for item in loc[:-1]:
        if skip:  # a key of a mapping or an index of a list of models: the model stays
            skip = False
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return ""
        field = next((f for name, f in cur.model_fields.items() if item in (name, _written(name, f))), None)
        if field is None:
            return ""
        cur = field.annotation
        while cur is not None and not (isinstance(cur, type) and issubclass(cur, BaseModel)):  # Optional, dict[str, M], list[M]
            if get_origin(cur) in (dict, list):
                skip = True
            inner = [a for a in get_args(cur) if a is not type(None)]
            cur = inner[-1] if inner else None
    if skip or not (isinstance(cur, type) and issubclass(cur, BaseModel)):
        return ""
    known = sorted(_written(name, f) for name, f in cur.model_fields.items())
    near = difflib.get_close_matches(str(loc[-1]), known, n=1)
    return (f"; did you mean {near[0]!r}?" if near else "") + f" (known: {', '.join(known)})"


def _written(name: str, field: Any) -> str:
    """The key a user writes for a field: its validation alias or alias, else its name."""
    alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
    return alias or name


def load_yaml_model(path: str | Path, model: type[ModelT], error: type[Exception], expected: str) -> ModelT:
    """Read a YAML file holding one mapping and validate it as ``model``; every failure is ``error``.

    ``expected`` completes "expected a mapping with …" for a file that holds something else."""
    path = Path(path)
    data = read_yaml_file(path, error)
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping with {expected}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(describe_validation_error(str(path), exc, data, model)) from exc
