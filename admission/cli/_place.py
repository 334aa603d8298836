"""``atoll place``: what-if placement of one Workload, Job or JobSet on a cluster model.

The answer comes from the controller itself: the cluster model becomes the objects an admin
installs (Nodes, ResourceFlavors, Topologies, Atoll's AdmissionCheck, the profiles ConfigMap) in
an in-memory cluster (``simulator._port.MemoryCluster``), the manifest becomes the Workload Kueue
creates, with quota reserved on the chosen flavor and Atoll's check Pending, and a read-only
``Controller`` lists that cluster and evaluates the Workload, exactly as it does in a cluster.
So the verdict and the podSetUpdates shown are the ones the controller would write.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from admission import vocabulary
from admission.cli._args import Parser, whole
from admission.cli._bundled import bundled_path, model_profiles, resolve_cluster, resolve_profiles, shown, unreadable
from admission.controller import WorkloadError, parse_object, read_spread
from policies import GROUP_NAME, REQUIRED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY, ProfileLevelError, ProfilesError, annotation_problems, load_profiles_file
from topology import ClusterModelError, ResourceVector, Snapshot, describe_yaml_error, load_cluster_model, read_yaml_file

__all__ = ["main", "place_workload"]

NOW = 1_800_000_000.0
"""The what-if's clock (epoch seconds); ``--waited`` counts back from it."""


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="atoll place", description="Where would this workload go? (no cluster needed)")
    p.add_argument("--cluster", default=None, help="cluster model file or bundled name (default gb200-nvl72-superpod)")
    p.add_argument("--workload", required=True, help="a Kueue Workload, Job or JobSet manifest (YAML)")
    p.add_argument("--profile", default=None, help="profile name (default: annotation, queue, then defaultProfile)")
    p.add_argument("--profiles", default=None, help="profiles document (default: the one the cluster model names, else config/profiles.yaml)")
    p.add_argument("--flavor", default=None, help="flavor of the cluster model (default: the first whose accelerator the workload requests)")
    p.add_argument("--waited", type=float, default=0.0, help="seconds the workload has already waited (elastic relaxation)")
    p.add_argument("--occupancy", type=float, default=0.0, help="fill nodes at random to this share of GPUs first (what-if)")
    p.add_argument("--seed", type=whole(0), default=0, help="seed for --occupancy")
    p.add_argument("--record", metavar="FILE", help="append the decision record (atoll.dev/decision/v1, as atoll run writes it) to FILE")
    p.add_argument("--format", choices=("table", "json"), default="table")
    return p


def _occupancy_pods(flavor: Any, share: float, seed: int) -> list[dict[str, Any]]:
    """Other tenants' pods filling each node to ``share`` of its GPUs on average (binomial draws in
    topology path order, so a seed gives the same cluster every time)."""
    from admission.simulator import quantities

    if share <= 0:
        return []
    snapshot = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes(), node_level=flavor.node_level())
    rng = np.random.default_rng(seed)
    pods = []
    for i, name in enumerate(snapshot.node_names):
        used = int(rng.binomial(int(snapshot.alloc[i, 0]), min(share, 1.0)))
        if used:
            pods.append({"metadata": {"name": f"occupied-{name}", "namespace": "default", "uid": f"occupied-{name}"},
                         "spec": {"nodeName": name, "containers": [{"name": "main", "resources": {
                             "requests": quantities(ResourceVector(gpu=used), flavor.gpu_resource)}}]},
                         "status": {"phase": "Running"}})
    return pods


