"""benchmark/trace_run.py: the measured timeline tool.

On CPU EP the whole tool runs as a subprocess on a small real ONNX model (HASE_HOME in a temp dir):
CSV rows, the Perfetto/Chrome trace, resume and the one-line error. The CUDA attribution (CUPTI
records -> nodes) is tested through its pure functions on a synthetic Kineto record set with exact
expected numbers.
"""
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import build_residual_model

REPO = Path(__file__).resolve().parent.parent

from hase.benchmark import trace_run as tr  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

PY = sys.executable
FAST = ["--device", "cpu", "--set", "warmup=2", "--set", "profiled_runs=3", "--set", "budget_ms=5",
        "--set", "min_loops=3", "--set", "max_loops=20", "--set", "idle_busy_max=1"]   # must pass on a loaded machine


# ---------------------------------------------------------------- CPU EP, end to end

def build_model(path: Path, channels: int = 8, blocks: int = 2, hw: int = 16) -> None:
    build_residual_model(path, "trace_run_test", channels, blocks, hw)


def trace_run(home: Path, *args):
    env = dict(os.environ, HASE_HOME=str(home), PYTHONWARNINGS="ignore")
    return subprocess.run([PY, "benchmark/trace_run.py", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def rows(path: Path) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    home = tmp_path_factory.mktemp("trace_home")
    mdir = home / "model_zoo" / "models"
    mdir.mkdir(parents=True)
    build_model(mdir / "tiny.onnx")
    r = trace_run(home, *FAST, "--set", "sessions=2")
    assert r.returncode == 0, r.stderr[-3000:]
    (out,) = list((home / "benchmark" / "results").glob("*/timeline"))
    return {"home": home, "out": out, "stderr": r.stderr}


def test_cpu_sessions_nodes_and_trace(cpu_trace):
    out = cpu_trace["out"]
    srows = rows(out / "trace_sessions.csv")
    assert [(r["model"], r["session"]) for r in srows] == [("tiny", "0"), ("tiny", "1")]
    nrows = rows(out / "trace_nodes.csv")
    for s in srows:
        assert s["device"] == "cpu" and s["unlaunched_ops"] == "0" and s["cupti_runs_used"] == "0"
        for col in ("e2e_mean_ms", "e2e_median_ms", "e2e_p10_ms", "e2e_p90_ms", "device_median_ms",
                    "profiled_wall_us", "ort_node_sum_us", "host_sum_us"):
            v = float(s[col])
            assert math.isfinite(v) and v > 0, (col, v)
        assert float(s["e2e_p10_ms"]) <= float(s["e2e_median_ms"]) <= float(s["e2e_p90_ms"])
        assert int(s["e2e_n"]) >= 3
        # the background load before the session, as the timeline fits' idle check reads it (issue 26 item 1)
        assert s["bg_busy_field"] == "CPU_UTIL_PCT" and 0 <= float(s["bg_busy_frac"]) <= 1
        mine = [n for n in nrows if n["session"] == s["session"]]
        assert len(mine) == int(s["n_nodes"]) >= 4
        assert sum(float(n["host_us"]) for n in mine) == pytest.approx(float(s["host_sum_us"]))
        assert all(float(n["host_us"]) >= 0 and float(n["gpu_us"]) == 0 for n in mine)
    assert "gap" in {n["node"] for n in nrows}          # an original node name ORT keeps
    assert (out / "trace_config_exhaustive.json").exists()
    # the Perfetto/Chrome trace of the first session's median profiled run
    trace = json.loads((out / "traces" / "tiny.measured.json").read_text())
    evs = trace["traceEvents"]
    assert isinstance(evs, list) and evs
    complete = [e for e in evs if e["ph"] == "X"]
    assert {e["ph"] for e in evs} <= {"X", "M"} and complete
    for e in complete:
        assert isinstance(e["name"], str) and e["name"]
        assert e["ts"] >= 0 and e["dur"] >= 0, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    node_evs = [e for e in complete if e["cat"] == "cpu_node"]
    session0 = [n["node"] for n in nrows if n["session"] == "0"]
    assert [e["name"] for e in node_evs] == session0    # every node once, in execution order
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1 for a, b in zip(node_evs, node_evs[1:]))  # ORT rounds to us
    assert trace["otherData"]["total_ms"] > 0
    assert max(e["ts"] + e["dur"] for e in complete) <= trace["otherData"]["total_ms"] * 1e3 + 1


def test_cpu_resume_writes_no_duplicates(cpu_trace):
    home, out = cpu_trace["home"], cpu_trace["out"]
    before = (out / "trace_sessions.csv").read_text()
    n_nodes = len(rows(out / "trace_nodes.csv"))
    r = trace_run(home, *FAST, "--set", "sessions=2")      # all done: nothing new
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "trace_sessions.csv").read_text() == before
    assert len(rows(out / "trace_nodes.csv")) == n_nodes
    r = trace_run(home, *FAST, "--set", "sessions=3")      # one more session: only it is measured
    assert r.returncode == 0, r.stderr[-3000:]
    srows = rows(out / "trace_sessions.csv")
    assert [r["session"] for r in srows] == ["0", "1", "2"]
    nrows = rows(out / "trace_nodes.csv")
    assert len(nrows) == n_nodes * 3 // 2
    assert len({(n["session"], n["node"]) for n in nrows}) == len(nrows)


