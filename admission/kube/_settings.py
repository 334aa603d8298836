"""Settings of the Kubernetes side: retries of one API call and leader election.

Grouped like the controller's (``admission.controller.Settings`` holds them as ``api`` and
``leader``), documented with units and the reason for each default.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ApiRetrySettings", "LeaderSettings"]


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

class ApiRetrySettings(_Group):
    """Retries of one API call that failed transiently (429, 5xx, network)."""

    backoffs: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    """Waits (s) between attempts; its length is the number of retries. They add up to under 8 s,
    but a call may take far longer: each attempt may wait ``request_timeout``, and a server's
    Retry-After replaces the wait (up to ``max_retry_after``); ``worst_case_seconds`` is the
    bound (330 s with the defaults). The lease is not renewed on this policy (one attempt per
    round, within the renew deadline), and a controller's write attempt ends within its lease
    term (``KubePort``'s ``fence``)."""
    max_retry_after: float = Field(default=30.0, gt=0)
    """Cap (s) on a server's Retry-After, so one answer cannot stall the controller."""
    request_timeout: float = Field(default=30.0, gt=0)
    """Timeout (s) of one attempt of a non-watch request."""

    @property
    def worst_case_seconds(self) -> float:
        """Longest one call can take: every attempt timing out, every wait at its longest."""
        waits = sum(max(b, self.max_retry_after) for b in self.backoffs)
        return (len(self.backoffs) + 1) * self.request_timeout + waits


class LeaderSettings(_Group):
    """Leader election on a coordination.k8s.io/v1 Lease (client-go's defaults)."""

    enabled: bool = True
    lease_name: str = "atoll-controller"
    identity: str = ""
    """Holder identity; empty means hostname + process id."""
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    """A standby takes over this long (s) after the last renewal it observed."""
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    """The leader gives up (and stops deciding) if it could not renew for this long (s)."""
    retry_period_seconds: float = Field(default=2.0, gt=0)
    """Period (s) of renewal and of a standby's acquisition attempts."""
    write_margin_seconds: float = Field(default=1.0, ge=0)
    """A write attempt must end this long (s) before the leader's term may have lapsed (the renew
    deadline after the sending of its last renewal): room for a request the attempt's deadline
    cannot end (delayed on its way to the server, which counts the deadline from when it got
    it). Below the renew deadline, or the leader could never write."""

    @field_validator("renew_deadline_seconds")
    @classmethod
    def _below_duration(cls, value: float, info: object) -> float:
        duration = getattr(info, "data", {}).get("lease_duration_seconds", 15.0)
        if value >= duration:
            raise ValueError(f"renew_deadline_seconds ({value}) must be < lease_duration_seconds ({duration})")
        return value

    @field_validator("write_margin_seconds")
    @classmethod
    def _below_deadline(cls, value: float, info: object) -> float:
        deadline = getattr(info, "data", {}).get("renew_deadline_seconds", 10.0)
        if value >= deadline:
            raise ValueError(f"write_margin_seconds ({value}) must be < renew_deadline_seconds ({deadline}): "
                             "lower it, or the leader could never write")
        return value