def _kueue_workload(manifest: dict[str, Any], flavor: str, gpu_resource: str, profile: str | None, waited: float) -> dict[str, Any]:
    """The Workload Kueue creates for ``manifest``, with quota reserved on ``flavor`` and Atoll's check Pending."""
    from admission.controller import WAITING_CONDITION, as_workload, rfc3339
    from admission.simulator import workload_object

    wl = manifest if manifest.get("kind") not in ("Job", "JobSet") else as_workload(manifest)
    meta = wl.get("metadata") or {}
    podsets = [dict(ps) for ps in wl["spec"]["podSets"]]
    for ps in podsets:
        ps.setdefault("count", 1)
        if profile:
            template = dict(ps["template"])
            tmeta = dict(template.get("metadata") or {})
            tmeta["annotations"] = {**(tmeta.get("annotations") or {}), vocabulary.PROFILE: profile}
            template["metadata"] = tmeta
            ps["template"] = template
    obj = workload_object(str(meta.get("name", "workload")), podsets, flavor=flavor, namespace=str(meta.get("namespace") or "default"),
                          queue=str(wl["spec"].get("queueName", "")), gpu_resource=gpu_resource)
    obj["metadata"]["annotations"] = dict(meta.get("annotations") or {})
    obj["metadata"]["labels"] = dict(meta.get("labels") or {})
    if waited > 0:
        obj["status"]["conditions"].append({"type": WAITING_CONDITION, "status": "True", "reason": "NoPlacementYet",
                                            "lastTransitionTime": rfc3339(NOW - waited)})
    return obj


def place_workload(cluster: Any, doc: Any, workload: dict[str, Any], *, occupied: Sequence[dict[str, Any]] = (),
                   record_to: TextIO | None = None) -> Any:
    """The controller's verdict on ``workload`` in an in-memory cluster built from ``cluster`` and
    ``doc`` (plus ``occupied`` pods): what ``atoll place`` prints, and what the tests compare with
    the controller on a real apiserver and the simulator's port. ``record_to``: where its decision
    record goes (the controller's own record, offline: no controller, no lease term)."""
    from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings
    from admission.kube import PODS, WORKLOADS, ManualClock
    from admission.simulator import CHECK_NAME, PROFILES_NAMESPACE, MemoryCluster, cluster_objects, profiles_for_cluster

    port = MemoryCluster(ManualClock(NOW)).load(cluster_objects(cluster, profiles_for_cluster(doc, cluster)))
    for pod in occupied:
        port.put(PODS, pod)
    port.put(WORKLOADS, workload)
    settings = Settings(kueue=KueueSettings(admission_check=CHECK_NAME), config=ConfigSettings(namespace=PROFILES_NAMESPACE))
    controller = Controller(port, settings=settings, clock=port.clock, read_only=True, recorder=Recorder(io.StringIO()),
                            new_id=lambda: "what-if")
    controller.sync()
    obj = controller.cache.objects[WORKLOADS][f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"]
    started = time.perf_counter()
    verdict = controller.evaluate(obj, "what-if")
    if record_to is not None:
        rec = controller.decision_record(obj, verdict, time.perf_counter() - started)
        Recorder(record_to).record(dataclasses.replace(rec, controller=""))  # no replica decided it
    return verdict


def _as_json(verdict: Any, workload: str, flavor: str) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": workload, "flavor": flavor, "profile": verdict.profile,
                           "outcome": verdict.outcome, "message": verdict.message, "relaxed": verdict.relaxed}
    if verdict.outcome == "wait":
        out["retry_after_seconds"] = verdict.retry_after
    if verdict.outcome == "admit" and verdict.placements:
        out["podsets"] = [
            {"name": p.podset, "domain_level": p.domain_level, "domain_path": list(p.domain_path), "islands": p.islands,
             "island_level": p.island_level, "min_perf": p.min_perf, "bottleneck_gbps": p.bottleneck_gbps,
             "nodes": dict(p.nodes), "node_selector": dict(p.node_selector), **({"slices": list(p.slices)} if p.slices else {})}
            for p in verdict.placements
        ]
        if verdict.links:
            out["links"] = list(verdict.links)
        out["podSetUpdates"] = verdict.podset_updates
    if verdict.why_not:
        out["why_not"] = [{"podset": v.podset, "level": v.level, "path": list(v.domain_path), "capacity_pods": v.capacity_pods,
                           "need_pods": v.need_pods, "reason": v.reason} for v in verdict.why_not]
    if verdict.notes:
        out["notes"] = list(verdict.notes)
    return out