def test_missing_model_is_one_line_error(tmp_path):
    r = trace_run(tmp_path, *FAST, "--set", f"models=[{tmp_path / 'nope.onnx'}]")
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and "nope.onnx" in lines[0]
    assert not list(tmp_path.glob("benchmark/results/*/timeline/trace_sessions.csv"))


# ---------------------------------------------------------------- CUDA attribution on synthetic CUPTI records

B, A = tr.BEFORE, tr.AFTER
NODES = ["n0", "n1", "n2"]
ORT_US = {"n0": 8.0, "n1": 12.0, "n2": 9.0}
# launch order of one run: (owner, GPU op name, launch ts, launch dur, GPU start, GPU dur), run 0 at t=1000
RUN0 = [(B, "Memcpy HtoD", 1005, 2, 1008, 3),
        ("n0", "k_a", 1010, 4, 1015, 10),
        ("n1", "k_b1", 1020, 3, 1026, 5),
        ("n1", "k_b2", 1024, 3, 1031, 6),
        ("n2", "k_c", 1030, 5, 1040, 20),
        (A, "Memcpy DtoH", 1045, 2, 1061, 4)]


def synthetic_kin():
    """split_runs' input (kineto_events' output): three marked runs.

    run 0: RUN0, plus a GPU op with no launch record at 1070;
    run 1: RUN0 shifted by 1000 us, k_c 4 us longer (24) and the copy-out after it;
    run 2: another launch sequence (k_b2 missing): not used;
    plus a launched op outside every marker (another thread's work): not in any run."""
    gpu_ops, launches, corr = [], {}, 0

    def add(name, l_ts, l_dur, g_start, g_dur, launched=True):
        nonlocal corr
        corr += 1
        gpu_ops.append({"name": name, "kind": "kernel", "start_us": float(g_start), "dur_us": float(g_dur),
                        "correlation": corr, "device": 0, "stream": 7})
        if launched:
            launches[corr] = {"name": "cudaLaunchKernel", "ts_us": float(l_ts), "dur_us": float(l_dur), "tid": 1}

    for _, name, lt, ld, gs, gd in RUN0:
        add(name, lt, ld, gs, gd)
    add("k_orphan", None, None, 1070, 1, launched=False)
    for owner, name, lt, ld, gs, gd in RUN0:
        gd = 24 if name == "k_c" else gd
        gs = 2065 if name == "Memcpy DtoH" else gs + 1000
        add(name, lt + 1000, ld, gs, gd)
    for _, name, lt, ld, gs, gd in RUN0:
        if name != "k_b2":
            add(name, lt + 2000, ld, gs + 2000, gd)
    add("k_elsewhere", 500, 3, 510, 7)
    gpu_ops.sort(key=lambda o: o["start_us"])
    markers = [{"start_us": 1000.0, "end_us": 1100.0}, {"start_us": 2000.0, "end_us": 2100.0},
               {"start_us": 3000.0, "end_us": 3100.0}]
    return {"gpu_ops": gpu_ops, "launches": launches, "markers": markers}


def synthetic_template():
    """launch_template from two ORT-profiled runs of RUN0's sequence, one op of run 1 without launch."""
    ops = []
    for run in (0, 1):
        for owner, name, lt, *_ in RUN0:
            ops.append({"run": run, "launch_us": float(lt + 5000 * run), "owner": owner, "name": name})
    ops.append({"run": 1, "launch_us": None, "owner": tr.NO_LAUNCH, "name": "k_lost"})
    return tr.launch_template([{}, {}], ops)


class ListLog:
    def __init__(self):
        self.warnings = []

    def warning(self, msg, *args):
        self.warnings.append(msg % args)


def test_launch_template_from_profiled_ops():
    t = synthetic_template()
    assert t["owners"] == [B, "n0", "n1", "n1", "n2", A]
    assert t["names"] == ["Memcpy HtoD", "k_a", "k_b1", "k_b2", "k_c", "Memcpy DtoH"]
    assert (t["runs_agreeing"], t["runs"], t["unlaunched_ops"]) == (2, 2, 1)
    with pytest.raises(HaseError):
        tr.launch_template([], [])


