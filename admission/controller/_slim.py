"""What the controller's cache keeps of a Node, a Workload, a LocalQueue or a ClusterQueue: only the fields Atoll reads.

A GPU fleet's Nodes carry the kubelet's image list, addresses, node info and ``managedFields``,
and Kueue's Workloads a full pod template (images, commands, environment, volumes) and
``managedFields``; none of it is read by a decision, and kept for 25,000 Nodes and 50,000
Workloads it would be most of the controller's memory. ``ClusterCache.upsert`` stores the slim
copy (``atoll bench decide`` reports the RSS; ``test_slim`` checks that the decision reads the
same from it).
"""

from __future__ import annotations

from typing import Any

from admission.kube import CLUSTER_QUEUES, LOCAL_QUEUES, NODES, WORKLOADS, Obj

__all__ = ["SLIM", "slim_cluster_queue", "slim_local_queue", "slim_node", "slim_workload"]

ATOLL_PREFIX = "atoll.dev/"
_NODE_META = ("name", "uid", "resourceVersion", "generation", "labels")
_WORKLOAD_META = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "labels", "annotations")
_TEMPLATE_SPEC = ("containers", "initContainers", "overhead", "nodeSelector", "affinity", "tolerations")
_CONTAINER = ("name", "resources")


def slim_node(obj: Obj) -> Obj:
    """A Node with only what Atoll reads (``node_info``, ``flavor_nodes``, ``newer``): name,
    version, labels, Atoll's own annotations (``atoll.dev/gpu-perf``), taints, unschedulable,
    allocatable and the Ready condition. ``managedFields``, the kubelet's image list, addresses
    and node info are dropped on ingest: on a GPU fleet they are most of a Node's bytes."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    status = obj.get("status")
    out: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    if isinstance(meta, dict):
        slim = {k: meta[k] for k in _NODE_META if k in meta}
        ann = meta.get("annotations")
        if isinstance(ann, dict) and any(str(k).startswith(ATOLL_PREFIX) for k in ann):
            slim["annotations"] = {k: v for k, v in ann.items() if str(k).startswith(ATOLL_PREFIX)}
        out["metadata"] = slim
    elif meta is not None:
        out["metadata"] = meta
    if isinstance(spec, dict):
        out["spec"] = {k: spec[k] for k in ("taints", "unschedulable") if k in spec}
    elif spec is not None:
        out["spec"] = spec
    if isinstance(status, dict):
        slim = {k: status[k] for k in ("allocatable",) if k in status}
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            slim["conditions"] = [c for c in conditions if not isinstance(c, dict) or c.get("type") == "Ready"]
        elif conditions is not None:
            slim["conditions"] = conditions
        out["status"] = slim
    elif status is not None:
        out["status"] = status
    return out


def slim_workload(obj: Obj) -> Obj:
    """A Workload with only what Atoll reads: its identity, version, creation time, labels and annotations, its
    status, and of each PodSet's pod template
    the metadata, the containers' names and resources, overhead, nodeSelector, node affinity and
    tolerations. ``managedFields``, images, commands, environment and volumes are dropped on
    ingest. Anything malformed is kept as it is, so ``parse_workload`` names it as before."""
    out: Obj = dict(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {k: meta[k] for k in _WORKLOAD_META if k in meta}
    spec = obj.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("podSets"), list):
        out["spec"] = {**spec, "podSets": [_slim_podset(ps) for ps in spec["podSets"]]}
    return out


def _slim_podset(ps: Any) -> Any:
    if not isinstance(ps, dict) or not isinstance(ps.get("template"), dict) or not isinstance(ps["template"].get("spec"), dict):
        return ps
    template, tspec = ps["template"], ps["template"]["spec"]
    slim: dict[str, Any] = {k: tspec[k] for k in _TEMPLATE_SPEC if k in tspec}
    for key in ("containers", "initContainers"):
        containers = slim.get(key)
        if isinstance(containers, list):
            slim[key] = [{k: c[k] for k in _CONTAINER if k in c} if isinstance(c, dict) else c for c in containers]
    affinity = slim.get("affinity")
    if isinstance(affinity, dict):
        slim["affinity"] = {k: affinity[k] for k in ("nodeAffinity",) if k in affinity}
    return {**ps, "template": {**template, "spec": slim}}


def slim_local_queue(obj: Obj) -> Obj:
    """A LocalQueue with only what Atoll reads: its identity, version and ``spec.clusterQueue``
    (which ClusterQueue a Workload waiting for quota queues in); its status is dropped."""
    out: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    meta = obj.get("metadata")
    out["metadata"] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta} if isinstance(meta, dict) else meta
    spec = obj.get("spec")
    out["spec"] = {k: spec[k] for k in ("clusterQueue",) if k in spec} if isinstance(spec, dict) else spec
    return out


_CQ_SPEC = ("cohort", "cohortName", "preemption", "admissionChecks", "admissionChecksStrategy")
_QUOTA = ("name", "nominalQuota", "borrowingLimit", "lendingLimit")


def slim_cluster_queue(obj: Obj) -> Obj:
    """A ClusterQueue with only what Atoll reads: its identity and version; its cohort
    (``cohort``/``cohortName``), preemption policy and admission checks (``admissionChecks``,
    ``admissionChecksStrategy``); each resource group's ``coveredResources`` and, per flavor, each
    resource's name and nominal, borrowing and lending quota; and of its status only
    ``flavorsReservation`` (each flavor's resources' name and total). Conditions, the other usage
    figures and ``managedFields`` are dropped. Anything malformed is kept as it is."""
    out: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    meta = obj.get("metadata")
    out["metadata"] = {k: meta[k] for k in ("name", "uid", "resourceVersion", "generation") if k in meta} if isinstance(meta, dict) else meta
    spec = obj.get("spec")
    if isinstance(spec, dict):
        slim: dict[str, Any] = {k: spec[k] for k in _CQ_SPEC if k in spec}
        groups = spec.get("resourceGroups")
        if isinstance(groups, list):
            slim["resourceGroups"] = [_slim_group(g) for g in groups]
        elif groups is not None:
            slim["resourceGroups"] = groups
        out["spec"] = slim
    elif spec is not None:
        out["spec"] = spec
    status = obj.get("status")
    if isinstance(status, dict):
        used = status.get("flavorsReservation")
        out["status"] = {"flavorsReservation": [_slim_usage(f) for f in used] if isinstance(used, list) else used} if used is not None else {}
    elif status is not None:
        out["status"] = status
    return out


def _slim_group(group: Any) -> Any:
    if not isinstance(group, dict):
        return group
    out = {k: group[k] for k in ("coveredResources",) if k in group}
    flavors = group.get("flavors")
    if isinstance(flavors, list):
        out["flavors"] = [{"name": f.get("name"), "resources": [{k: r[k] for k in _QUOTA if k in r} if isinstance(r, dict) else r
                                                                 for r in f["resources"]]}
                          if isinstance(f, dict) and isinstance(f.get("resources"), list) else f for f in flavors]
    elif flavors is not None:
        out["flavors"] = flavors
    return out


def _slim_usage(flavor: Any) -> Any:
    if not isinstance(flavor, dict) or not isinstance(flavor.get("resources"), list):
        return flavor
    return {"name": flavor.get("name"), "resources": [{k: r[k] for k in ("name", "total") if k in r} if isinstance(r, dict) else r
                                                      for r in flavor["resources"]]}


SLIM = {NODES: slim_node, WORKLOADS: slim_workload, LOCAL_QUEUES: slim_local_queue, CLUSTER_QUEUES: slim_cluster_queue}
"""Resource → what the cache keeps of its objects (resources not named are kept whole)."""