def _print_table(data: dict[str, Any]) -> None:
    print(f"workload  {data['workload']}  (flavor {data['flavor']}, profile {data['profile']} from {data['profiles']})")
    print(f"decision  {data['outcome'].upper()}: {data['message']}")
    for ps in data.get("podsets", []):
        nodes = ps["nodes"]
        shown = ", ".join(f"{n}×{c}" for n, c in list(nodes.items())[:8]) + (f", … ({len(nodes)} nodes)" if len(nodes) > 8 else "")
        print(f"  podset {ps['name']}: {ps['domain_level']} = {'/'.join(ps['domain_path']) or '(whole flavor)'}; "
              f"{ps['islands']} {ps['island_level']} domain(s); min perf {ps['min_perf']:.2f}; link {ps['bottleneck_gbps']:g} GB/s")
        print(f"    nodes: {shown}")
        sel = ", ".join(f"{k}={v}" for k, v in ps.get("node_selector", {}).items()) or "(none)"
        print(f"    nodeSelector written: {sel}")
        for sl in ps.get("slices", []):
            print(f"    slice {sl['index']}: {sl['level']} = {'/'.join(sl['domain'])}; {sl['pods']} pods on {len(sl['nodes'])} nodes; "
                  f"{'held by' if sl['held'] else 'not held:'} {sl['held_by']}")
    for e in data.get("links", []):
        print(f"  edge {e['from']}->{e['to']}: {e['bandwidth_gbps']:g} GB/s per GPU, {e['latency_us']:g} µs, "
              f"across {e['bottleneck_level']} (asked {e['asked']})")
    if data.get("why_not"):
        print("  other domains:")
        for v in data["why_not"]:
            print(f"    {v['podset']}: {'/'.join(v['path'])}: {v['reason']}")
    for note in data.get("notes", []):
        print(f"  note: {note}")


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    try:
        if not 0.0 <= args.occupancy <= 1.0:
            raise WorkloadError(f"--occupancy: a share of GPUs from 0 to 1, got {args.occupancy:g}")
        if args.waited < 0:
            raise WorkloadError(f"--waited: seconds already waited, 0 or more, got {args.waited:g}")
        cluster_path = resolve_cluster(args.cluster)
        problem = (unreadable("--cluster", cluster_path) or unreadable("--workload", bundled_path(args.workload))
                   or unreadable("--profiles", bundled_path(args.profiles) if args.profiles else None))
        if problem:
            raise WorkloadError(problem)
        model = load_cluster_model(cluster_path)
        manifests = _manifests(bundled_path(args.workload))
        if args.flavor and args.flavor not in (names := [f.name for f in model.flavors]):
            raise WorkloadError(f"--flavor: {model.name} has no flavor {args.flavor!r}; give one of {', '.join(names)}")
        flavor = model.flavor(args.flavor) if args.flavor else _requested_flavor(model, manifests[0])
        profiles_path = resolve_profiles(args.profiles, cluster_path, model)
        doc = load_profiles_file(profiles_path)
        if len(manifests) > 1:
            return _place_service(args, model, flavor, doc, profiles_path, manifests)
        manifest = manifests[0]
        try:
            view = parse_object(manifest, gpu_resource=flavor.gpu_resource)
        except WorkloadError as exc:
            raise WorkloadError(f"{args.workload}: {exc}") from None
        named = args.profile or view.profile
        if named and named not in doc.profiles:
            where = "--profile" if args.profile else f"{args.workload}: annotation {vocabulary.PROFILE}"
            raise WorkloadError(f"{where}: {named!r} is not a profile of {shown(profiles_path)} (have {sorted(doc.profiles)}); "
                                "name one of them or add it to that document")
        profile_name, _ = doc.profile_for(annotation=named, local_queue=view.local_queue, cluster_queue=None)
        if view.workload_class and view.workload_class not in doc.classes:
            raise WorkloadError(f"{args.workload}: annotation {vocabulary.CLASS}: {view.workload_class!r} is not a class of "
                                f"{shown(profiles_path)} (have {sorted(doc.classes)}); name one of them or add it to that document")
        _check_levels(doc, profile_name, flavor, cluster_path, model, profiles_path)
    except (ClusterModelError, ProfilesError, ProfileLevelError, WorkloadError, KeyError) as exc:
        print(f"atoll place: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    if not view.podsets:
        data = {"workload": view.key, "flavor": flavor.name, "profile": profile_name, "profiles": shown(profiles_path), "outcome": "admit",
                "message": f"every PodSet has count 0 ({', '.join(view.empty_podsets)}); nothing to place", "relaxed": False}
        _emit(data, args.format)
        return 0
    from admission.cli._run import configure_logging

    configure_logging("warning")  # the controller's info lines would mix with the answer on stdout
    workload = _kueue_workload(manifest, flavor.name, flavor.gpu_resource, args.profile, args.waited)
    bad = _bad_input(workload, flavor)
    if bad:
        print(f"atoll place: {args.workload}: {bad}", file=sys.stderr)
        return 2
    try:
        record_to = open(args.record, "a", encoding="utf-8") if args.record else None  # noqa: SIM115 - closed below
    except OSError as exc:
        print(f"atoll place: --record {args.record}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        verdict = place_workload(model, doc, workload, occupied=_occupancy_pods(flavor, args.occupancy, args.seed), record_to=record_to)
    finally:
        if record_to is not None:
            record_to.close()
    if verdict.reason == "config":
        print(f"atoll place: {verdict.message}", file=sys.stderr)
        return 2
    data = _as_json(verdict, view.key, flavor.name)
    data["profiles"] = shown(profiles_path)
    if verdict.outcome == "reject":
        note = _manifest_note(view, flavor)
        if note:
            notes = data.setdefault("notes", [])
            assert isinstance(notes, list)
            notes.append(note)
    _emit(data, args.format)
    return 0


def _manifests(path: Path) -> list[Any]:
    """The file's YAML documents (a service of several Workloads is one file of several); one
    document is read as before, with its errors."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return [read_yaml_file(path, WorkloadError)]  # names the file and why
    if not any(line.startswith("---") for line in text.splitlines()[1:]):
        return [read_yaml_file(path, WorkloadError)]
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: {describe_yaml_error(exc)}") from None
    return docs or [read_yaml_file(path, WorkloadError)]


def _place_service(args: Any, model: Any, flavor: Any, doc: Any, profiles_path: Path, manifests: Sequence[Any]) -> int:
    """Several Workloads (the replicas of a service), decided in file order by one controller on
    the in-memory cluster: each one admitted counts for the next, as in a cluster (spread groups)."""
    from admission.cli._run import configure_logging
    from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings
    from admission.kube import PODS, WORKLOADS, ManualClock
    from admission.simulator import CHECK_NAME, PROFILES_NAMESPACE, MemoryCluster, cluster_objects, profiles_for_cluster

    configure_logging("warning")
    port = MemoryCluster(ManualClock(NOW)).load(cluster_objects(model, profiles_for_cluster(doc, model)))
    for pod in _occupancy_pods(flavor, args.occupancy, args.seed):
        port.put(PODS, pod)
    settings = Settings(kueue=KueueSettings(admission_check=CHECK_NAME), config=ConfigSettings(namespace=PROFILES_NAMESPACE))
    ids = iter(range(1, 10**6))
    controller = Controller(port, settings=settings, clock=port.clock, recorder=Recorder(io.StringIO()), new_id=lambda: f"what-if-{next(ids)}")
    controller.sync()
    answers = []
    for i, manifest in enumerate(manifests):
        try:
            view = parse_object(manifest, gpu_resource=flavor.gpu_resource)
        except WorkloadError as exc:
            print(f"atoll place: {args.workload} document {i + 1}: {exc}", file=sys.stderr)
            return 2
        workload = _kueue_workload(manifest, flavor.name, flavor.gpu_resource, args.profile, args.waited)
        bad = _bad_input(workload, flavor)
        if bad:
            print(f"atoll place: {args.workload} document {i + 1}: {bad}", file=sys.stderr)
            return 2
        port.put(WORKLOADS, workload)
        controller.sync()
        (verdict,) = controller.process()
        data = _as_json(verdict, view.key, flavor.name)
        data["profiles"] = shown(profiles_path)
        answers.append(data)
    if args.format == "json":
        print(json.dumps({"workloads": answers}, indent=2))
    else:
        for data in answers:
            _print_table(data)
    return 0


def _bad_input(workload: Any, flavor: Any) -> str | None:
    """What is wrong with the Workload's spread or topology annotations, or None. The controller
    rejects such a Workload with a decision record (right in a cluster); asked here, the input is
    the error. The topology check is the decision's own (``annotation_problems``)."""
    try:
        view = parse_object(workload, gpu_resource=flavor.gpu_resource)
        read_spread(workload, view)
    except WorkloadError as exc:
        return str(exc)
    if not any(spec.annotation_errors or spec.slices or spec.group for spec in view.podsets):
        return None  # nothing the check reads: no fabric to build
    snapshot = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes(), node_level=flavor.node_level())
    problem = annotation_problems(snapshot, view.podsets)
    return f"invalid topology annotations: {problem}" if problem else None


def _requested_flavor(model: Any, manifest: Any) -> Any:
    """The first flavor whose accelerator resource (``gpuResource``) the manifest's pods request;
    the first flavor when they request none of them (or the manifest does not parse: the caller's
    own parse then names the field)."""
    for flavor in model.flavors:
        try:
            view = parse_object(manifest, gpu_resource=flavor.gpu_resource)
        except WorkloadError:
            break
        if any(ps.per_pod.gpu > 0 for ps in view.podsets):
            return flavor
    return model.flavor(None)


def _check_levels(doc: Any, profile_name: str, flavor: Any, cluster_path: Path, model: Any, profiles_path: Path) -> None:
    """The chosen profile's levels against the flavor's, before deciding: a misspelt level label in
    the cluster model is the model's configuration error (with the near match), and a profiles
    document written for another fabric names the one this cluster model names."""
    labels = tuple(lv.label for lv in flavor.level_specs())  # the flavor's Topology, as the controller reads it
    try:
        doc.profiles[profile_name].for_flavor(flavor.name, labels, name=profile_name)
    except ProfileLevelError as exc:
        if exc.typo and exc.typo_in == "flavor":
            have, want = exc.typo
            raise ClusterModelError(f"{shown(cluster_path)}: flavors[{flavor.name}].levels: label {have!r} looks misspelt: did you mean "
                                    f"{want!r}? (profile {profile_name} of {shown(profiles_path)} names {want!r}); a configuration error "
                                    "in the cluster model: fix the label") from None
        own = model_profiles(cluster_path, model)
        if own is not None and own.resolve() != profiles_path.resolve():
            raise ProfileLevelError(f"{shown(profiles_path)}: {exc}; cluster {model.name} is set up with {shown(own)}: "
                                    f"use --profiles {shown(own)} (or leave --profiles out)") from None
        raise ProfileLevelError(f"{shown(profiles_path)}: {exc}") from None


def _manifest_note(view: Any, flavor: Any) -> str | None:
    """For a Reject: the manifest's own topology annotations, which no profile relaxes, and how
    large the domains they name are on this flavor."""
    keys = (REQUIRED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY, GROUP_NAME,
            vocabulary.NEAR_MIN_BANDWIDTH_GBPS, vocabulary.NEAR_LEVEL)
    asked = [f"podSets[{name}] {k}: {t.annotations[k]}" for name, t in view.templates.items() for k in keys if k in t.annotations]
    if not asked:
        return None
    levels = {t.annotations[k] for t in view.templates.values() for k in keys[:2] if k in t.annotations}
    snapshot = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes(), node_level=flavor.node_level())
    sizes = []
    for label in sorted(levels & set(snapshot.level_labels)):
        lvl = snapshot.level_index(label)
        largest = max(int(snapshot.alloc[a:b, 0].sum()) for a, b in (snapshot.domain_range(lvl, d) for d in range(snapshot.num_domains(lvl))))
        sizes.append(f"the largest {label} domain of flavor {flavor.name} holds {largest} GPUs")
    return ("the manifest's own annotations ask for this (" + "; ".join(asked) + "), and no profile relaxes them"
            + (": " + ", ".join(sizes) if sizes else "") + "; run it on a cluster whose domains are large enough")


def _emit(data: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(data, indent=2))
    else:
        _print_table(data)
