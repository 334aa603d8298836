"""Spread groups: the replicas of one service, each its own Workload (one per LeaderWorkerSet
group, say), kept apart over a topology level, counting the replicas already admitted.

Two ways to ask, both read from the Workload:

- Atoll's: the Workload label ``atoll.dev/spread-group: SERVICE`` (or the same key as a pod
  template annotation) names the service; pod template annotations give the level
  (``atoll.dev/spread-level``, required), at most k replicas per domain of it
  (``atoll.dev/spread-max-per-domain``, default 1) and, optionally, the service's replica count
  (``atoll.dev/spread-replicas``): with it a spread that can never be met is Rejected with the
  numbers. The group is every Workload of the namespace with the same service name.
- Kueue's KEP-13746 annotation ``kueue.x-k8s.io/podset-topology-spreading`` (JSON): ``rules``
  (1–2; ``topologyKey``, ``maxShareAllowingPlacement: "X%"``, ``enforcementMode`` Required or
  Preferred) and ``workloadLabelSelectors`` (at most one ``In`` requirement; default: the
  Workload's own ``kueue.x-k8s.io/job-uid`` label). A domain D is left out when
  ``N > 0 and 100·count(D) > X·N`` (N: the group's admitted replicas, D's count among them);
  a Preferred rule leaves domains out only while some placement remains without them.

A replica counts in every domain of the level its admitted placement (the planned nodes of
Atoll's podSetUpdates, as the ledger holds them) touches. A rule whose level the flavor lacks is
ignored, and said so. The pods of one replica are placed by the profile as any gang (packed in
one island); the spread only removes domains from its candidates, so among the rest the finder's
best fit prefers domains already partly used and whole islands stay free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from admission import vocabulary
from admission.controller._workloads import WorkloadError, WorkloadView
from admission.kube import Obj
from policies import TOPOLOGY_SPREADING, is_spreading_json
from topology import Snapshot

__all__ = ["JOB_UID", "KEP_ANNOTATION", "SpreadGroup", "SpreadRule", "SpreadView", "apply_spread", "banned_domains", "group_name", "never_message",
           "read_spread", "replica_domains"]

KEP_ANNOTATION = TOPOLOGY_SPREADING
JOB_UID = vocabulary.KUEUE_JOB_UID


@dataclass(frozen=True, slots=True)
class SpreadRule:
    level: str
    max_per_domain: int | None = None
    max_share_pct: int | None = None
    required: bool = True

    def describe(self) -> str:
        bound = f"at most {self.max_per_domain} per domain" if self.max_per_domain is not None else f"max share {self.max_share_pct}%"
        return f"{bound} of {self.level}" + ("" if self.required else " (Preferred)")


@dataclass(frozen=True, slots=True)
class SpreadGroup:
    name: str
    """The service: ``atoll.dev/spread-group``'s value, or the KEP selector written out."""
    rules: tuple[SpreadRule, ...]
    replicas: int | None = None
    label_key: str | None = None
    """Members are the Workloads whose label ``label_key`` is one of ``label_values``; None: Atoll's group name."""
    label_values: tuple[str, ...] = ()

    def matches(self, obj: Obj, templates: Mapping[str, Mapping[str, str]] | None = None) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if self.label_key is not None:
            return str(labels.get(self.label_key)) in self.label_values if self.label_key in labels else False
        return group_name(obj) == self.name


