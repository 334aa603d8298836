"""The controller's settings refuse a combination under which liveness would kill a busy leader."""

from __future__ import annotations

import pytest

from admission.controller import ServeSettings, Settings
from admission.kube import ApiRetrySettings


def test_the_defaults_let_a_worker_turn_end_well_inside_the_stall_limit() -> None:
    s = Settings()
    assert s.worker_turn_worst_case_seconds == 3 * s.api.request_timeout < s.serve.stall_seconds


def test_a_request_timeout_that_could_stall_the_worker_past_liveness_is_refused_naming_both_fields() -> None:
    with pytest.raises(ValueError, match=r"api\.request_timeout \(50 s\).*150 s.*serve\.stall_seconds \(120 s\)"):
        Settings(api=ApiRetrySettings(request_timeout=50))
    with pytest.raises(ValueError, match=r"lower api\.request_timeout or raise serve\.stall_seconds"):
        Settings(serve=ServeSettings(stall_seconds=60))
    assert Settings(api=ApiRetrySettings(request_timeout=50), serve=ServeSettings(stall_seconds=151)).serve.stall_seconds == 151
