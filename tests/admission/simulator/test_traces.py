"""Trace readers on small CSVs (good rows, each kind of bad row), the real traces when present,
and offered-load scaling."""

from __future__ import annotations

import dataclasses
import os
import random
import re
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from admission.simulator import (
    Job,
    SyntheticParams,
    TraceError,
    make_job,
    offered_load,
    read_itp,
    read_openb,
    read_openb_nodes,
    read_trace,
    scale_load,
    synthetic_jobs,
)

ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
NODES = NODE_HEADER + "n0,32000,262144,0,\nn1,96000,393216,8,G2\nn2,96000,393216,8,G2\nn3,104000,524288,2,T4\n"


def write(tmp_path: Path, name: str, text: str, newline: str = "\n") -> Path:
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


def raises(match: str) -> AbstractContextManager[pytest.ExceptionInfo[TraceError]]:
    return pytest.raises(TraceError, match=re.escape(match))


# --------------------------------------------------------------------------------- ITP


def test_itp_rows_become_sorted_training_jobs_cut_into_pods(tmp_path: Path) -> None:
    path = write(tmp_path, "itp.csv", ITP_HEADER + "b,50,100,16\na,10,20.5,1\nc,50,7,8.0\nd,30,0,12\n")
    jobs = read_itp(path, gpus_per_node=8)
    assert [j.id for j in jobs] == ["a", "d", "b", "c"]  # by submit time; b and c tie and keep file order
    a, d, b, c = jobs
    assert (a.submit_s, a.duration_s, a.gpus, a.pods, a.gpus_per_pod) == (10.0, 20.5, 1, 1, 1)
    assert (b.pods, b.gpus_per_pod) == (2, 8)
    assert (c.gpus, c.pods) == (8, 1)  # "8.0" is an integer count
    assert (d.pods, d.gpus_per_pod, d.duration_s) == (2, 6, 0.0)
    assert {j.kind for j in jobs} == {"training"} and {j.queue for j in jobs} == {"default"}


def test_itp_reads_crlf_and_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "itp.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (ITP_HEADER + "a,1,2,4\n").replace("\n", "\r\n").encode())
    assert [(j.id, j.gpus) for j in read_itp(path)] == [("a", 4)]


def test_itp_finds_columns_by_name_in_any_order(tmp_path: Path) -> None:
    path = write(tmp_path, "itp.csv", "num_gpu,duration,extra,job_id,submission_time\n2,30,x,j,5\n")
    (job,) = read_itp(path)
    assert (job.id, job.submit_s, job.duration_s, job.gpus) == ("j", 5.0, 30.0, 2)


def test_itp_takes_an_optional_priority_column_empty_or_absent_as_0(tmp_path: Path) -> None:
    path = write(tmp_path, "itp.csv", ITP_HEADER.strip() + ",priority\na,1,2,4,1000\nb,2,2,4,\nc,3,2,4,-5\n")
    assert [(j.id, j.priority) for j in read_itp(path)] == [("a", 1000), ("b", 0), ("c", -5)]
    assert {j.priority for j in read_itp(write(tmp_path, "plain.csv", ITP_HEADER + "a,1,2,4\n"))} == {0}


@pytest.mark.parametrize(("value", "message"), [("high", "itp.csv:2: column priority: 'high' is not an integer"),
                                                ("4294967296", "itp.csv:2: column priority: '4294967296' must be in [-2147483648, 2147483647]"),
                                                ("-4294967296", "itp.csv:2: column priority: '-4294967296' must be in [-2147483648, 2147483647]")])
def test_itp_bad_priority_names_file_line_and_column(tmp_path: Path, value: str, message: str) -> None:
    with raises(message):
        read_itp(write(tmp_path, "itp.csv", ITP_HEADER.strip() + f",priority\na,1,2,4,{value}\n"))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("j2,10,5,abc", "itp.csv:3: column num_gpu: 'abc' is not an integer"),
        ("j2,10,5,2.5", "itp.csv:3: column num_gpu: '2.5' is not an integer"),
        ("j2,10,5,0", "itp.csv:3: column num_gpu: '0' must be ≥ 1"),
        ("j2,10,5,-4", "itp.csv:3: column num_gpu: '-4' must be ≥ 1"),
        ("j2,10,-5,1", "itp.csv:3: column duration: '-5' must be ≥ 0"),
        ("j2,10,soon,1", "itp.csv:3: column duration: 'soon' is not a number"),
        ("j2,,5,1", "itp.csv:3: column submission_time: '' is not a number"),
        ("j2,nan,5,1", "itp.csv:3: column submission_time: 'nan' is not a finite number"),
        (",10,5,1", "itp.csv:3: column job_id: empty"),
        ("j1,10,5,1", "itp.csv:3: column job_id: 'j1' already used at"),
        ("j2,10,5", "itp.csv:3: 3 fields, but the header has 4"),
        ("j2,10,5,1,9", "itp.csv:3: 5 fields, but the header has 4"),
    ],
)
def test_itp_bad_row_names_file_line_and_column(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "itp.csv", ITP_HEADER + "j1,0,5,1\n" + row + "\n")
    with raises(message):
        read_itp(path)