def group_name(obj: Obj) -> str | None:
    """Atoll's spread group of a Workload object: its label, else a pod template annotation."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if vocabulary.SPREAD_GROUP in labels:
        return str(labels[vocabulary.SPREAD_GROUP])
    for ps in (obj.get("spec") or {}).get("podSets") or []:
        ann = ((ps.get("template") or {}).get("metadata") or {}).get("annotations") or {} if isinstance(ps, dict) else {}
        if vocabulary.SPREAD_GROUP in ann:
            return str(ann[vocabulary.SPREAD_GROUP])
    return None


def _positive(text: str, where: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        raise WorkloadError(f"{where}: a whole number from 1 to 999999, got {text!r}")
    return int(text)


def read_spread(obj: Obj, view: WorkloadView) -> SpreadGroup | None:
    """The Workload's spread group, or None; WorkloadError names the field of a bad value."""
    annotations: dict[str, str] = {}
    where: dict[str, str] = {}
    for podset, template in view.templates.items():
        for key in (vocabulary.SPREAD_LEVEL, vocabulary.SPREAD_MAX_PER_DOMAIN, vocabulary.SPREAD_REPLICAS, KEP_ANNOTATION):
            if key in template.annotations and key not in annotations:
                annotations[key] = str(template.annotations[key])
                where[key] = f"podSets[{podset}].template.metadata.annotations[{key}]"
    name = group_name(obj)
    if name is not None:
        level = annotations.get(vocabulary.SPREAD_LEVEL)
        if not level:
            raise WorkloadError(f"metadata.labels[{vocabulary.SPREAD_GROUP}]={name!r}: needs the pod template annotation "
                                f"{vocabulary.SPREAD_LEVEL} (the topology level to spread the replicas over)")
        k = _positive(annotations[vocabulary.SPREAD_MAX_PER_DOMAIN], where[vocabulary.SPREAD_MAX_PER_DOMAIN]) \
            if vocabulary.SPREAD_MAX_PER_DOMAIN in annotations else 1
        replicas = _positive(annotations[vocabulary.SPREAD_REPLICAS], where[vocabulary.SPREAD_REPLICAS]) \
            if vocabulary.SPREAD_REPLICAS in annotations else None
        return SpreadGroup(name, (SpreadRule(level, max_per_domain=k),), replicas)
    stray = next((k for k in (vocabulary.SPREAD_LEVEL, vocabulary.SPREAD_MAX_PER_DOMAIN, vocabulary.SPREAD_REPLICAS) if k in annotations), None)
    if stray is not None:  # a spread asked for with no group to count the replicas of would be silently dropped
        raise WorkloadError(f"{where[stray]}: needs the Workload label {vocabulary.SPREAD_GROUP} (the service whose replicas it "
                            f"spreads); add the label, or drop the annotation")
    if KEP_ANNOTATION in annotations and is_spreading_json(annotations[KEP_ANNOTATION]):  # else noted as not honoured (policies)
        return _read_kep(obj, annotations[KEP_ANNOTATION], where[KEP_ANNOTATION])
    return None


