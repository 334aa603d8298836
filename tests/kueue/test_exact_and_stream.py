"""Real Kueue under exact enforcement (the webhook served to the apiserver pins every pod the Job
controller creates), and a stream of Jobs with deletions mid-decision and a restart of Atoll
mid-stream, ending with the no-double-booking invariant read from the live API."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission.controller import decode_planned
from admission.kube import KubePort
from admission.webhook import ANN_SLOT, PodPinner, WebhookServer, WebhookSettings, ensure_serving_cert
from tests.admission.webhook.conftest import NS_LABEL, webhook_configuration
from tests.kueue.conftest import ATOLL_NS, BLOCKS, CLIQUE, HOST, RACKS, TRAYS, Live, check_entry, is_true, model_job, model_profiles, wait_for

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

INDEX = "batch.kubernetes.io/job-completion-index"
NS = "team-a"


@contextmanager
def served_webhook(live: Live, certs: Path) -> Iterator[None]:
    """Atoll's webhook on a loopback HTTPS port, registered with the apiserver (the chart's
    objectSelector, a URL instead of a Service) for the Jobs' namespace only."""
    cert = ensure_serving_cert(certs, ["127.0.0.1", "localhost"], generate=True)
    assert cert.ca_pem is not None
    pinner = PodPinner(KubePort(live.client), WebhookSettings(namespace=ATOLL_NS))
    assert pinner.start(60), f"the webhook's cache did not list the cluster: {pinner.cache.last_error}"
    server = WebhookServer(pinner, cert.cert_file, cert.key_file, bind="127.0.0.1", port=0).start()
    admission = client.AdmissionregistrationV1Api(live.client)
    live.core.patch_namespace(NS, {"metadata": {"labels": {NS_LABEL: NS}}})
    name = "atoll-kueue-tier"
    admission.create_mutating_webhook_configuration(
        webhook_configuration(name, f"https://127.0.0.1:{server.port}/mutate-pods", cert.ca_pem, NS))
    try:
        yield
    finally:
        admission.delete_mutating_webhook_configuration(name)
        server.stop()
        pinner.close()


def pinned_node(pod: Any) -> str | None:
    """The one hostname the pod's required node affinity allows (None: not pinned)."""
    affinity = pod.spec.affinity.node_affinity if pod.spec.affinity and pod.spec.affinity.node_affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    hosts = {tuple(e.values) for t in (required.node_selector_terms if required else []) for e in t.match_expressions or []
             if e.key == HOST}
    return hosts.pop()[0] if len(hosts) == 1 and len(next(iter(hosts))) == 1 else None


def test_under_exact_the_webhook_pins_every_pod_kueue_releases_to_its_planned_tray(live: Live, tmp_path: Path) -> None:
    live.set_profiles(model_profiles("exact"))
    job = model_job("llm-pretrain", "pretrain-exact")  # Indexed, 16 pods x 4 GPUs, strict: one NVL72 rack
    try:
        with served_webhook(live, tmp_path / "certs"), live.history(NS) as history, live.controller():
            job = live.submit(job)
            wl, _ = history.wait(job, "admitted", lambda wl: is_true(wl, "Admitted"))
            (update,) = check_entry(wl)["podSetUpdates"]
            assert update["labels"]["atoll.dev/enforcement"] == "exact"
            planned = decode_planned(update["annotations"]["atoll.dev/planned-nodes"])
            slots = [node for node, count in planned.items() for _ in range(count)]
            pods = live.wait_bound(job, 16)
            for pod in pods:  # the Job controller's pods came through the webhook: each pinned, and bound where pinned
                index = int(pod.metadata.labels[INDEX])
                assert pinned_node(pod) == pod.spec.node_name == slots[index], (pod.metadata.name, index)
                assert pod.metadata.annotations[ANN_SLOT] == str(index)
                assert pod.spec.node_selector[CLIQUE] == update["nodeSelector"][CLIQUE]
            assert Counter(p.spec.node_name for p in pods) == Counter(planned)
            assert live.gpus_booked_beyond_allocatable() == {}
    finally:
        live.set_profiles(model_profiles())
        if "uid" in job["metadata"]:
            live.delete(job)