def test_itp_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "itp.csv", ITP_HEADER + "j1,0,5,1\n\nj2,1,5,x\n")
    with raises("itp.csv:4: column num_gpu: 'x' is not an integer"):
        read_itp(path)


def test_itp_missing_column_names_the_column_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "itp.csv", "job_id,submission_time,duration\nj,0,5\n")
    with raises("itp.csv:1: missing column num_gpu (header has: job_id, submission_time, duration)"):
        read_itp(path)


def test_itp_empty_file_header_only_and_missing_file(tmp_path: Path) -> None:
    with raises("empty.csv: empty file; expected a CSV header with columns job_id, submission_time, duration, num_gpu"):
        read_itp(write(tmp_path, "empty.csv", ""))
    with raises("header.csv: header but no rows"):
        read_itp(write(tmp_path, "header.csv", ITP_HEADER))
    with raises("absent.csv: cannot open trace"):
        read_itp(tmp_path / "absent.csv")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00job")
    with raises("binary.csv: not UTF-8 text"):
        read_itp(binary)


def test_itp_rejects_a_node_size_below_one(tmp_path: Path) -> None:
    with raises("gpus_per_node must be ≥ 1, got 0"):
        read_itp(write(tmp_path, "itp.csv", ITP_HEADER + "a,1,2,4\n"), gpus_per_node=0)


# --------------------------------------------------------------------------------- openb


PODS = POD_HEADER + (
    "p0,12000,16384,1,1000,,LS,Running,100,1000,150\n"  # whole GPU, scheduled: runs 1000-150
    "p1,6000,12288,1,460,,BE,Running,50,500,50\n"  # a 0.46 GPU share rounds up to one GPU
    "p2,4000,8192,0,0,,BE,Running,60,900,60\n"  # CPU-only: skipped, counted
    "p3,32000,65536,8,1000,,Burstable,Failed,70,170,90\n"  # 8 GPUs on 8-GPU nodes: one pod
    "p4,2000,4096,2,1000,,LS,Pending,80,400,\n"  # never scheduled: lifetime 400-80
    "p5,1000,1024,0,0,,LS,Pending,75,90,\n"
)


def test_openb_pods_become_jobs_and_the_node_list_a_mix(tmp_path: Path) -> None:
    trace = read_openb(write(tmp_path, "pods.csv", PODS), write(tmp_path, "nodes.csv", NODES))
    assert [j.id for j in trace.jobs] == ["p1", "p3", "p4", "p0"]  # by creation_time
    p1, p3, p4, p0 = trace.jobs
    assert (p0.submit_s, p0.duration_s, p0.gpus, p0.kind) == (100.0, 850.0, 1, "inference")
    assert (p1.gpus, p1.duration_s, p1.kind, p1.cpu_milli_per_pod, p1.memory_mib_per_pod) == (1, 450.0, "training", 6000, 12288)
    assert (p3.gpus, p3.pods, p3.gpus_per_pod, p3.duration_s) == (8, 1, 8, 80.0)
    assert (p4.gpus, p4.duration_s, p4.kind) == (2, 320.0, "inference")
    assert trace.cpu_only_pods == 2
    assert trace.nodes.cpu_nodes == 1 and trace.nodes.gpu_nodes == 3 and trace.nodes.gpus == 18
    assert trace.nodes.by_model() == {("G2", 8): 2, ("T4", 2): 1}
    assert trace.nodes.groups[0].cpu_milli == 96000 and trace.nodes.max_gpus_per_node == 8


