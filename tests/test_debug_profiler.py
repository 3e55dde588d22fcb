"""debug/ort_profiler_kernel_sum.py and debug/profiler_demo.py, on CPU with a real ORT.

The breakdown script runs as a subprocess on a small Conv/Relu/Add model; the fence format and the
GPU attribution (which need an older ORT or a GPU) are tested through the pure functions on
synthetic events in the formats ORT and torch.profiler write.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import build_residual_model

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SCRIPT = REPO / "debug" / "ort_profiler_kernel_sum.py"
DEMO = REPO / "debug" / "profiler_demo.py"
WARMUP, LOOPS = 3, 5
TOL_MS = 0.001   # printed values have 5 decimals (10 ns); the sums must agree within 1 us


def load_script():
    spec = importlib.util.spec_from_file_location("ort_profiler_kernel_sum", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ks = load_script()


def build_model(path: Path, channels: int = 16, blocks: int = 3, hw: int = 32) -> None:
    build_residual_model(path, "debug_profiler_test", channels, blocks, hw)


def env_for(tmp: Path) -> dict:
    return dict(os.environ, HASE_HOME=str(tmp), PYTHONWARNINGS="ignore")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ort_kernel_sum")
    model = tmp / "small.onnx"
    build_model(model)
    out = {"json": tmp / "breakdown.json", "trace": tmp / "merged.json", "prefix": tmp / "prof" / "p"}
    cmd = [PY, str(SCRIPT), "--model", str(model), "--device", "cpu", "--warmup", str(WARMUP),
           "--loops", str(LOOPS), "--profile-prefix", str(out["prefix"]), "--device-id", "0",
           "--json-out", str(out["json"]), "--trace-out", str(out["trace"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env_for(tmp), timeout=300)
    assert proc.returncode == 0, proc.stderr
    out["stdout"] = proc.stdout
    return out


def printed_ms(stdout: str) -> dict:
    """{label: value in ms} from lines like '  kernel_time_sum   =    0.11800 ms'."""
    vals = {}
    for line in stdout.splitlines():
        m = re.match(r"^\s*(.+?)\s+=\s+(-?[0-9.]+) ms$", line)
        if m:
            vals[m.group(1).strip()] = float(m.group(2))
    return vals


def test_printed_breakdown_adds_up(cpu_run):
    v = printed_ms(cpu_run["stdout"])
    for _, label, _ in ks.BREAKDOWN_ROWS:
        assert label in v, f"'{label}' not printed:\n{cpu_run['stdout']}"
    assert "format: kernel_time only" in cpu_run["stdout"]         # ORT 1.31 writes no fences
    assert f"{LOOPS} timed runs after {WARMUP} warmup" in cpu_run["stdout"]
    assert "GPU breakdown skipped" in cpu_run["stdout"]
    assert v["model_run"] > 0 and v["kernel_time_sum"] > 0
    assert v["model_run"] == pytest.approx(v["SequentialExecutor::Execute"] + v["before Execute"]
                                           + v["after Execute"], abs=TOL_MS)
    assert v["model_run outside Execute"] == pytest.approx(v["before Execute"] + v["after Execute"], abs=TOL_MS)
    assert v["SequentialExecutor::Execute"] == pytest.approx(v["node_timeline_span"] + v["Execute outside nodes"],
                                                            abs=TOL_MS)
    assert v["node_timeline_span"] == pytest.approx(v["kernel_time_sum"] + v["within-node non-kernel"]
                                                    + v["gaps between nodes"], abs=TOL_MS)
    assert v["within-node non-kernel"] == 0.0                      # no fences: node span == kernel_time
    assert v["node_timeline_span"] <= v["SequentialExecutor::Execute"] + TOL_MS
    assert v["SequentialExecutor::Execute"] <= v["model_run"] + TOL_MS


def test_json_matches_print_and_each_run_adds_up(cpu_run):
    data = json.loads(cpu_run["json"].read_text())
    mean = data["summary"]["mean_us"]
    v = printed_ms(cpu_run["stdout"])
    for key, label, _ in ks.BREAKDOWN_ROWS:
        assert mean[key] / 1000 == pytest.approx(v[label], abs=1e-5)
    runs = data["runs"]
    assert [r["run_index"] for r in runs] == list(range(WARMUP, WARMUP + LOOPS))  # warmup dropped
    for r in runs:  # per run the identities are exact (integer microseconds)
        assert r["model_run_us"] == r["execute_us"] + r["before_execute_us"] + r["after_execute_us"]
        assert r["execute_us"] == r["node_timeline_span_us"] + r["execute_outside_nodes_us"]
        assert r["node_timeline_span_us"] == (r["kernel_time_sum_us"] + r["within_node_non_kernel_us"]
                                              + r["between_node_gap_us"])
        assert r["n_nodes"] >= 3 and r["between_node_gap_us"] >= 0 and r["before_execute_us"] >= 0


def test_parse_profile_on_the_real_profile(cpu_run):
    data = json.loads(cpu_run["json"].read_text())
    events = ks.load_profile_events(data["profile"])
    assert ks.profile_format(events) == ks.FORMAT_KERNEL_TIME
    all_runs = ks.parse_profile(events)
    assert len(all_runs) == WARMUP + LOOPS
    timed = ks.parse_profile(events, skip_runs=WARMUP)
    assert [r["run_index"] for r in timed] == [r["run_index"] for r in all_runs[WARMUP:]]
    s = ks.summarize(timed)
    assert s["runs"] == LOOPS and s["format"] == "kernel_time"
    assert s["mean_us"] == pytest.approx(data["summary"]["mean_us"])
    ops = {n["op"] for n in timed[0]["nodes"]}
    assert ops & {"Conv", "FusedConv"}, ops
    for r in timed:
        starts = [n["start_us"] for n in r["nodes"]]
        assert starts == sorted(starts)
        assert r["execute_start_us"] <= starts[0] and r["nodes"][-1]["end_us"] <= r["execute_end_us"]


def test_merged_trace_holds_the_timed_runs(cpu_run):
    trace = json.loads(cpu_run["trace"].read_text())
    evs = trace["traceEvents"]
    assert sum(e["name"] == "model_run" for e in evs) == LOOPS
    assert sum(e["name"] == "SequentialExecutor::Execute" for e in evs) == LOOPS
    for e in evs:
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and "pid" in e and "tid" in e


# ------------------------------------------------------------------ fence format (ORT < 1.17)

def X(name, ts, dur, cat="Node", op="Conv"):
    ev = {"cat": cat, "pid": 1, "tid": 1, "ph": "X", "name": name, "ts": ts, "dur": dur}
    if cat == "Node":
        ev["args"] = {"op_name": op, "provider": "CUDAExecutionProvider"}
    return ev


def fence_run(t0):
    """One run as seed 001 shows it: fence_before -> kernel_time -> fence_after per node."""
    return [
        X("A_fence_before", t0 + 6, 1), X("A_kernel_time", t0 + 8, 20), X("A_fence_after", t0 + 30, 0),
        X("B_fence_before", t0 + 35, 1), X("B_kernel_time", t0 + 37, 10, op="Relu"), X("B_fence_after", t0 + 49, 1),
        X("SequentialExecutor::Execute", t0 + 5, 50, cat="Session"),
        X("model_run", t0, 60, cat="Session"),
    ]


def test_parse_profile_fence_format():
    events = [X("session_initialization", 0, 90, cat="Session")] + fence_run(100) + fence_run(300)
    events = list(reversed(events))  # ORT writes children before parents; order must not matter
    assert ks.profile_format(events) == ks.FORMAT_FENCE
    runs = ks.parse_profile(events, skip_runs=1)
    assert len(runs) == 1 and runs[0]["run_index"] == 1
    r = runs[0]
    assert r["format"] == "fence" and r["n_nodes"] == 2
    assert [n["name"] for n in r["nodes"]] == ["A", "B"]
    assert (r["nodes"][0]["start_us"], r["nodes"][0]["end_us"]) == (306, 330)
    expected = {"model_run_us": 60, "execute_us": 50, "node_timeline_span_us": 44, "kernel_time_sum_us": 30,
                "within_node_non_kernel_us": 9, "between_node_gap_us": 5, "execute_outside_nodes_us": 6,
                "model_run_outside_execute_us": 10, "before_execute_us": 5, "after_execute_us": 5}
    assert {k: r[k] for k in expected} == expected
    s = ks.summarize(ks.parse_profile(events))
    assert s["runs"] == 2 and s["mean_us"] == pytest.approx({k: float(v) for k, v in expected.items()})
    lines = ks.format_breakdown(s)
    assert lines[0].split() == ["model_run", "=", "0.06000", "ms"]


def test_parse_profile_kernel_time_format_and_subgraph_nodes():
    events = [X("model_run", 0, 100, cat="Session"), X("SequentialExecutor::Execute", 10, 80, cat="Session"),
              X("a_kernel_time", 12, 10), X("loop_kernel_time", 25, 50, op="Loop"),
              X("SequentialExecutor::Execute", 26, 40, cat="Session"),  # the Loop body's executor
              X("body_add_kernel_time", 30, 5, op="Add"), X("c_kernel_time", 80, 5)]
    (r,) = ks.parse_profile(events)
    assert r["format"] == "kernel_time"
    assert [n["name"] for n in r["nodes"]] == ["a", "loop", "c"]   # body node runs inside 'loop'
    assert r["node_timeline_span_us"] == 73 and r["kernel_time_sum_us"] == 65
    assert r["within_node_non_kernel_us"] == 0 and r["between_node_gap_us"] == 8
    assert r["execute_outside_nodes_us"] == 7 and r["before_execute_us"] == 10 and r["after_execute_us"] == 10


def test_parse_profile_tolerates_microsecond_rounding():
    """ORT writes ts and dur as whole microseconds, rounded apart: in a run of a few us the Execute event can
    start 1 us before its model_run and end 1 us after it (a runner once lost such a run: 'holds no
    SequentialExecutor::Execute event'); its node likewise. Two us of slack keep them; the next run's do not leak."""
    events = [X("model_run", 100, 6, cat="Session"), X("SequentialExecutor::Execute", 99, 8, cat="Session"),
              X("a_kernel_time", 100, 8),
              X("model_run", 130, 6, cat="Session"), X("SequentialExecutor::Execute", 131, 4, cat="Session"),
              X("b_kernel_time", 131, 3)]
    r0, r1 = ks.parse_profile(events)
    assert (r0["execute_start_us"], r0["execute_end_us"]) == (99, 107) and [n["name"] for n in r0["nodes"]] == ["a"]
    assert [n["name"] for n in r1["nodes"]] == ["b"] and r1["execute_start_us"] == 131
    from hase.utils.errors import HaseError
    with pytest.raises(HaseError, match="holds no SequentialExecutor::Execute"):   # 5 us off is not rounding
        ks.parse_profile([X("model_run", 100, 6, cat="Session"), X("SequentialExecutor::Execute", 95, 20, cat="Session")])


def test_parse_profile_needs_model_run():
    from hase.utils.errors import HaseError
    with pytest.raises(HaseError):
        ks.parse_profile([X("a_kernel_time", 0, 1)])


# ------------------------------------------------------------------ GPU attribution (synthetic)

ORT_START_NS = 1_790_000_000_000_000_000
SHIFT_US = 5000.0  # torch's baseTimeNanoseconds is 5 ms before ORT's profiling start


def kineto_trace(gpu, launches, markers):
    """A torch.profiler Chrome trace as Kineto writes it (ts: us after baseTimeNanoseconds)."""
    evs = []
    for name, cat, ort_ts, dur, corr in gpu:
        evs.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ort_ts + SHIFT_US, "dur": dur,
                    "args": {"device": 0, "stream": 7, "correlation": corr, "External id": corr}})
    for name, ort_ts, corr in launches:
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 9, "tid": 9, "ts": ort_ts + SHIFT_US,
                    "dur": 3, "args": {"cbid": 211, "correlation": corr, "External id": corr}})
    for s, e in markers:
        evs.append({"ph": "X", "cat": "user_annotation", "name": ks.RUN_MARKER, "pid": 9, "tid": 9,
                    "ts": s + SHIFT_US, "dur": e - s})
    evs.append({"ph": "f", "cat": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 1.0, "name": "ac2g"})
    return {"schemaVersion": 1, "baseTimeNanoseconds": ORT_START_NS - int(SHIFT_US * 1000), "traceEvents": evs}


def gpu_case():
    ort_events = [X("model_run", 1000, 500, cat="Session"), X("SequentialExecutor::Execute", 1010, 100, cat="Session"),
                  X("n1_kernel_time", 1020, 30), X("n2_kernel_time", 1060, 40, op="Add")]
    runs = ks.parse_profile(ort_events)
    trace = kineto_trace(
        gpu=[("conv_kernel", "kernel", 1030, 100, 1), ("add_kernel", "kernel", 1130, 200, 2),
             ("Memcpy DtoH", "gpu_memcpy", 1330, 10, 3), ("stray", "kernel", 9000, 5, 4)],
        launches=[("cudaLaunchKernel", 1025, 1), ("cuLaunchKernel", 1065, 2), ("cudaMemcpyAsync", 1120, 3),
                  ("cudaLaunchKernel", 8990, 4)],
        markers=[(995, 1510)])
    return ort_events, runs, trace


def test_kineto_events_are_mapped_to_ort_time():
    _, runs, trace = gpu_case()
    kin = ks.kineto_events(trace, ORT_START_NS)
    assert [(o["name"], o["start_us"], o["kind"]) for o in kin["gpu_ops"]][:3] == [
        ("conv_kernel", 1030.0, "kernel"), ("add_kernel", 1130.0, "kernel"), ("Memcpy DtoH", 1330.0, "memcpy")]
    assert kin["launches"][2]["ts_us"] == 1065.0 and kin["launches"][2]["name"] == "cuLaunchKernel"
    assert ks.marker_alignment(runs, kin["markers"]) == {"runs_checked": 1, "runs_inside_marker": 1,
                                                         "min_slack_us": 5.0}


def test_gpu_ops_assigned_to_launching_node_and_verdict():
    ort_events, runs, trace = gpu_case()
    kin = ks.kineto_events(trace, ORT_START_NS)
    ops = ks.attribute_gpu_ops(runs, kin["gpu_ops"], kin["launches"])
    owner = {o["name"]: (o["owner"], o["run"]) for o in ops}
    assert owner == {"conv_kernel": ("n1", 0), "add_kernel": ("n2", 0), "Memcpy DtoH": ("(after Execute)", 0),
                     "stray": ("(outside model_run)", None)}
    gpu = ks.gpu_breakdown(runs, ops)
    nodes = {n["node"]: n for n in gpu["nodes"]}
    assert nodes["n1"]["host_us"] == 30 and nodes["n1"]["gpu_us"] == 100
    assert nodes["n1"]["gpu_idle_before_us"] == 20          # Execute starts at 1010, first kernel at 1030
    assert nodes["n1"]["launch_to_gpu_start_us"] == 5       # 1030 - 1025
    assert nodes["n2"]["gpu_us"] == 200 and nodes["n2"]["gpu_idle_before_us"] == 0
    assert nodes["n2"]["launch_to_gpu_start_us"] == 65      # queued behind conv_kernel: GPU is the bottleneck
    m = gpu["model"]
    assert m["window_us"] == 330 and m["busy_us"] == 310    # 1010 -> 1340
    assert m["busy_us"] + m["idle_us"] + m["tail_idle_us"] == pytest.approx(m["window_us"])
    assert gpu["verdict"]["bound"] == "gpu"
    assert gpu["verdict"]["gpu_over_dispatch"] == pytest.approx(3.1)
    assert gpu["counts"] == {"gpu_ops_total": 4, "gpu_ops_in_timed_runs": 3, "gpu_ops_without_launch_record": 0}
    merged = ks.merged_chrome_trace(ort_events, runs, ops, kin["launches"], "GPU 0")
    by_name = {e["name"]: e for e in merged["traceEvents"] if e["ph"] == "X"}
    assert by_name["conv_kernel"]["ts"] == 1030.0 and by_name["conv_kernel"]["args"]["ort_node"] == "n1"
    assert by_name["n1_kernel_time"]["ts"] == 1020 and "stray" not in by_name
    assert {e["pid"] for e in merged["traceEvents"]} == {1, 2, 3}


def test_gpu_op_without_launch_record_still_counts_for_its_run():
    _, runs, trace = gpu_case()
    kin = ks.kineto_events(trace, ORT_START_NS)
    ops = ks.attribute_gpu_ops(runs, kin["gpu_ops"], {})
    assert [o["owner"] for o in ops][:3] == ["(no launch record)"] * 3
    assert [o["run"] for o in ops] == [0, 0, 0, None]
    gpu = ks.gpu_breakdown(runs, ops)
    assert gpu["model"]["busy_us"] == 310 and gpu["counts"]["gpu_ops_without_launch_record"] == 4


def test_verdict_dispatch_bound():
    v = ks.verdict({"window_us": 200.0, "busy_us": 50.0, "execute_us": 180.0})
    assert v["bound"] == "dispatch" and v["gpu_busy_fraction"] == pytest.approx(0.25)
    assert "3.60x" in v["text"] and "75.0%" in v["text"]
    assert ks.verdict({})["bound"] == "unknown"


# ------------------------------------------------------------------ refusals

def one_line_error(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def _torch_has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


@pytest.mark.skipif(_torch_has_cuda(), reason="this machine has CUDA: the demo would run")
def test_profiler_demo_refuses_without_cuda(tmp_path):
    proc = subprocess.run([PY, str(DEMO), "--scenario", "sync", "--trace_dir", str(tmp_path / "tr"),
                           "--output_json", str(tmp_path / "m.json")],
                          capture_output=True, text=True, env=env_for(tmp_path), timeout=300)
    assert proc.returncode != 0
    assert "CUDA" in one_line_error(proc)
    assert not (tmp_path / "tr").exists() and not (tmp_path / "m.json").exists()


def test_profiler_demo_defaults_follow_the_prd():
    spec = importlib.util.spec_from_file_location("profiler_demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    a = demo.parse_args([])
    assert (a.scenario, a.batch_size, a.num_workers, a.pin_memory, a.amp, a.warmup_steps, a.profile_steps) == \
        ("dataloader", 64, 2, False, False, 10, 8)
    assert a.trace_dir.endswith("results/traces/profiler_demo") and a.output_json.endswith("results/metrics_demo.json")
    assert demo.data_pressure("dataloader") == (4000, 2) and demo.data_pressure("tiny_ops") == (200, 0)
    assert demo.SCENARIOS == ["dataloader", "sync", "tiny_ops", "memory_churn"]


def test_breakdown_script_refuses_cuda_without_gpu(tmp_path):
    from hase.utils.ort_session import cuda_probe
    if cuda_probe(0)[0]:
        pytest.skip("this machine runs ORT on CUDA")
    model = tmp_path / "m.onnx"
    build_model(model, blocks=1)
    proc = subprocess.run([PY, str(SCRIPT), "--model", str(model), "--device", "cuda", "--warmup", "1",
                           "--loops", "1", "--profile-prefix", str(tmp_path / "p")],
                          capture_output=True, text=True, env=env_for(tmp_path), timeout=300)
    assert proc.returncode == 2
    # ORT's native logger prints its own load failures first; our error is the one last line
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and "--device cuda cannot run" in lines[-1]
    assert sum(ln.startswith("error: ") for ln in lines) == 1


MARKED_RUNS = 12  # session.runs inside torch.profiler markers


def test_clock_mapping_with_real_torch_profiler(tmp_path):
    """ORT's profile times and torch.profiler's trace times share a clock: each ORT model_run must land
    inside the record_function marker around its session.run (the CPU side of the GPU mapping)."""
    import torch  # noqa: F401
    from torch.profiler import ProfilerActivity, profile, record_function

    from hase.utils.onnx_io import dummy_feed
    from hase.utils.ort_session import make_session
    model = tmp_path / "m.onnx"
    build_model(model, blocks=2)
    sess = make_session(model, "cpu", profile_prefix=tmp_path / "p")
    feed = dummy_feed(sess)
    sess.run(None, feed)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(MARKED_RUNS):
            with record_function(ks.RUN_MARKER):
                sess.run(None, feed)
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    start_ns = sess.get_profiling_start_time_ns()
    runs = ks.parse_profile(ks.load_profile_events(sess.end_profiling()), skip_runs=1)
    kin = ks.kineto_events(json.loads((tmp_path / "torch.json").read_text()), start_ns)
    align = ks.marker_alignment(runs, kin["markers"])
    assert align["runs_checked"] == MARKED_RUNS and align["runs_inside_marker"] == MARKED_RUNS, align
    # the markers hug the runs: no stray offset between the clocks. The closest of many runs, so one
    # descheduled between marker and run on a busy machine does not decide it
    assert 0 <= align["min_slack_us"] < 1000, align
