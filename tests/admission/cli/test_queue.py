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