def test_split_runs_keeps_unlaunched_apart():
    runs = tr.split_runs(synthetic_kin())
    assert len(runs) == 3
    assert [len(r["ops"]) for r in runs] == [6, 6, 5]
    assert [[o["name"] for o in r["unlaunched"]] for r in runs] == [["k_orphan"], [], []]
    assert all("k_elsewhere" not in [o["name"] for o in r["ops"]] for r in runs)
    r0 = runs[0]
    assert [o["launch_us"] for o in r0["ops"]] == [1005, 1010, 1020, 1024, 1030, 1045]   # sorted by launch
    assert [o["launch_end_us"] for o in r0["ops"]] == [1007, 1014, 1023, 1027, 1035, 1047]


def test_attribution_exact_numbers():
    tmpl = synthetic_template()
    runs = tr.split_runs(synthetic_kin())
    assert [tr.assign_owners(r, tmpl) for r in runs] == [True, True, False]
    assert [o["owner"] for o in runs[0]["ops"]] == [B, "n0", "n1", "n1", "n2", A]
    assert "owner" not in runs[2]["ops"][0]
    # host dispatch: first launch of a node -> first launch of the next; the last node ends at the copy-out
    assert tr.node_host_intervals(runs[0], NODES, ORT_US) == {"n0": 10.0, "n1": 10.0, "n2": 15.0}
    assert tr.node_host_intervals(runs[1], NODES, ORT_US) == {"n0": 10.0, "n1": 10.0, "n2": 15.0}
    g0 = tr.node_gpu(runs[0], NODES)
    assert g0 == {B: {"gpu_us": 3.0, "kernel_sum_us": 3.0, "ops": 1, "idle_before_us": 0.0, "names": ["Memcpy HtoD"]},
                  "n0": {"gpu_us": 10.0, "kernel_sum_us": 10.0, "ops": 1, "idle_before_us": 4.0, "names": ["k_a"]},
                  "n1": {"gpu_us": 11.0, "kernel_sum_us": 11.0, "ops": 2, "idle_before_us": 1.0,
                         "names": ["k_b1", "k_b2"]},
                  "n2": {"gpu_us": 20.0, "kernel_sum_us": 20.0, "ops": 1, "idle_before_us": 3.0, "names": ["k_c"]},
                  A: {"gpu_us": 4.0, "kernel_sum_us": 4.0, "ops": 1, "idle_before_us": 1.0, "names": ["Memcpy DtoH"]}}
    g1 = tr.node_gpu(runs[1], NODES)
    assert g1["n2"]["gpu_us"] == 24.0 and g1[A]["idle_before_us"] == 1.0
    h0 = tr.node_host_intervals(runs[0], NODES, ORT_US)
    assert tr.run_summary(runs[0], NODES, h0) == {
        "wall_us": 100.0, "host_sum_us": 35.0, "gpu_sum_us": 41.0, "gpu_busy_us": 41.0, "span_us": 50.0,
        "gpu_idle_us": 9.0, "h2d_gpu_us": 3.0, "d2h_gpu_us": 4.0, "before_us": 10.0, "after_us": 40.0}
    s1 = tr.run_summary(runs[1], NODES, tr.node_host_intervals(runs[1], NODES, ORT_US))
    assert (s1["gpu_sum_us"], s1["span_us"], s1["gpu_idle_us"], s1["after_us"]) == (45.0, 54.0, 9.0, 36.0)


def test_node_gpu_is_the_union_of_overlapping_kernels():
    """cuDNN's per-group kernels of one grouped conv overlap in time (wav2vec's positional conv: 2965 us of summed
    kernel time in a 1.3 ms model): the node holds the GPU for the union of their intervals, not the sum."""
    ops = [{"owner": "conv", "name": "k_g", "start_us": 100.0 + 2 * i, "dur_us": 50.0} for i in range(4)]
    ops += [{"owner": "add", "name": "k_add", "start_us": 160.0, "dur_us": 5.0}]
    g = tr.node_gpu({"ops": ops}, ["conv", "add"])
    assert g["conv"]["kernel_sum_us"] == 200.0 and g["conv"]["ops"] == 4
    assert g["conv"]["gpu_us"] == 56.0          # 100 -> 156
    assert g["add"]["gpu_us"] == 5.0 and g["add"]["idle_before_us"] == 4.0


