"""The decision record's JSON Schema (``decision-v1.schema.json``, shipped in the package) and
the check ``atoll audit`` runs on every record read back."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from admission.controller._records import DECISION_SCHEMA

__all__ = ["SCHEMA_FILE", "decision_schema", "record_problems"]

SCHEMA_FILE = "decision-v1.schema.json"
"""The schema of ``DECISION_SCHEMA``, beside this module."""


@functools.cache
def decision_schema() -> dict[str, Any]:
    """The shipped JSON Schema of the current record version."""
    text = resources.files("admission.controller").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(decision_schema())


def record_problems(record: Mapping[str, Any]) -> list[str]:
    """Why a record does not meet the schema, one line per problem naming the field; empty when
    it does. A record of another version (or none) is one problem: its version."""
    version = record.get("schema")
    if version != DECISION_SCHEMA:
        if version is None:
            return [f"schema: missing (a record written before {DECISION_SCHEMA}, or not Atoll's)"]
        return [f"schema: {version!r} is not {DECISION_SCHEMA} (this atoll reads {DECISION_SCHEMA} only)"]
    out = []
    for err in sorted(_validator().iter_errors(record), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in err.absolute_path) or "(record)"
        out.append(f"{where}: {err.message}")
    return out
