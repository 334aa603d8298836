"""Kueue's own webhooks are served in the tier, registered as its kustomization builds them: a Job
or a JobSet a user submits to a LocalQueue, unsuspended, comes back suspended (Kueue's mutating
webhooks for them), and a bad queue name is refused by its validating webhook. Without them the
apiserver would store what was sent."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.envtest._kueue_webhooks import kueue_webhook_configurations
from tests.kueue.conftest import Live, model_job
from tests.kueue.test_jobset import JOBSET_GROUP, JOBSET_VERSION, jobset

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS = "team-a"


def test_kueues_webhook_configurations_are_its_kustomizations_with_the_system_namespaces_kept_out() -> None:
    configs = {c["metadata"]["name"]: c for c in kueue_webhook_configurations("https://127.0.0.1:1", b"ca")}
    assert set(configs) == {"kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"}
    hooks = {h["name"]: h for c in configs.values() for h in c["webhooks"]}
    for name in ("mjobset.kb.io", "vjobset.kb.io", "mjob.kb.io", "vpod.kb.io"):  # the kustomization's patch and replacements
        assert hooks[name]["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}], name
    assert hooks["mjobset.kb.io"]["clientConfig"]["url"] == "https://127.0.0.1:1/mutate-jobset-x-k8s-io-v1alpha2-jobset"
    assert "workloads/status" in hooks["vworkload.kb.io"]["rules"][0]["resources"]  # Atoll's status writes are validated too
    assert all("service" not in h["clientConfig"] and h["clientConfig"]["caBundle"] == "Y2E=" for h in hooks.values())


def test_a_job_and_a_jobset_submitted_unsuspended_to_a_local_queue_come_back_suspended_by_kueue(live: Live) -> None:
    job = model_job("llm-pretrain", "webhook-job", suspend=False)
    job["metadata"]["labels"] = {**job["metadata"].get("labels", {}), "kueue.x-k8s.io/queue-name": "research"}
    js = jobset("webhook-set", {"workers": (1, 2)})  # not suspended, as a user writes it
    created: dict[str, Any] = {}
    try:
        created = live.submit(job)
        assert created["spec"]["suspend"] is True  # Kueue's Job webhook answered the create
        made = live.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, "jobsets", js)
        assert made["spec"]["suspend"] is True  # Kueue's JobSet webhook answered the create
    finally:
        if created:
            live.delete(created)
        try:
            live.custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, "jobsets", "webhook-set",
                                                        propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_kueues_validating_webhook_refuses_a_bad_queue_name(live: Live) -> None:
    job = model_job("llm-pretrain", "bad-queue-job")
    job["metadata"]["labels"] = {**job["metadata"].get("labels", {}), "kueue.x-k8s.io/queue-name": "Research_Q"}
    with pytest.raises(ApiException) as err:
        live.submit(job)
    assert err.value.status in (400, 403, 422) and "queue-name" in str(err.value.body), err.value.body