def test_openb_splits_a_pod_only_for_smaller_nodes(tmp_path: Path) -> None:
    trace = read_openb(write(tmp_path, "pods.csv", PODS), write(tmp_path, "nodes.csv", NODES), gpus_per_node=4)
    p3 = next(j for j in trace.jobs if j.id == "p3")
    assert (p3.pods, p3.gpus_per_pod, p3.cpu_milli_per_pod, p3.memory_mib_per_pod) == (2, 4, 16000, 32768)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("q,1000,1024,one,1000,,LS,Running,1,2,1", "pods.csv:3: column num_gpu: 'one' is not an integer"),
        ("q,1000,1024,-1,1000,,LS,Running,1,2,1", "pods.csv:3: column num_gpu: '-1' must be ≥ 0"),
        ("q,1000,1024,1,1500,,LS,Running,1,2,1", "pods.csv:3: column gpu_milli: '1500' must be ≤ 1000"),
        ("q,1000,1024,1,0,,LS,Running,1,2,1", "pods.csv:3: column gpu_milli: 0 for a pod with 1 GPUs"),
        ("q,-5,1024,1,1000,,LS,Running,1,2,1", "pods.csv:3: column cpu_milli: '-5' must be ≥ 0"),
        ("q,1000,lots,1,1000,,LS,Running,1,2,1", "pods.csv:3: column memory_mib: 'lots' is not an integer"),
        ("q,1000,1024,1,1000,,LS,Running,10,5,10", "pods.csv:3: column deletion_time: '5' is before creation_time '10'"),
        ("q,1000,1024,1,1000,,LS,Running,10,50,5", "pods.csv:3: column scheduled_time: '5' is outside [creation_time '10'"),
        ("q,1000,1024,1,1000,,LS,Running,x,50,5", "pods.csv:3: column creation_time: 'x' is not a number"),
        ("p0,1000,1024,1,1000,,LS,Running,1,2,1", "pods.csv:3: column name: 'p0' already used at"),
    ],
)
def test_openb_bad_pod_row_names_file_line_and_column(tmp_path: Path, row: str, message: str) -> None:
    pods = write(tmp_path, "pods.csv", POD_HEADER + "p0,1,1,1,1000,,LS,Running,0,1,0\n" + row + "\n")
    with raises(message):
        read_openb(pods, write(tmp_path, "nodes.csv", NODES))