def test_launchless_node_shares_the_interval():
    """A node that launches nothing (Reshape aliasing its input) shares the launching node's interval
    before it by ORT-profiled time; one before the first launch gets its profiled time scaled."""
    tmpl = synthetic_template()
    run = tr.split_runs(synthetic_kin())[0]
    assert tr.assign_owners(run, tmpl)
    nodes = ["pre", "n0", "n1", "reshape", "n2"]
    ort = {"pre": 2.0, "n0": 8.0, "n1": 12.0, "reshape": 4.0, "n2": 9.0}
    h = tr.node_host_intervals(run, nodes, ort)
    # n1's interval (10 us) is shared 12:4 with reshape; measured 35 us over profiled 33 us scales 'pre'
    assert h["n0"] == 10.0 and h["n2"] == 15.0
    assert h["n1"] == pytest.approx(7.5) and h["reshape"] == pytest.approx(2.5)
    assert h["pre"] == pytest.approx(2.0 * 35.0 / 33.0)


def test_session_row_counts_unlaunched_ops():
    """The CUPTI-only pass's op without a launch record reaches the session row and a warning."""
    tmpl = synthetic_template()
    cruns = tr.split_runs(synthetic_kin())
    log = ListLog()
    ops_of = {"n0": "Conv", "n1": "Conv", "n2": "Add"}
    row, nrows, used, hosts, sums = tr.cupti_session(cruns, tmpl, NODES, ORT_US, ops_of, {"n2": "k7"}, "m", 0, log)
    assert row["unlaunched_ops"] == 1 and row["profiled_unlaunched_ops"] == 1
    assert (row["cupti_runs"], row["cupti_runs_used"], row["n_gpu_ops"], row["profiled_runs_agreeing"]) == (3, 2, 6, 2)
    assert any("1 GPU ops had no launch record" in w for w in log.warnings), log.warnings
    assert len(used) == 2 and len(hosts) == len(sums) == 2
    # medians over the two used runs
    assert row["cupti_wall_us"] == 100.0 and row["host_sum_us"] == 35.0
    assert row["gpu_sum_us"] == 43.0 and row["span_us"] == 52.0 and row["gpu_idle_us"] == 9.0
    assert row["after_us"] == 38.0 and row["h2d_gpu_us"] == 3.0 and row["d2h_gpu_us"] == 4.0
    assert row["kernel_signature"] == tr.kernel_signature(tmpl["names"])
    got = {n["node"]: (n["host_us"], n["gpu_us"], n["gpu_idle_before_us"], n["launches"], n["kernel_names"],
                       n["kernel_id"]) for n in nrows}
    assert got == {"n0": (10.0, 10.0, 4.0, 1, "k_a", ""), "n1": (10.0, 11.0, 1.0, 2, "k_b1|k_b2", ""),
                   "n2": (15.0, 22.0, 3.0, 1, "k_c", "k7")}
    # no usable run: warned, NaN medians, the unlaunched op still counted
    other = dict(tmpl, names=["x"] * 6)
    log = ListLog()
    row, nrows, used, _, _ = tr.cupti_session(tr.split_runs(synthetic_kin()), other, NODES, ORT_US, ops_of, {},
                                              "m", 1, log)
    assert used == [] and row["cupti_runs_used"] == 0 and row["unlaunched_ops"] == 1
    assert math.isnan(row["gpu_sum_us"]) and all(math.isnan(n["gpu_us"]) for n in nrows)
    assert len(log.warnings) == 2


def test_measured_timeline_of_a_cupti_run():
    tmpl = synthetic_template()
    run = tr.split_runs(synthetic_kin())[0]
    assert tr.assign_owners(run, tmpl)
    host = tr.node_host_intervals(run, NODES, ORT_US)
    tl = tr.measured_timeline("m", run, NODES, host, {"n2": "k7"})
    assert tl["total_ms"] == pytest.approx(0.1) and tl["gpu_busy_fraction"] == pytest.approx(0.41)
    disp = [(e["name"], e["start_us"], e["end_us"]) for e in tl["timeline"] if e["kind"] == "dispatch"]
    assert disp == [("n0", 10.0, 20.0), ("n1", 20.0, 30.0), ("k7", 30.0, 45.0)]
    kern = [(e["name"], e["start_us"], e["end_us"]) for e in tl["timeline"] if e["kind"] == "kernel"]
    assert kern == [("n0", 15.0, 25.0), ("n1", 26.0, 31.0), ("n1", 31.0, 37.0), ("k7", 40.0, 60.0)]
    assert [e["kind"] for e in tl["timeline"] if e["resource"] == "copy"] == ["h2d", "d2h"]
    assert tl["timeline"][0]["end_us"] == 10.0      # session overhead up to the first dispatch
