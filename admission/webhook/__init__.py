"""Exact placement: a mutating admission webhook that pins each pod of an Atoll-placed Workload
under ``enforcement: exact`` to one planned node at CREATE, and replaces a failed node inside
the pod's domain.

Rooms: ``_pin`` (slots, ranks and the JSON patch; pure), ``_cluster`` (what it reads through the
cluster port, and the one Workload condition it writes), ``_handler`` (AdmissionReview in and
out, the choice of slot and node), ``_claims`` (slots handed to pods not stored yet, shared by
every replica through a Lease), ``_server`` (HTTPS), ``_certs`` (serving certificate and
caBundle), ``_serve`` (the whole webhook for ``atoll run``), ``_settings``, ``_cache`` (pods, nodes
and exact Workloads, fed by watches: an admission call reads memory), ``_budget`` (one time
budget per review). It imports the
controller's readers and the cluster port; only ``admission.cli`` imports it.

Exports load on first use: ``atoll run`` without a webhook port never imports ``cryptography``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from admission.webhook._budget import review_time_left
    from admission.webhook._cache import WebhookCache
    from admission.webhook._certs import CertError, ServingCert, ensure_serving_cert, merge_ca_bundle, service_hosts
    from admission.webhook._cluster import REQUEUE_CONDITION
    from admission.webhook._handler import PinResult, PodPinner, ReviewError
    from admission.webhook._pin import ANN_NODE, ANN_PREVIOUS, ANN_REPLACED, ANN_SLOT, pod_rank
    from admission.webhook._serve import MUTATING_WEBHOOK_CONFIGURATIONS, CaBundlePublisher, Webhook
    from admission.webhook._server import MUTATE_PATH, WebhookServer
    from admission.webhook._settings import WebhookSettings

_WHERE = {
    "ANN_NODE": "_pin",
    "ANN_PREVIOUS": "_pin",
    "ANN_REPLACED": "_pin",
    "ANN_SLOT": "_pin",
    "MUTATE_PATH": "_server",
    "MUTATING_WEBHOOK_CONFIGURATIONS": "_serve",
    "REQUEUE_CONDITION": "_cluster",
    "CaBundlePublisher": "_serve",
    "CertError": "_certs",
    "PinResult": "_handler",
    "PodPinner": "_handler",
    "ReviewError": "_handler",
    "ServingCert": "_certs",
    "Webhook": "_serve",
    "WebhookCache": "_cache",
    "WebhookServer": "_server",
    "WebhookSettings": "_settings",
    "ensure_serving_cert": "_certs",
    "merge_ca_bundle": "_certs",
    "pod_rank": "_pin",
    "review_time_left": "_budget",
    "service_hosts": "_certs",
}

__all__ = [
    "ANN_NODE",
    "ANN_PREVIOUS",
    "ANN_REPLACED",
    "ANN_SLOT",
    "MUTATE_PATH",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "REQUEUE_CONDITION",
    "CaBundlePublisher",
    "CertError",
    "PinResult",
    "PodPinner",
    "ReviewError",
    "ServingCert",
    "Webhook",
    "WebhookCache",
    "WebhookServer",
    "WebhookSettings",
    "ensure_serving_cert",
    "merge_ca_bundle",
    "pod_rank",
    "review_time_left",
    "service_hosts",
]


def __getattr__(name: str) -> Any:
    """Import the module defining ``name`` when it is first asked for."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