def test_openb_missing_columns_and_bad_node_rows(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODES)
    with raises("pods.csv:1: missing column qos"):
        read_openb(write(tmp_path, "pods.csv", POD_HEADER.replace("qos,", "") + "p,1,1,1,1000,,Running,0,1,0\n"), nodes)
    with raises("n.csv:3: column model: empty for a node with 8 GPUs"):
        read_openb_nodes(write(tmp_path, "n.csv", NODE_HEADER + "a,1,1,0,\nb,1,1,8,\n"))
    with raises("n.csv:2: column gpu: 'eight' is not an integer"):
        read_openb_nodes(write(tmp_path, "n.csv", NODE_HEADER + "b,1,1,eight,G2\n"))
    with raises("cpu.csv: no GPU nodes"):
        read_openb_nodes(write(tmp_path, "cpu.csv", NODE_HEADER + "a,1,1,0,\n"))
    with raises("n.csv:1: missing column model"):
        read_openb_nodes(write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu\na,1,1,8\n"))


# --------------------------------------------------------------------------------- dispatch


def test_read_trace_dispatches_and_keeps_the_first_n(tmp_path: Path) -> None:
    itp = write(tmp_path, "itp.csv", ITP_HEADER + "b,50,100,16\na,10,20,1\n")
    assert [j.id for j in read_trace(itp, "itp")] == ["a", "b"]
    assert [j.id for j in read_trace(itp, "itp", n=1)] == ["a"]
    assert read_trace(itp, "itp", gpus_per_node=4)[1].pods == 4
    pods, nodes = write(tmp_path, "pods.csv", PODS), write(tmp_path, "nodes.csv", NODES)
    assert len(read_trace(pods, "openb", nodes_path=nodes)) == 4
    with raises("pods.csv: the openb format needs its node list too"):
        read_trace(pods, "openb")
    with raises("unknown trace format 'slurm'; use one of itp, openb, synthetic"):
        read_trace(itp, "slurm")  # type: ignore[arg-type]
    with raises("trace format itp needs a trace file"):
        read_trace(None, "itp")


@pytest.mark.parametrize(("text", "line"), [
    ("sizeMix: {4: -1}", "syn.yaml: sizeMix: GPU count 4: weight -1.0 must be ≥ 0"),
    ("sizeMix: {0: 1}", "syn.yaml: sizeMix: GPU count 0 must be ≥ 1"),
    ("sizeMix: {}", "syn.yaml: sizeMix: lists no GPU count; give at least one, e.g. {8: 1}"),
    ("sizeMix: {8: 0}", "syn.yaml: sizeMix: weights must not all be 0; give one GPU count a weight > 0"),
    ("sizeMix: {eight: 1}", "syn.yaml: sizeMix: key 'eight': expected a whole number"),
    ("sizeMix: {8: lots}", "syn.yaml: sizeMix[8]: expected a number, got 'lots'"),
    ("sizeMix: {1: 1, 64: 1}\npriority: {64: high}",
     "syn.yaml: priority: GPU count 64: 'high' must be a whole number in [-2147483648, 2147483647] (Kueue's int32 spec.priority)"),
    ("sizeMix: {1: 1, 64: 1}\npriority: {big: 1}", "syn.yaml: priority: key 'big': expected a whole number"),
])
def test_a_bad_synthetic_parameter_is_one_line_naming_its_path_once(tmp_path: Path, text: str, line: str) -> None:
    with pytest.raises(TraceError) as err:
        read_trace(write(tmp_path, "syn.yaml", text + "\n"), "synthetic", n=5)
    said = str(err.value).removeprefix(f"{tmp_path}{os.sep}")
    assert said == line
    field = line.split(": ")[1].split("[")[0]
    assert len(re.findall(rf"\b{field}[:\[]", said)) == 1  # the path once, not "sizeMix: sizeMix[4]: …"


def test_a_profiles_document_is_not_taken_for_synthetic_parameters(tmp_path: Path) -> None:
    with raises("syn.yaml: a profiles document (it has profiles:), not synthetic parameters; give it with --profiles"):
        read_trace(write(tmp_path, "syn.yaml", "defaultProfile: strict\nprofiles: {strict: {}}\n"), "synthetic", n=5)


def test_read_trace_synthetic_takes_params_from_a_file_or_an_object(tmp_path: Path) -> None:
    params = write(tmp_path, "syn.yaml", "arrivalRatePerHour: 120\nsizeMix: {8: 1}\ninferenceShare: 0\n")
    jobs = read_trace(params, "synthetic", n=50, seed=3)
    assert len(jobs) == 50 and {j.gpus for j in jobs} == {8}
    same = read_trace(None, "synthetic", n=50, seed=3, params=SyntheticParams(arrival_rate_per_hour=120, size_mix={8: 1}, inference_share=0))
    assert jobs == same == synthetic_jobs(50, 3, 8, SyntheticParams.model_validate({"arrivalRatePerHour": 120, "sizeMix": {8: 1}, "inferenceShare": 0}))
    as_json = write(tmp_path, "syn.json", '{"sizeMix": {"8": 1}, "arrivalRatePerHour": 120, "inferenceShare": 0}')
    assert read_trace(as_json, "synthetic", n=50, seed=3) == jobs
    with raises("syn.yaml: arrivalRate: unknown key"):
        read_trace(write(tmp_path, "syn.yaml", "arrivalRate: 3\n"), "synthetic", n=5)
    with raises("syn.yaml: sizeMx: unknown key; did you mean 'sizeMix'? (known: arrivalRatePerHour, commFraction,"):
        read_trace(write(tmp_path, "syn.yaml", "sizeMx: {1: 1}\n"), "synthetic", n=5)
    with raises("syn.yaml: arrivalRatePerHour: expected a number, got 'lots'"):
        read_trace(write(tmp_path, "syn.yaml", "arrivalRatePerHour: lots\n"), "synthetic", n=5)
    with raises("syn.json:1: not valid JSON"):
        read_trace(write(tmp_path, "syn.json", "{oops"), "synthetic", n=5)
    with raises("synthetic traces need n"):
        read_trace(None, "synthetic")


# --------------------------------------------------------------------------------- load


def test_scale_load_hand_computed_exact() -> None:
    # W = 8·50 + 8·50 = 800 GPU-s over a span of 100 s on 16 GPUs: offered 800 / (100·16) = 0.5.
    # For 0.25 the factor is c = 0.5 / 0.25 = 2: arrivals 0, 40, 100 → 0, 80, 200.
    jobs = [make_job("a", 0.0, 50.0, 8, 8), make_job("b", 40.0, 0.0, 1, 8), make_job("c", 100.0, 50.0, 8, 8)]
    assert offered_load(jobs, 16) == 0.5
    scaled = scale_load(jobs, 16, 0.25)
    assert [j.submit_s for j in scaled] == [0.0, 80.0, 200.0]
    assert offered_load(scaled, 16) == 0.25
    assert [dataclasses.replace(j, submit_s=0.0) for j in scaled] == [dataclasses.replace(j, submit_s=0.0) for j in jobs]


def test_scale_load_reaches_the_target_on_random_jobs_and_keeps_the_first_arrival() -> None:
    rng = random.Random(11)
    jobs = [make_job(f"j{i}", 1000.0 + rng.uniform(0, 5e5), rng.uniform(10, 9e4), rng.choice([1, 2, 8, 16, 64]), 8) for i in range(500)]
    for load in (0.3, 0.85, 1.7):
        scaled = scale_load(jobs, 1152, load)
        assert offered_load(scaled, 1152) == pytest.approx(load, rel=1e-12)
        assert scaled[0].submit_s == min(j.submit_s for j in jobs)
        assert [j.id for j in scaled] == [j.id for j in sorted(jobs, key=lambda j: j.submit_s)]
        assert all(type(j) is Job and Job(*dataclasses.astuple(j)) == j for j in scaled)


def test_scale_load_refuses_what_it_cannot_scale() -> None:
    with raises("all 2 jobs arrive at 5 s"):
        scale_load([make_job("a", 5.0, 1.0, 1, 8), make_job("b", 5.0, 1.0, 1, 8)], 8, 0.5)
    with raises("load must be > 0"):
        scale_load([make_job("a", 0.0, 1.0, 1, 8), make_job("b", 5.0, 1.0, 1, 8)], 8, 0.0)
    with raises("cluster_gpus must be ≥ 1"):
        offered_load([make_job("a", 0.0, 1.0, 1, 8), make_job("b", 5.0, 1.0, 1, 8)], 0)
    with raises("offered load needs jobs"):
        offered_load([], 8)


# --------------------------------------------------------------------------------- real traces


def _traces_dir() -> Path:
    env = os.environ.get("ATOLL_TRACES_DIR")
    # tests/admission/simulator/test_traces.py -> parents[3] is the repository root
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[3].parent / "shared" / "traces"


TRACES = _traces_dir()
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"real traces not found at {TRACES} (set ATOLL_TRACES_DIR)")


