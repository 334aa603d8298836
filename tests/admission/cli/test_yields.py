"""``atoll yields`` on the real apiserver: it lists the Workloads Atoll deactivated to give their
quota back, and ``--end`` reactivates exactly those (what the chart's pre-delete hook runs)."""

from __future__ import annotations

import io
import json
import time

import pytest

from admission.cli._yields import main
from admission.vocabulary import QUOTA_YIELD, QUOTA_YIELD_UNTIL
from tests.admission.fabric import Fabric
from tests.kube_objects import workload

pytestmark = pytest.mark.apiserver


def create(fabric: Fabric, name: str, *, yielded_to: str | None) -> None:
    ann = {QUOTA_YIELD: yielded_to, QUOTA_YIELD_UNTIL: str(time.time() + 600)} if yielded_to else None
    manifest = workload(fabric.ns, name, [("main", 2, 4)], annotations=ann)
    manifest["spec"]["active"] = False
    fabric.kueue.create(manifest)


def yields(fabric: Fabric, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--workload-namespace", fabric.ns, "--format", "json", *extra], stdout=out, api_client=fabric.api)
    return code, out.getvalue()


def test_yields_lists_and_ends_only_atolls_own_deactivations(fabric: Fabric) -> None:
    fabric.install()
    create(fabric, "gave", yielded_to=f"{fabric.ns}/waiter")
    create(fabric, "paused", yielded_to=None)  # deactivated by its owner: not Atoll's to touch
    code, out = yields(fabric)
    (row,) = json.loads(out)
    assert code == 0 and row["workload"] == f"{fabric.ns}/gave" and row["waiter"] == f"{fabric.ns}/waiter"
    assert row["active"] is False and 500 < row["until_seconds"] <= 600
    assert fabric.workload("gave")["spec"]["active"] is False  # listing writes nothing

    code, out = yields(fabric, "--end")
    (row,) = json.loads(out)
    assert code == 0 and row["ended"] is True and row["active"] is True
    gave = fabric.workload("gave")
    assert gave["spec"]["active"] is True
    assert not {QUOTA_YIELD, QUOTA_YIELD_UNTIL} & set(gave["metadata"].get("annotations") or {})
    assert fabric.workload("paused")["spec"]["active"] is False
    code, out = yields(fabric)
    assert code == 0 and json.loads(out) == []


def test_yields_table_says_when_there_is_none(fabric: Fabric) -> None:
    fabric.install()
    out = io.StringIO()
    assert main(["--workload-namespace", fabric.ns], stdout=out, api_client=fabric.api) == 0
    assert out.getvalue().strip() == "No Workload has given its quota back."