def test_jobs_deleted_mid_decision_and_atoll_restarted_mid_stream_leave_every_pod_in_its_domain_and_no_tray_booked_twice(
        live: Live) -> None:
    """Twenty 4-tray strict Jobs for four 18-tray racks (room for sixteen): four are deleted as soon
    as Kueue reserves their quota (Atoll is deciding them), and Atoll is stopped after the first
    admissions and a fresh one started while the rest wait on its check."""
    live.set_profiles(model_profiles(strict={"retry": {"initialSeconds": 3, "maxSeconds": 3}}))
    jobs = [model_job("llm-pretrain", f"stream-{i:02d}", parallelism=4, completions=4) for i in range(20)]
    doomed = {"stream-03", "stream-07", "stream-12", "stream-16"}
    submitted: list[dict[str, Any]] = []
    try:
        with live.history(NS) as history:
            with live.controller():
                for job in jobs[:10]:
                    submitted.append(live.submit(job))
                for job in submitted:
                    if job["metadata"]["name"] in doomed:
                        history.wait(job, "quota reserved", lambda wl: is_true(wl, "QuotaReserved"))
                        live.batch.delete_namespaced_job(job["metadata"]["name"], NS, propagation_policy="Background")
                first = next(j for j in submitted if j["metadata"]["name"] not in doomed)
                history.wait(first, "admitted before the restart", lambda wl: is_true(wl, "Admitted"))
            # Atoll is down: Kueue keeps reserving quota for new Jobs, which wait on the check
            for job in jobs[10:]:
                submitted.append(live.submit(job))
            with live.controller():
                for job in submitted[10:]:
                    if job["metadata"]["name"] in doomed:
                        history.wait(job, "quota reserved", lambda wl: is_true(wl, "QuotaReserved"))
                        live.batch.delete_namespaced_job(job["metadata"]["name"], NS, propagation_policy="Background")
                kept = [j for j in submitted if j["metadata"]["name"] not in doomed]
                assert len(kept) == BLOCKS * RACKS * (TRAYS // 4)  # exactly what fits: every tray count must come out right
                for job in kept:
                    history.wait(job, "admitted", lambda wl: is_true(wl, "Admitted"))
                nodes = live.node_labels()
                decisions = set()
                for job in kept:
                    wl = live.workload(job)
                    assert wl is not None and is_true(wl, "Admitted")
                    (update,) = check_entry(wl)["podSetUpdates"]
                    decision = update["annotations"]["atoll.dev/decision-id"]
                    decisions.add(decision)
                    pods = live.wait_bound(job, 4)
                    assert {nodes[p.spec.node_name][CLIQUE] for p in pods} == {update["nodeSelector"][CLIQUE]}
                    assert {p.metadata.labels["atoll.dev/decision-id"] for p in pods} == {decision}
                assert len(decisions) == len(kept)
                for job in submitted:
                    if job["metadata"]["name"] in doomed:
                        wait_for(f"{job['metadata']['name']}: Workload and pods gone", lambda job=job: live.workload(job) is None
                                 and not live.pods(job))
                # the invariant, from the live API: no node holds more GPUs than it has, and every bound
                # pod of the stream is one of the kept Jobs' pods (64 trays, 16 per rack at most)
                assert live.gpus_booked_beyond_allocatable() == {}
                bound = [p for p in live.core.list_namespaced_pod(NS).items if p.spec.node_name]
                assert len(bound) == 4 * len(kept) == len({p.spec.node_name for p in bound})
    finally:
        live.set_profiles(model_profiles())
        for job in submitted:
            live.delete(job)
