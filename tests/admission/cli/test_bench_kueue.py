"""``atoll bench kueue`` without a control plane: bad sizes get one line, the table's figures
come from the create and admission times, and the Workloads are what each arm asks of Kueue."""

from __future__ import annotations

import pytest

from admission import vocabulary
from admission.cli._bench_kueue import RACK, _row, _workload, main


@pytest.mark.parametrize("flag", ["--nodes=0", "--workloads=0", "--queues=0", "--rate=0"])
def test_bad_sizes_get_one_line_naming_the_flags(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nodes, --workloads and --queues must be ≥ 1 and --rate > 0" in err[0]


def test_the_row_counts_time_to_admission_from_create_and_leaves_the_unadmitted_out() -> None:
    created = {"bench-tas/w0": 10.0, "bench-tas/w1": 11.0, "bench-tas/w2": 12.0, "bench-atoll/w0": 10.0}
    admitted = {"bench-tas/w0": 10.5, "bench-tas/w1": 12.5, "bench-atoll/w0": 30.0}
    classes = {"bench-tas/w0": "small", "bench-tas/w1": "large", "bench-tas/w2": "small", "bench-atoll/w0": "small"}
    row = _row("tas", created, admitted, classes)
    assert (row["workloads"], row["admitted"]) == (3, 2)
    assert row["tta_mean_ms"] == 1000.0 and row["tta_max_ms"] == 1500.0
    assert row["tta_small_ms"] == 500.0 and row["tta_large_ms"] == 1500.0 and row["tta_medium_ms"] is None
    assert row["admissions_per_s"] == round(2 / 2.5, 2)  # first create 10.0 to last admission 12.5


def test_kueues_arm_asks_its_tas_and_atolls_arm_asks_a_profile() -> None:
    tas = _workload("tas", "w1", 2, 4, "1250m", required=True)["spec"]["podSets"][0]
    atoll = _workload("atoll", "w1", 2, 4, "1250m", required=False)["spec"]["podSets"][0]
    assert tas["topologyRequest"] == {"required": RACK} and "topologyRequest" not in atoll
    assert atoll["template"]["metadata"]["annotations"] == {vocabulary.PROFILE: "elastic"}
    assert tas["count"] == atoll["count"] == 4
    assert tas["template"]["spec"] == atoll["template"]["spec"]