@needs_traces
def test_real_itp_trace_matches_its_readme() -> None:
    jobs = read_itp(TRACES / "msft_itp_cluster04_day00-14.csv", gpus_per_node=8)
    assert len(jobs) == 4567
    sizes: dict[int, int] = {}
    for j in jobs:
        sizes[j.gpus] = sizes.get(j.gpus, 0) + 1
    assert sizes == {1: 3609, 2: 36, 4: 25, 8: 777, 16: 21, 32: 99}
    assert (jobs[0].submit_s, jobs[-1].submit_s) == (5810.0, 1209449.0)
    assert sum(j.gpus * j.duration_s for j in jobs) / 3600 == pytest.approx(184_000, rel=0.01)  # "about 184k GPU-hours"
    assert {(j.pods, j.gpus_per_pod) for j in jobs if j.gpus == 32} == {(4, 8)}


@needs_traces
def test_real_openb_trace_matches_its_readme() -> None:
    trace = read_openb(TRACES / "alibaba_openb_pod_list_default_ct_lt_133d.csv", TRACES / "alibaba_openb_node_list_all_node.csv")
    assert len(trace.jobs) == 3981 - 596 == 3385
    assert trace.cpu_only_pods == 596
    sizes: dict[int, int] = {}
    for j in trace.jobs:
        sizes[j.gpus] = sizes.get(j.gpus, 0) + 1
    assert sizes == {1: 3344, 2: 7, 4: 5, 8: 29}
    assert (trace.nodes.gpu_nodes, trace.nodes.gpus, trace.nodes.cpu_nodes) == (1213, 6212, 310)
    assert trace.nodes.by_model() == {
        ("G2", 8): 549, ("T4", 2): 387, ("T4", 4): 17, ("P100", 2): 131, ("P100", 1): 3, ("G3", 8): 39,
        ("V100M16", 4): 28, ("V100M16", 8): 8, ("V100M16", 1): 19, ("V100M32", 8): 21, ("V100M32", 4): 9, ("A10", 1): 2,
    }
    assert all(j.pods == 1 for j in trace.jobs)  # no pod above 8 GPUs, nodes of up to 8
