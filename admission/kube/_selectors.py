"""Label selectors as the apiserver reads them, for ports that answer ``list`` without one.

The real adapter passes the selector to the apiserver; the in-memory cluster must answer the
same question the same way, or code tested on it would select differently in a cluster. The
grammar is Kubernetes' (``k8s.io/apimachinery/pkg/labels``, ``Parse``): comma-separated
requirements, all of which must hold:

- ``k=v``, ``k==v``: the label is present with that value; ``k!=v``: absent, or another value;
- ``k``: present; ``!k``: absent;
- ``k in (a,b)``: present with one of the values; ``k notin (a,b)``: absent, or none of them.

A selector the apiserver would refuse (400) raises ``errors.BadRequest`` naming the requirement.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from admission.kube import errors

__all__ = ["LabelSelector", "parse_label_selector"]

_KEY = r"(?:[a-z0-9A-Z](?:[-a-z0-9A-Z.]{0,251}[a-z0-9A-Z])?/)?[a-z0-9A-Z](?:[-a-z0-9A-Z_.]{0,61}[a-z0-9A-Z])?"
_VALUE = r"(?:[a-z0-9A-Z](?:[-a-z0-9A-Z_.]{0,61}[a-z0-9A-Z])?)?"
_EQUALITY = re.compile(rf"\s*(?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_VALUE})\s*")
_EXISTS = re.compile(rf"\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*")
_SET = re.compile(rf"\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*")
_VALUE_ONLY = re.compile(rf"\s*({_VALUE})\s*")

Requirement = Callable[[Mapping[str, str]], bool]
LabelSelector = Callable[[Mapping[str, str]], bool]
"""Labels → do they match the selector."""


def _split(selector: str) -> list[str]:
    """The requirements: commas inside ``(...)`` separate values, not requirements."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(selector[start:i])
            start = i + 1
    out.append(selector[start:])
    return out


def _bad(selector: str, term: str, why: str) -> errors.BadRequest:
    return errors.BadRequest(f"labelSelector {selector!r}: requirement {term.strip()!r}: {why}", status=400)


def _requirement(selector: str, term: str) -> Requirement:
    if (m := _SET.fullmatch(term)) is not None:
        key, raw = m["key"], m["values"].split(",") if m["values"].strip() else []  # "()" is an empty set, as the apiserver reads it
        values = set()
        for v in raw:
            one = _VALUE_ONLY.fullmatch(v)
            if one is None:
                raise _bad(selector, term, f"{v.strip()!r} is not a valid label value")
            values.add(one[1])
        if m["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: key not in labels or labels[key] not in values
    if (m := _EQUALITY.fullmatch(term)) is not None:
        key, value = m["key"], m["value"]
        if m["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if (m := _EXISTS.fullmatch(term)) is not None:
        key = m["key"]
        if m["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    if not term.strip():
        raise _bad(selector, term, "empty (a stray comma?)")
    raise _bad(selector, term, "expected k=v, k==v, k!=v, k, !k, 'k in (v,…)' or 'k notin (v,…)' with valid label keys and values")


def parse_label_selector(selector: str) -> LabelSelector:
    """A matcher for ``selector``; the empty selector matches everything."""
    if not selector.strip():
        return lambda labels: True
    requirements = [_requirement(selector, term) for term in _split(selector)]
    return lambda labels: all(r(labels) for r in requirements)
