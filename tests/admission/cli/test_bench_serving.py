"""``atoll bench serving``: on a busy GB200 with training, Atoll's bandwidth edge keeps every KV
transfer on NVLink, and count-only placement does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.cli import main
from admission.cli._bench_quality import traces_dir
from admission.cli._bench_serving import FILL, _itp_sizes, busy_gb200, mixed_pool_table, place_serving


def test_the_busy_model_is_at_the_stated_occupancy() -> None:
    state = busy_gb200(0.85, 0, _itp_sizes(traces_dir() / "msft_itp_cluster04_day00-14.csv"))
    used = 1 - state.snapshot.free_gpus() / state.snapshot.total_gpus()
    assert 0.8 < used <= 0.85 < FILL


def _has_azure() -> bool:
    from admission.cli._bench_serving import azure_trace

    try:
        return azure_trace().is_file()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not _has_azure(), reason="the Azure LLM trace is not in ../shared/traces (set ATOLL_TRACES_DIR)")
def test_atoll_keeps_the_kv_edge_on_nvlink_and_is_never_slower(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "serving", "--occupancies", "0.85", "--seeds", "2", "--skip-mixed", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["rows"]
    ours = row["policies"]["atoll-graph"]
    assert out["kv_bytes_per_token"] == 320 * 1024 and out["pass"]
    assert all(e.startswith("gpu.clique@") for e in ours["edges"]) and ours["kv_over_budget"] == 0.0
    assert all(ours["ttft_p99_ms"] <= row["policies"][p]["ttft_p99_ms"] for p in ("level-only", "kueue-bestfit", "count-only"))


def test_count_only_leaves_the_edge_to_chance_where_atoll_does_not() -> None:
    sizes = _itp_sizes(traces_dir() / "msft_itp_cluster04_day00-14.csv")
    crossed = 0
    for seed in range(3):
        snap = busy_gb200(0.85, seed, sizes).snapshot
        prefill, decode = place_serving(snap, "atoll-graph")  # type: ignore[misc]
        assert len({n.rsplit("-", 1)[0] for n in (*prefill, *decode)}) == 1  # one rack
        got = place_serving(snap, "count-only")
        assert got is not None
        crossed += len({n.rsplit("-", 1)[0] for n in (*got[0], *got[1])}) > 1
    assert crossed >= 1


def test_kueue_bestfit_places_each_podset_on_its_own_best_fit_island() -> None:
    """Kueue's preferred mode ties nothing between PodSets: on a busy pool its best fit for decode
    alone is, on some seed, another rack than prefill's, where Atoll's edge keeps one rack."""
    sizes = _itp_sizes(traces_dir() / "msft_itp_cluster04_day00-14.csv")
    racks = []
    for seed in range(3):
        got = place_serving(busy_gb200(0.75, seed, sizes).snapshot, "kueue-bestfit")
        assert got is not None and len(got[0]) == 1 and 1 <= len(got[1]) <= 2
        racks.append(len({n.rsplit("-", 1)[0] for n in (*got[0], *got[1])}))
    assert max(racks) > 1


def test_a_missing_azure_trace_is_one_line_naming_where_to_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert main(["bench", "serving", "--occupancies", "0.85", "--seeds", "1", "--skip-mixed"]) == 2
    lines = [line for line in capsys.readouterr().err.strip().splitlines()
             if not line.startswith("atoll: compiling")]  # a cold numba cache says so first
    assert len(lines) == 1
    err = lines[0]
    assert "azure_llm_conv_2023-11-16_before1845.csv not found in" in err and "ATOLL_TRACES_DIR" in err


def test_an_installed_package_asks_for_atoll_traces_dir_instead_of_guessing_a_folder_beside_site_packages(tmp_path: Path) -> None:
    from admission.cli._bench_serving import _beside_checkout

    checkout = tmp_path / "atoll"
    (checkout / "admission" / "cli").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\n")
    assert _beside_checkout(checkout / "admission" / "cli" / "_bench_serving.py") == tmp_path / "shared" / "traces"
    installed = tmp_path / "venv" / "site-packages"
    (installed / "admission" / "cli").mkdir(parents=True)
    assert _beside_checkout(installed / "admission" / "cli" / "_bench_serving.py") is None


def test_bad_occupancies_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "serving", "--occupancies", "0.99"]) == 2
    assert "--occupancies" in capsys.readouterr().err


def test_the_mixed_pool_places_every_replica_one_per_rack_and_counts_the_gangs_after_them() -> None:
    table = mixed_pool_table([0])
    rows = table["rows"]
    assert rows["no inference"]["replicas"] == 0 and rows["atoll"]["replicas"] == rows["emptiest"]["replicas"] == 16
    for row in rows.values():
        assert 0 < row["one_island"] <= row["placed"] <= table["gangs"]
    assert rows["atoll"]["placed"] < rows["no inference"]["placed"]  # 128 GPUs fewer for training