def _read_kep(obj: Obj, text: str, where: str) -> SpreadGroup:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise WorkloadError(f"{where}: must be valid JSON: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list) or not 1 <= len(raw["rules"]) <= 2:
        raise WorkloadError(f"{where}.rules: one or two rules are required")
    rules = []
    for i, r in enumerate(raw["rules"]):
        at = f"{where}.rules[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("topologyKey"), str) or not r["topologyKey"]:
            raise WorkloadError(f"{at}.topologyKey: required (a level of the flavor's Topology)")
        share = r.get("maxShareAllowingPlacement")
        if not isinstance(share, str) or not share.endswith("%") or not share[:-1].isdigit() or not 1 <= int(share[:-1]) <= 99:
            raise WorkloadError(f"{at}.maxShareAllowingPlacement: a percentage \"X%\" with X from 1 to 99, got {share!r}")
        mode = r.get("enforcementMode", "Required")
        if mode not in ("Required", "Preferred"):
            raise WorkloadError(f"{at}.enforcementMode: Required or Preferred, got {mode!r}")
        rules.append(SpreadRule(r["topologyKey"], max_share_pct=int(share[:-1]), required=mode == "Required"))
    if len({r.level for r in rules}) != len(rules):
        raise WorkloadError(f"{where}.rules: each topologyKey at most once")
    selectors = raw.get("workloadLabelSelectors")
    if selectors is None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        key, values = JOB_UID, tuple([str(labels.get(JOB_UID, ""))])
    else:
        if not isinstance(selectors, list) or len(selectors) != 1 or not isinstance(selectors[0], dict):
            raise WorkloadError(f"{where}.workloadLabelSelectors: exactly one requirement (Kueue's alpha allows one)")
        sel = selectors[0]
        if not sel.get("key") or sel.get("operator") != "In" or not isinstance(sel.get("values"), list) or not sel["values"]:
            raise WorkloadError(f"{where}.workloadLabelSelectors[0]: needs a key, operator In and at least one value")
        key, values = str(sel["key"]), tuple(str(v) for v in sel["values"])
    return SpreadGroup(f"{key} in ({','.join(values)})", tuple(rules), None, key, values)


def replica_domains(snapshot: Snapshot, level: int, nodes: Iterable[str]) -> set[int]:
    """The domains of ``level`` a replica's planned nodes touch (nodes the flavor no longer has are skipped)."""
    out = set()
    for n in nodes:
        i = snapshot.node_index.get(n)
        if i is not None:
            out.add(snapshot.domain_of(level, i))
    return out


def banned_domains(snapshot: Snapshot, group: SpreadGroup, members: Sequence[Iterable[str]]) -> tuple[list[tuple[SpreadRule, int, list[int]]], list[str]]:
    """Per rule on a level the flavor has: (rule, level index, domains left out); and notes for rules ignored.
    ``members``: the planned nodes of each admitted replica of the group."""
    out, notes = [], []
    for rule in group.rules:
        if rule.level not in snapshot.level_labels:
            notes.append(f"spread group {group.name}: flavor {snapshot.flavor} has no level {rule.level!r}; that rule is ignored")
            continue
        lvl = snapshot.level_index(rule.level)
        counts = np.zeros(snapshot.num_domains(lvl), dtype=np.int64)
        total = 0
        for nodes in members:
            doms = replica_domains(snapshot, lvl, nodes)
            if doms:
                total += 1
                for d in doms:
                    counts[d] += 1
        if rule.max_per_domain is not None:
            banned = np.flatnonzero(counts >= rule.max_per_domain)
        else:
            assert rule.max_share_pct is not None
            banned = np.flatnonzero(100 * counts > rule.max_share_pct * total) if total else np.zeros(0, dtype=np.int64)
        out.append((rule, lvl, banned.tolist()))
    return out, notes


def never_message(snapshot: Snapshot, group: SpreadGroup, replica_gpus: int) -> str | None:
    """Why the group's declared replicas can never be spread on this flavor, with the numbers; None if they can."""
    if group.replicas is None:
        return None
    for rule in group.rules:
        if rule.max_per_domain is None or rule.level not in snapshot.level_labels:
            continue
        lvl = snapshot.level_index(rule.level)
        able = sum(1 for d in range(snapshot.num_domains(lvl))
                   if int(snapshot.alloc[slice(*snapshot.domain_range(lvl, d)), 0].sum()) >= replica_gpus)
        need = math.ceil(group.replicas / rule.max_per_domain)
        if able < need:
            return (f"spread group {group.name}: {group.replicas} replicas at most {rule.max_per_domain} per {rule.level} domain need "
                    f"{need} such domains that can each hold a replica of {replica_gpus} GPUs; flavor {snapshot.flavor} has {able}")
    return None


@dataclass(frozen=True, slots=True)
class SpreadView:
    """What the spread does to one decision on one flavor."""

    snapshot: Snapshot
    """The snapshot the search reads: the domains left out excluded (a fork), or the one given."""
    plain: Snapshot
    """The snapshot without the spread (a Preferred-only spread falls back to it)."""
    preferred_only: bool
    note: str
    """Which domains were left out and why (empty: none)."""
    ignored: tuple[str, ...] = ()


def apply_spread(snap: Snapshot, shared: Snapshot, group: SpreadGroup, members: Sequence[Iterable[str]]) -> SpreadView:
    """Leave out, on a fork of ``snap``, every node of the domains the group's rules ban now."""
    rules, ignored = banned_domains(shared, group, members)
    out = [(rule, lvl, doms) for rule, lvl, doms in rules if doms]
    if not out:
        return SpreadView(snap, snap, False, "", tuple(ignored))
    fork = snap.fork()
    parts = []
    for rule, lvl, doms in out:
        for d in doms:
            lo, hi = shared.domain_range(lvl, d)
            for i in range(lo, hi):
                if fork.eligible[i]:
                    fork.exclude(i)
        names = ", ".join("/".join(shared.domain_path(lvl, d)[-1:]) for d in doms[:6]) + (f" (+{len(doms) - 6})" if len(doms) > 6 else "")
        parts.append(f"{len(doms)} {rule.level} domain(s) left out ({rule.describe()}: {names})")
    note = f"spread group {group.name}, {len(members)} replica(s) admitted: " + "; ".join(parts)
    return SpreadView(fork, snap, all(not r.required for r, _, _ in out), note, tuple(ignored))
