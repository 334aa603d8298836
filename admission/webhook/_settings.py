"""The webhook's settings: one group, documented with units and the reason for each default."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from admission.kube import ApiRetrySettings
from topology import check_accelerator_resource

__all__ = ["WebhookSettings"]


class WebhookSettings(BaseModel):
    """Serving the exact-placement webhook (``atoll run --webhook-*``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(default=0, ge=0, le=65535)
    """HTTPS port of ``/mutate-pods`` (0 = not served). The chart uses 9443."""
    bind_address: str = "0.0.0.0"
    cert_dir: str = "/tmp/k8s-webhook-server/serving-certs"
    """Directory with ``tls.crt`` and ``tls.key`` (and ``ca.crt`` when Atoll made them)."""
    generate_certs: bool = False
    """Make a self-signed CA and serving certificate at start when ``cert_dir`` has none, and put
    the CA into the caBundle of ``config``."""
    service: str = "atoll-webhook"
    """Service name the apiserver calls; the serving certificate is made for its DNS names."""
    namespace: str = "atoll-system"
    """Namespace of that Service, and of the claims Lease."""
    claims_lease: str = "atoll-webhook-claims"
    """Lease (in ``namespace``) holding slots handed to pods not stored yet, shared by all replicas."""
    config: str = "atoll-webhook"
    """MutatingWebhookConfiguration whose caBundle gets the generated CA."""
    cert_days: int = Field(default=365, gt=0, le=3650)
    """Validity (days) of a generated serving certificate; one with less than a third of that (at
    most 30 days) left is made anew, at start and while serving."""
    cert_check_seconds: float = Field(default=10.0, gt=0)
    """How often (s) the serving certificate is checked while serving: changed files (a rotation
    by cert-manager) are served to new connections; a generated one near expiry is made anew,
    its CA put into the caBundle first."""
    ca_bundle_recheck_seconds: float = Field(default=60.0, gt=0)
    """How often (s) the caBundle is checked and our CA put back (an upgrade may have reset it)."""
    gpu_resource: str = "nvidia.com/gpu"
    """Extended resource counted as GPUs when checking a replacement node's room."""
    accelerators: tuple[str, ...] = ()
    """Further accelerator resources counted as GPUs besides ``gpu_resource``: those the profiles
    document's flavors name (``gpuResource``: ``amd.com/gpu``, ``habana.ai/gaudi``, …), so a
    replacement node of such a flavor shows its room (``atoll run --accelerator-resources``)."""
    claim_seconds: float = Field(default=30.0, gt=0)
    """How long (s) a slot handed to a pod that is not stored yet stays claimed: the apiserver
    stores the pod right after admission (webhook timeouts are at most 30 s); a pod refused later
    by another admission step never appears and its slot frees after this."""
    field_manager: str = "atoll-webhook"
    """Server-side-apply manager of the condition the webhook sets on a Workload; distinct from the
    controller's (``atoll``) so neither's apply removes the other's fields."""
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    """Largest AdmissionReview accepted (bytes); the apiserver caps objects at about 3 MiB."""
    timeout_seconds: int = Field(default=5, ge=1, le=30)
    """The MutatingWebhookConfiguration's ``timeoutSeconds`` (the chart passes its value; the
    apiserver allows 1-30): the apiserver stops waiting then, so the API retries must end sooner."""
    api_share: float = Field(default=0.8, gt=0, lt=1)
    """Share of ``timeout_seconds`` one API call may take with its retries; the rest is margin
    for the review's own work and the answer's way back."""

    @field_validator("accelerators")
    @classmethod
    def _accelerator_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_accelerator_resource(v) for v in value)

    def resources(self) -> str | tuple[str, ...]:
        """What counts as GPUs: ``gpu_resource`` alone, or it and then ``accelerators``."""
        extra = tuple(a for a in dict.fromkeys(self.accelerators) if a != self.gpu_resource)
        return (self.gpu_resource, *extra) if extra else self.gpu_resource

    def api_retry(self) -> ApiRetrySettings:
        """Retries of one API call that end within ``api_share`` of the timeout: three attempts,
        waits of 5 % and 10 % of that budget, a server's Retry-After capped at 10 %."""
        budget = self.timeout_seconds * self.api_share
        backoffs, cap = (budget * 0.05, budget * 0.1), budget * 0.1
        attempt = (budget - sum(max(b, cap) for b in backoffs)) / (len(backoffs) + 1)
        return ApiRetrySettings(backoffs=backoffs, request_timeout=attempt, max_retry_after=cap)
