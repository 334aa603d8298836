"""``atoll bench webhook``: a burst of recreated pods through the exact-placement webhook, called by
a real kube-apiserver.

It starts etcd and kube-apiserver (``tests.envtest``: it runs from a clone of the repository) with Kueue's CRDs, creates one
NVLink-island-like domain of 4-GPU nodes (the planned ones plus spares), serves the webhook on
loopback with a generated certificate and registers it as the chart does (same objectSelector,
``failurePolicy: Fail``, ``timeoutSeconds``). Then, as after a node failure:

1. the first generation of ``--pods`` pods (one PodSet of an exact decision, 4 GPUs per pod, one
   per planned node) is created through the webhook, bound to its pinned nodes and failed;
2. ``--failed-nodes`` of the planned nodes go NotReady;
3. the whole second generation is created at once by ``--clients`` concurrent creators (a Job
   controller recreating every pod): pods of the lost nodes go to spares of the domain, the
   others back to their nodes.

It reports the second generation's review latency inside the webhook (p50/p99/max ms), the
creation latency the creators saw, refusals, pods pinned to a node another pod of the burst
already fills, and the wall time. Goal: every pod created (none refused), every review answered
within the webhook's timeout, no node overbooked; exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from admission import vocabulary
from admission.cli._args import Parser, whole
from admission.kube import Resource
from admission.webhook import ANN_REPLACED

__all__ = ["main", "run_bench"]

NS = "atoll-bench-webhook"
CLIQUE, GPU = "nvidia.com/gpu.clique", "nvidia.com/gpu"
DOMAIN = "bench-c0"
DECISION = "benchdecision01"
INDEX = "batch.kubernetes.io/job-completion-index"
CONFIG = "atoll-bench-webhook"
BINDINGS = Resource("", "v1", "bindings", "Binding", True)
"""What the scheduler writes to bind a pod (the test apiserver runs no scheduler)."""


def _node(port: Any, name: str) -> None:
    from admission.kube import NODES

    res = {GPU: "4", "cpu": "144", "memory": "1800Gi", "pods": "110"}
    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    port.create(NODES, {"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, CLIQUE: DOMAIN}}})
    port.apply(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {
        "allocatable": res, "capacity": res, "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                                                             "lastHeartbeatTime": t, "lastTransitionTime": t}]}},
               field_manager="kubelet", subresource="status")
    port.patch(NODES, name, {"spec": {"taints": None}})  # lift the not-ready taint (no node lifecycle controller here)


def _not_ready(port: Any, name: str) -> None:
    from admission.kube import NODES

    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    port.apply(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "kubelet stopped posting",
         "lastHeartbeatTime": t, "lastTransitionTime": t}]}}, field_manager="kubelet", subresource="status")


def _pod(name: str, index: int | None, planned: str) -> dict[str, Any]:
    from admission.controller import ANN_DECISION_ID, ANN_PLANNED_NODES

    labels = {ANN_DECISION_ID: DECISION, vocabulary.ENFORCEMENT: "exact", vocabulary.KUEUE_PODSET: "main"}
    if index is not None:
        labels[INDEX] = str(index)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "labels": labels,
        "annotations": {ANN_DECISION_ID: DECISION, vocabulary.ENFORCEMENT: "exact", ANN_PLANNED_NODES: planned}},
        "spec": {"nodeSelector": {CLIQUE: DOMAIN}, "containers": [
            {"name": "c", "image": "registry.example.com/train:1", "resources": {"requests": {GPU: "4"}, "limits": {GPU: "4"}}}]}}


def _configuration(url: str, ca: bytes, timeout: int) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration (its selector and policies), calling ``url``."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": CONFIG},
            "webhooks": [{"name": "pods.atoll.dev", "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail",
                          "timeoutSeconds": timeout, "matchPolicy": "Equivalent", "reinvocationPolicy": "Never",
                          "objectSelector": {"matchExpressions": [{"key": vocabulary.DECISION_ID, "operator": "Exists"},
                                                                  {"key": vocabulary.ENFORCEMENT, "operator": "In", "values": ["exact"]}]},
                          "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                                     "scope": "Namespaced"}],
                          "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()}}]}


def _workload(port: Any, pods: int, planned: str) -> None:
    """The admitted Workload whose exact PodSet the pods belong to (the webhook counts what it still
    owes on its planned nodes when it looks for room): spec, then Kueue's reservation and Atoll's
    Ready check entry with the podSetUpdate, as status."""
    from admission.controller import ANN_DECISION_ID, ANN_PLANNED_NODES
    from admission.kube import WORKLOADS

    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    port.create(WORKLOADS, {"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": {"name": "train", "namespace": NS},
                            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": pods, "template": {"spec": {
                                "restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example.com/train:1", "resources": {
                                    "requests": {GPU: "4"}, "limits": {GPU: "4"}}}]}}}]}})
    update = {"name": "main", "labels": {ANN_DECISION_ID: DECISION, vocabulary.ENFORCEMENT: "exact"}, "nodeSelector": {CLIQUE: DOMAIN},
              "annotations": {ANN_DECISION_ID: DECISION, vocabulary.ENFORCEMENT: "exact", ANN_PLANNED_NODES: planned}}
    port.apply(WORKLOADS, {"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": {"name": "train", "namespace": NS}, "status": {
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved", "lastTransitionTime": t}],
        "admissionChecks": [{"name": "atoll-topology", "state": "Ready", "message": "placed", "lastTransitionTime": t,
                             "podSetUpdates": [update]}]}}, field_manager="kueue-admission", subresource="status")


def _ms(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.array(values) * 1000.0, q)), 1) if values else None


def run_bench(pods: int, *, failed_nodes: int, spares: int, clients: int, ranked: bool, timeout: int) -> dict[str, Any]:
    """The scenario of the module docstring, start to end. One function (over 60 lines) on purpose:
    it is one sequence of steps sharing the apiserver, the webhook and the timing lists, read top
    to bottom; its pieces of cluster setup are the helpers above."""
    from admission.controller import encode_planned
    from admission.kube import PODS, KubePort, errors
    from admission.webhook import ANN_NODE, PodPinner, WebhookCache, WebhookServer, WebhookSettings, ensure_serving_cert, review_time_left
    from tests.envtest import ApiServer, EnvtestError, ensure_kueue_crds, install_kueue_crds

    crds = ensure_kueue_crds()  # one line naming what is missing and how to provide it
    planned_nodes = [f"p{i:04d}" for i in range(pods)]
    planned = encode_planned([(n, 1) for n in planned_nodes], 16_000) or ""
    with ApiServer() as api, tempfile.TemporaryDirectory() as certs:
        api_client = api.api_client()
        api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = clients + 4
        install_kueue_crds(api_client, crds)
        port = KubePort(api_client)
        port.create(Resource("", "v1", "namespaces", "Namespace", False), {"metadata": {"name": NS}})
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: _node(port, n), planned_nodes + [f"s{i:04d}" for i in range(spares)]))
        _workload(port, pods, planned)

        settings = WebhookSettings(namespace=NS, timeout_seconds=timeout)
        cert = ensure_serving_cert(Path(certs), ["127.0.0.1"], generate=True)
        assert cert.ca_pem is not None
        webhook_port = KubePort(api.api_client(), settings.api_retry(), deadline=review_time_left)
        cache = WebhookCache(port, settings.gpu_resource).start()  # as atoll run: the watches keep the patient retries
        reviews: list[float] = []
        lock = threading.Lock()

        class Timed(PodPinner):
            def review(self, body: Any) -> dict[str, Any]:
                t = time.perf_counter()
                try:
                    return super().review(body)
                finally:
                    with lock:
                        reviews.append(time.perf_counter() - t)

        server = WebhookServer(Timed(webhook_port, settings, cache=cache), cert.cert_file, cert.key_file, bind="127.0.0.1", port=0).start()
        admission = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False)
        try:
            if not cache.wait_synced(60):
                raise EnvtestError(f"the webhook's cache did not sync: {cache.last_error}")
            port.create(admission, _configuration(f"https://127.0.0.1:{server.port}/mutate-pods", cert.ca_pem, timeout))

            def create_all(generation: str) -> tuple[list[float], list[str], list[dict[str, Any]]]:
                took: list[float] = []
                refused: list[str] = []
                made: list[dict[str, Any]] = []

                def one(i: int) -> None:
                    t = time.perf_counter()
                    try:
                        out = port.create(PODS, _pod(f"train-{i}-{generation}", i if ranked else None, planned))
                    except errors.ApiError as exc:
                        with lock:
                            refused.append(str(exc)[:200])
                        return
                    with lock:
                        took.append(time.perf_counter() - t)
                        made.append(out)

                with ThreadPoolExecutor(clients) as pool:
                    list(pool.map(one, range(pods)))
                return took, refused, made

            _, refused_first, first = create_all("a")
            if refused_first:
                raise EnvtestError(f"first generation: {len(refused_first)} pods refused, e.g. {refused_first[0]}")

            def bind_and_fail(pod: dict[str, Any]) -> None:
                """What the scheduler and then the kubelet of a lost node write."""
                name = pod["metadata"]["name"]
                port.create(BINDINGS, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": NS},
                                       "target": {"kind": "Node", "name": pod["metadata"]["annotations"][ANN_NODE]}})
                port.apply(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
                                  "status": {"phase": "Failed", "reason": "NodeLost"}}, field_manager="kubelet", subresource="status")

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(bind_and_fail, first))
            for n in planned_nodes[:failed_nodes]:
                _not_ready(port, n)
            deadline = time.monotonic() + 60  # the burst starts once the webhook has seen the failures, as it would seconds later
            while time.monotonic() < deadline and any(
                    (p["status"] or {}).get("phase") != "Failed" for p in cache.podset_pods(NS, DECISION, "main")):
                time.sleep(0.05)
            reviews.clear()
            started = time.perf_counter()
            took, refused, second = create_all("b")
            wall = time.perf_counter() - started
            replaced = sum(1 for p in second if ANN_REPLACED in (p["metadata"].get("annotations") or {}))
            pinned = sum(1 for p in second if ANN_NODE in (p["metadata"].get("annotations") or {}))
            per_node = Counter(str((p["metadata"].get("annotations") or {}).get(ANN_NODE)) for p in second)
            overbooked = sum(n - 1 for n in per_node.values() if n > 1)  # each pod takes a whole 4-GPU node
        finally:
            server.stop()
            cache.stop()
    over = sum(1 for r in reviews if r > timeout)
    return {"pods": pods, "ranked": ranked, "clients": clients, "failed_nodes": failed_nodes, "spares": spares, "timeout_s": timeout,
            "created": len(second), "refused": len(refused), "pinned": pinned, "replaced": replaced, "overbooked": overbooked, "reviews": len(reviews),
            "reviews_over_timeout": over, "review_p50_ms": _ms(reviews, 50), "review_p99_ms": _ms(reviews, 99),
            "review_max_ms": _ms(reviews, 100), "create_p50_ms": _ms(took, 50), "create_p99_ms": _ms(took, 99),
            "wall_s": round(wall, 2), "refusals": refused[:3]}


def main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench webhook",
                                description="a burst of recreated pods through the webhook on a real kube-apiserver: review latency and refusals")
    p.add_argument("--pods", type=whole(1), default=500, help="pods per generation (one per planned node)")
    p.add_argument("--failed-nodes", type=whole(0), default=None,
                   help="planned nodes that go NotReady before the burst (default: 50, or every one when --pods is fewer)")
    p.add_argument("--spares", type=whole(0), default=None, help="spare nodes in the domain (default: --failed-nodes)")
    p.add_argument("--clients", type=whole(1), default=16, help="concurrent pod creators")
    p.add_argument("--ranked", action=argparse.BooleanOptionalAction, default=True,
                   help="pods carry a completion index (an Indexed Job); --no-ranked: each takes the next free slot (claims)")
    p.add_argument("--timeout-seconds", type=whole(1, 30), default=5, help="the webhook's timeoutSeconds (the chart's default is 5)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # a line per pod would time the terminal
    if args.failed_nodes is None:
        args.failed_nodes = min(50, args.pods)
    if args.failed_nodes > args.pods:
        print(f"atoll bench webhook: --failed-nodes ({args.failed_nodes}) must be at most --pods ({args.pods}): only planned nodes fail",
              file=sys.stderr)
        return 2
    spares = args.failed_nodes if args.spares is None else args.spares
    try:  # the test control plane is test infrastructure: it lives in a clone's tests/, never in the installed package
        from tests.envtest import EnvtestError
    except ImportError:
        print("atoll bench webhook: it starts the test control plane of Atoll's repository (tests/envtest): run it from "
              "the root of a clone, after `make envtest`", file=sys.stderr)
        return 1

    try:
        row = run_bench(args.pods, failed_nodes=args.failed_nodes, spares=spares, clients=args.clients, ranked=args.ranked,
                        timeout=args.timeout_seconds)
    except EnvtestError as exc:
        print(f"atoll bench webhook: {exc}", file=sys.stderr)
        return 1
    ok = row["created"] == row["pods"] and row["refused"] == 0 and row["reviews_over_timeout"] == 0 and row["overbooked"] == 0
    if args.format == "json":
        print(json.dumps({**row, "goal_met": ok}))
    else:
        columns = ("pods", "ranked", "clients", "failed_nodes", "created", "refused", "replaced", "overbooked", "reviews", "review_p50_ms",
                   "review_p99_ms", "review_max_ms", "create_p50_ms", "create_p99_ms", "wall_s")
        print(" | ".join(columns))
        print(" | ".join(str(row[c]) for c in columns))
        verdict = "PASS" if ok else "FAIL"
        print(f"{verdict} webhook burst: {row['created']}/{row['pods']} recreated pods created, {row['refused']} refused, "
              f"{row['reviews_over_timeout']} reviews over the {row['timeout_s']} s timeout, {row['overbooked']} pods pinned to a node "
              "already full (goal: all created, none over, none overbooked)")
        for r in row["refusals"]:
            print(f"  refused: {r}")
    return 0 if ok else 1
