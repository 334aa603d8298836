"""``atoll queue`` on the live (real) apiserver: the waiting line as a table and as JSON; read-only."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from admission.cli._queue import main
from tests.admission.fabric import Fabric, run

pytestmark = pytest.mark.apiserver


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()  # the command configures process-wide logging


def queue(fabric: Fabric, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--namespace", fabric.ns, "--admission-check", fabric.check, *extra], stdout=out, api_client=fabric.api)
    return code, out.getvalue()


def test_queue_lists_the_waiting_gang_with_its_reason(fabric: Fabric) -> None:
    fabric.install()
    for b in range(2):
        for c in range(2):
            fabric.bind_pod(f"busy-{b}{c}", fabric.node_name(b, c, 0), 4)
    fabric.submit("gang", [("main", 2, 4)])
    fabric.submit("one", [("main", 1, 4)])
    run(fabric.controller())
    rv = fabric.workload("gang")["metadata"]["resourceVersion"]
    code, out = queue(fabric, "--format", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert (row["workload"], row["gpus"], row["reason"], row["state"]) == (f"{fabric.ns}/gang", 8, "no-domain", "Retry")
    assert row["words"][0].startswith("needs 8 GPUs (2 pods of 4) in one gpu.clique; the largest free block is 4")
    code, out = queue(fabric, "--queue", "lq")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("WORKLOAD") and lines[1].startswith(f"{fabric.ns}/gang")
    assert "strict" in lines[1] and "no-domain" in lines[1] and lines[2].strip().startswith("needs 8 GPUs")
    code, out = queue(fabric, "--queue", "nobody")
    assert code == 0 and out.strip() == "No Workload waits on Atoll's check."
    assert fabric.workload("gang")["metadata"]["resourceVersion"] == rv  # the command writes nothing


def test_queue_format_is_checked(fabric: Fabric, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--format", "yaml"], stdout=io.StringIO(), api_client=fabric.api)
    assert exc.value.code == 2 and "--format" in capsys.readouterr().err


def test_queue_shows_the_reservation_a_controller_wrote_and_its_expected_start(fabric: Fabric) -> None:
    """The command reads the cluster afresh: the reservation comes from the gang's Workload,
    where the controller wrote it, with its domain in HELD and its expected free time as START."""
    from admission.controller._records import iso_time
    from tests.admission.controller.test_queue_state import reserving

    ctrl = reserving(fabric)  # the gang reserves the half-full clique, expected free when its Workload's limit ends
    held = ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang")
    assert held is not None and held.expected_free is not None
    code, out = queue(fabric, "--format", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["workload"] == f"{fabric.ns}/gang" and row["held"]["kind"] == "reservation"
    assert row["held"]["domain"] == "/".join(held.path) and row["expected_start"] == iso_time(held.expected_free)
    assert f"gpu.clique {'/'.join(held.path)} is reserved for it and expected free in ~" in row["words"][0]
    code, out = queue(fabric)
    (line,) = [ln for ln in out.splitlines() if ln.startswith(f"{fabric.ns}/gang")]
    assert code == 0 and "/".join(held.path) in line and line.rstrip().endswith(iso_time(held.expected_free))
