"""The timeline model with measured terms (inference/fit_measured_timeline.py, timeline_model.with_spread /
with_options): pure functions on synthetic data with hand-computed answers."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]

from hase.inference import fit_measured_timeline as fmt  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402
from helpers import synthetic_prep  # noqa: E402

IDLE = {"u": 0.0, "clock_ratio": 1.0, "wait_us": 0.0}
P = dict(tm.DEFAULT_PARAMS, c0_us=100.0, overhead_us=20.0)


def prep(h, dev, launch_at_start=True, h2d=50.0, d2h=10.0):
    return synthetic_prep(h, dev, h2d, d2h, launch_at_start=launch_at_start, floor_us=2.0)


def test_launch_interval_semantics():
    """h_i measured from node i's launch to node i+1's: node i launches at the start of its interval."""
    # dispatch-bound: launches at 50, 80, 110 (after h2d 50); GPU 5 us each (25-20, floor 2 not hit)
    pr = prep([30, 30, 30], [25, 25, 25])
    r = tm.timeline_us(pr, P, IDLE)
    # host ends at 50+90=140, GPU at 110+5=115: total = c0 100 + 140 + d2h 10
    assert r["total_us"] == pytest.approx(250.0) and r["host_first"] == 3
    # ORT-profiler semantics (launch at the end of h_i): GPU ends 140+5, host 140
    r2 = tm.timeline_us(dict(pr, launch_at_start=False), P, IDLE)
    assert r2["total_us"] == pytest.approx(255.0)
    # the tiny-kernel floor: standalone 21 us - overhead 20 = 1 < floor 2
    assert tm.gpu_idle_us(prep([1], [21]), P)[0] == pytest.approx(2.0)


@pytest.mark.parametrize("h,dev", [([30, 30, 30], [25, 25, 25]), ([2, 2, 2], [500, 500, 500])])
def test_every_prediction_has_p10_le_central_le_p90(h, dev):
    spread = {"host_sum_us": [0.9, 1.4], "before_us": [0.8, 1.3]}
    pr = prep(h, dev)
    s = tm.with_spread(pr, P, IDLE, spread)
    assert s["p10"] <= s["central"] <= s["p90"]
    assert s["central"] == pytest.approx(tm.timeline_us(pr, P, IDLE)["total_us"])
    if h[0] > 10:   # dispatch-bound: the host's spread shows in full
        assert s["p10"] == pytest.approx(100 + 50 * 0.8 + 90 * 0.9 + 10)
        assert s["p90"] == pytest.approx(100 + 50 * 1.3 + 90 * 1.4 + 10)
    none = tm.with_spread(pr, P, IDLE, None)
    assert none["p10"] == none["central"] == none["p90"]


def test_session_options():
    model = {"algo": "EXHAUSTIVE", "algo_gpu_ratio": {"EXHAUSTIVE": {"ratio": 1.0, "models": 3, "max": 1.0},
                                                     "HEURISTIC": {"ratio": 1.5, "models": 3, "max": 2.0},
                                                     "DEFAULT": {"ratio": 50.0, "models": 2, "max": 100.0}}}
    pr = prep([2], [520])
    heur = tm.with_options(pr, model, "HEURISTIC")
    assert tm.gpu_idle_us(heur, P)[0] == pytest.approx(1.5 * 500)
    assert tm.with_options(pr, model, "EXHAUSTIVE") is pr
    with pytest.raises(HaseError, match="DEFAULT is not predictable"):
        tm.with_options(pr, model, "DEFAULT")
    with pytest.raises(HaseError, match="HEURISTIC was not measured"):
        tm.with_options(pr, {"algo": "EXHAUSTIVE"}, "HEURISTIC")
    from hase.inference.predict_model_latency import session_options
    with pytest.raises(HaseError, match="cudnn_conv_algo_search must be one of"):
        session_options({"cudnn_conv_algo_search": "FAST"})
    # IOBinding: no copies
    assert tm.timeline_us(pr, P, IDLE, copies=False)["total_us"] == pytest.approx(100 + 500)  # launched at 0


def _sessions():
    return pd.DataFrame({
        "model": ["a"] * 3 + ["b"] * 3, "session": [0, 1, 2] * 2, "machine": ["m1", "m1", "m2"] * 2,
        "e2e_median_ms": [1.0, 1.2, 1.4, 10.0, 10.0, 10.0], "device_median_ms": [0.9, 1.0, 1.1, 9, 9, 9],
        "cupti_wall_us": [1100.0, 1300.0, 1500.0, 10050.0, 10050.0, 10050.0], "n_gpu_ops": [50] * 6,
        "gpu_idle_us": [800.0] * 3 + [10.0] * 3, "span_us": [1000.0] * 3 + [9000.0] * 3,
        "host_sum_us": [900.0, 1000.0, 1200.0, 500.0, 500.0, 500.0], "before_us": [110.0, 110, 110, 2100, 2100, 2100],
        "after_us": [60.0, 60, 60, 80, 80, 80], "cudnn_conv_algo_search": ["EXHAUSTIVE"] * 6})


def test_measured_terms_on_synthetic_sessions():
    s = _sessions()
    # only model a is dispatch-bound (idle 80% of the span): (1100-1000)/50 = 2, (1300-1200)/50 = 2, ...
    assert fmt.cupti_launch_us(s, 0.5) == pytest.approx(2.0)
    with pytest.raises(HaseError, match="no dispatch-bound"):
        fmt.cupti_launch_us(s[s["model"] == "b"], 0.5)
    lab = fmt.labels(s, (0.1, 0.9))
    assert lab.loc["a", "e2e_ms"] == pytest.approx(1.2) and lab.loc["a", "sessions"] == 3
    assert lab.loc["a", "e2e_p10_ms"] == pytest.approx(1.04) and lab.loc["a", "e2e_p90_ms"] == pytest.approx(1.36)
    assert lab.loc["a", "machines"] == 2
    # before = c + bytes * k exactly: 110 = c + 100 k, 2100 = c + 10000 k -> k = 0.201..., c = 89.9...
    lines = fmt.copy_lines(s, {"a": (100, 10), "b": (10000, 20)})
    k = (2100 - 110) / 9900
    assert lines["h2d"]["us_per_byte"] == pytest.approx(k) and lines["h2d"]["us0"] == pytest.approx(110 - 100 * k)
    sp = fmt.spread_factors(s, (0.0, 1.0))
    assert sp["host_sum_us"] == pytest.approx([0.9, 1.2]) and sp["before_us"] == [1.0, 1.0]


def test_copy_terms_recover_the_wait_dependent_copy_rate():
    """copy_terms on sessions made from its own formula gives the formula back: a 1 MB..400 MB input copied at
    20 GB/s after a short run and 8 GB/s after a long one (tau 4 ms), 60 + 0.2 us/node before Execute, 50 +
    0.1 us/node + out bytes at 0.3 ns/B after."""
    fast, slow, tau = 1 / 20e3, 1 / 8e3, 4000.0
    rows = []
    for i, (mb, dev_ms, n) in enumerate([(1, 0.8, 50), (10, 1.5, 120), (10, 7.0, 300), (20, 2.0, 80),
                                         (20, 8.0, 200), (80, 6.0, 49), (400, 30.0, 49), (5, 3.5, 150)]):
        b, out_b = mb * 1e6, mb * 1e4
        before = 60 + 0.2 * n + b * (fast + (slow - fast) * (1 - np.exp(-dev_ms * 1e3 / tau)))
        after = 50 + 0.1 * n + out_b * 3e-4
        rows.append({"model": f"m{i}", "before_us": before, "after_us": after, "device_median_ms": dev_ms,
                     "io": (b, out_b), "n": n})
    s = pd.DataFrame(rows)
    ct = fmt.copy_terms(s, dict(zip(s["model"], s["io"])), dict(zip(s["model"], s["n"])))
    assert ct["h2d_gb_per_s"] == pytest.approx([20.0, 8.0], rel=1e-3)
    assert ct["h2d_wait_tau_us"] == pytest.approx(tau, rel=1e-3)
    assert ct["us_per_node"] == pytest.approx(0.3, rel=1e-3) and ct["before_us0"] == pytest.approx(60, rel=1e-3)
    assert ct["after_us0"] == pytest.approx(50, rel=1e-3) and ct["d2h_us_per_byte"] == pytest.approx(3e-4, rel=1e-3)
    assert ct["train_mape_pct"]["before"] < 1e-3


def test_the_input_copy_slows_with_the_run_before_it():
    """prepared() turns copies_measured into the copy after a wait; timeline_us charges it by its own span."""
    cm = {"h2d_us_per_byte": 1 / 20e3, "h2d_slow_us_per_byte": 1 / 8e3, "h2d_wait_tau_us": 4000.0,
          "d2h_us_per_byte": 0.0, "us_per_node": 0.5}
    short = dict(prep([2, 2], [120, 120]), h2d_us=1000.0, h2d_wait={"extra_us": 1500.0, "tau_us": 4000.0},
                 fixed_us=1.0)
    long = dict(short, dev=np.array([8020.0, 8020.0]))
    rs, rl = tm.timeline_us(short, P, IDLE), tm.timeline_us(long, P, IDLE)
    # GPU-bound: span 100 + 100 = 200 us (launched at 0 and 2, the second queues) vs 16,000 us
    assert rs["h2d_us"] == pytest.approx(1000 + 1500 * (1 - np.exp(-200 / 4000)))
    assert rl["h2d_us"] == pytest.approx(1000 + 1500 * (1 - np.exp(-16000 / 4000)))
    assert rs["total_us"] == pytest.approx(100 + 1 + rs["h2d_us"] + 200 + 10)
    assert tm.timeline_us(short, P, IDLE, copies=False)["h2d_us"] == 0.0
    assert tm.timeline_us(dict(short, h2d_wait=None), P, IDLE)["h2d_us"] == 1000.0   # no measured wait: fixed
    # the spread scales the whole copy
    sp = tm.with_spread(short, P, IDLE, {"host_sum_us": [1.0, 1.0], "before_us": [0.5, 2.0]})
    assert sp["p90"] - sp["central"] == pytest.approx(rs["h2d_us"], rel=1e-6)
    assert sp["central"] - sp["p10"] == pytest.approx(rs["h2d_us"] / 2, rel=1e-6)
    # from a record: bytes x the two rates, nodes x the per-node cost
    rec = {"kernels": [{"type": "Relu", "op_type": "Relu", "ep": "CUDAExecutionProvider"}] * 4,
           "graph_inputs": [{"shape": [1, 1000], "dtype": "float32"}], "graph_outputs": [], "device": "cuda"}
    model = {"copies_measured": cm, "host_table": {"default_us": 5.0, "by_op_us": {}, "by_category_us": {}}, "gpu_floor_frac": 0.0}
    pr = tm.prepared(rec, {}, dict(model, gpu_table={"default": [1.0, 0.0, 0.0], "by_key": {}, "by_category": {}}))
    assert pr["h2d_us"] == pytest.approx(4000 / 20e3) and pr["fixed_us"] == pytest.approx(2.0)
    assert pr["h2d_wait"]["extra_us"] == pytest.approx(4000 * (1 / 8e3 - 1 / 20e3))


def test_nodes_and_host_table():
    nodes = pd.DataFrame({"model": ["a"] * 4, "session": [0, 0, 1, 1], "node": ["c1", "r1"] * 2,
                          "op": ["Conv", "Relu"] * 2, "host_us": [20.0, 8.0, 24.0, 10.0], "gpu_us": [5.0, 2.0, 7.0, 2.0],
                          "launches": [2, 1, 2, 1]})
    per = fmt.node_medians(nodes, 2.0)
    c1 = per.set_index("node").loc["c1"]
    assert c1["host_plain_us"] == pytest.approx(18.0) and c1["gpu_us"] == pytest.approx(6.0)
    rec = {"a": {"kernels": [{"node_name": "c1", "category": "conv"}, {"node_name": "r1", "category": "act"}]}}
    t = fmt.measured_host_table(per, rec)
    assert t["by_op_us"] == pytest.approx({"Conv": 18.0, "Relu": 7.0}) and t["by_category_us"]["act"] == 7.0
    preps = {"a": {"node_names": ["c1", "r1"], "dev": np.array([30.0, 22.5])}}
    overhead, floor_us, n = fmt.gpu_overhead_us(per, preps)
    # standalone - GPU: 24 and 20.5 -> median 22.25; r1 (22.5 - 22.25 > 0) is not tiny, c1 neither
    assert overhead == pytest.approx(22.25) and n == 2 and floor_us == 0.0
    with pytest.raises(HaseError, match="no training node matched"):
        fmt.gpu_overhead_us(per, {"a": {"node_names": ["x"], "dev": np.array([1.0])}})


def test_missing_column_is_one_line_error(tmp_path):
    d = tmp_path / "machine_x"
    d.mkdir()
    full = _sessions().assign(gpu_sum_us=100.0)
    assert not [c for c in fmt.NEED_S if c not in full.columns]
    full.drop(columns=["cupti_wall_us"]).to_csv(d / "trace_sessions.csv.gz", index=False)
    pd.DataFrame({c: [] for c in fmt.NEED_N}).to_csv(d / "trace_nodes.csv.gz", index=False)
    with pytest.raises(HaseError, match="missing column 'cupti_wall_us'"):
        fmt.read_machines([d])


def test_gpu_table_from_cupti_node_times():
    """A class whose nodes lie on a + b*GFLOP + c*MB exactly gets that line back; Conv is split by what
    changes cuDNN's kernels; an unknown class falls back to its category."""
    conv = lambda i, g=1, ks=3: {"node_name": f"c{i}", "op_type": "Conv", "category": "conv",  # noqa: E731
                                 "attributes": {"group": g, "kernel_shape": [ks, ks]},
                                 "flops": i * 1e9, "bytes_read": 2e6 * i, "bytes_written": 0}
    reshape = [{"node_name": f"s{i}", "op_type": "Reshape", "category": "copy", "flops": 0, "bytes_read": 8e6,
                "bytes_written": 8e6} for i in range(3)]
    kernels = [conv(i) for i in (1, 2, 3, 4)] + [conv(i, g=8) for i in (5, 6, 7)] + reshape
    per = pd.DataFrame({"model": "m", "node": [k["node_name"] for k in kernels],
                        "gpu_us": [5 + 2 * i + 0.5 * 2 * i for i in (1, 2, 3, 4)] + [10.0 * i for i in (5, 6, 7)]
                        + [0.0, 0.0, 3.0]})
    t = fmt.gpu_table(per, {"m": {"kernels": kernels}})
    assert set(t["by_key"]) == {"Conv", "Conv/grouped", "Reshape"}
    assert t["by_key"]["Reshape"] == [0.0, 0.0, 0.0]   # mostly launches nothing: no GPU time
    a, b, c = t["by_key"]["Conv"]
    assert [a + b * i + c * 2 * i for i in (1, 2, 3, 4)] == pytest.approx([8, 11, 14, 17], rel=1e-6)
    assert tm.gpu_key(conv(1, ks=1)) == "Conv/1x1" and tm.gpu_key({"op_type": "Relu"}) == "Relu"
    # one input channel per group (weight [Cout, 1, k, k]) is depthwise; wider groups are grouped convs
    assert tm.gpu_key(dict(conv(1, g=32), weight_shapes=[[32, 1, 3, 3]])) == "Conv/depthwise"
    assert tm.gpu_key(dict(conv(1, g=32), weight_shapes=[[256, 4, 3, 3]])) == "Conv/grouped"
    got = tm.gpu_table_us({"kernels": [conv(2), dict(conv(9), op_type="ConvTranspose")]}, t)
    assert got[0] == pytest.approx(11.0, rel=1e-6)
    assert got[1] == pytest.approx(np.dot(t["by_category"]["conv"], [1, 9, 18]), rel=1e-6)  # category line


def test_host_lines_follow_gpu_time_per_class():
    """Host = a + b * GPU time per class, a, b >= 0; a class whose host does not grow keeps b = 0; the
    timeline model uses the line where it has one, else the op type's median."""
    kernels = [{"node_name": f"c{i}", "op_type": "Conv", "category": "conv", "attributes": {"group": 1,
                "kernel_shape": [3, 3]}, "flops": i * 1e9, "bytes_read": 0, "bytes_written": 0} for i in range(1, 25)]
    kernels += [{"node_name": f"r{i}", "op_type": "Relu", "category": "elementwise", "flops": 0,
                 "bytes_read": i * 1e6, "bytes_written": 0} for i in range(1, 25)]
    table = {"by_key": {"Conv": [0.0, 10.0, 0.0], "Relu": [0.0, 0.0, 1.0]}, "by_category": {}, "default": [1, 0, 0]}
    rec = {"kernels": kernels}
    gpu = tm.gpu_table_us(rec, table)
    host = [20 + 0.5 * g if k["op_type"] == "Conv" else 7.0 for k, g in zip(kernels, gpu)]
    per = pd.DataFrame({"model": "m", "node": [k["node_name"] for k in kernels], "host_plain_us": host})
    lines = fmt.host_lines(per, {"m": rec}, {"m": gpu})
    assert lines["Conv"] == pytest.approx([20.0, 0.5], abs=1e-6) and lines["Relu"] == pytest.approx([7.0, 0.0], abs=1e-6)
    ht = {"by_op_us": {"Conv": 99.0, "Relu": 99.0}, "by_category_us": {}, "default_us": 1.0, "by_key_line": lines}
    got = tm.host_us(rec, ht, gpu)
    assert got == pytest.approx(host)
    assert tm.host_us(rec, ht)[0] == 99.0   # without GPU times: the op type's median
    # a class with 5..19 training nodes gets its median as a constant, one with fewer none
    few = [{"node_name": f"g{i}", "op_type": "Conv", "category": "conv", "attributes": {"group": 4},
            "weight_shapes": [[64, 16, 3, 3]], "flops": 1e9, "bytes_read": 0, "bytes_written": 0} for i in range(6)]
    per_few = pd.DataFrame({"model": "m", "node": [k["node_name"] for k in few],
                            "host_plain_us": [30.0, 31.0, 29.0, 33.0, 35.0, 28.0]})
    assert fmt.host_lines(per_few, {"m": {"kernels": few}}, {"m": np.ones(6)})["Conv/grouped"] == [30.5, 0.0]
    assert fmt.host_lines(per_few.head(4), {"m": {"kernels": few[:4]}}, {"m": np.ones(4)}) == {}


def test_csv_or_gz_reads_the_committed_twin(tmp_path):
    """Large measured CSVs are committed gzipped: a reader asked for x.csv gets x.csv.gz when only that exists."""
    from hase.utils.paths import csv_or_gz
    plain = tmp_path / "kernels.csv"
    assert csv_or_gz(plain) == plain                      # neither: the plain name (its reader reports it missing)
    pd.DataFrame({"a": [1, 2]}).to_csv(tmp_path / "kernels.csv.gz", index=False)
    assert csv_or_gz(plain) == tmp_path / "kernels.csv.gz"
    assert pd.read_csv(csv_or_gz(plain))["a"].tolist() == [1, 2]
    plain.write_text("a\n3\n")
    assert csv_or_gz(plain) == plain                      # both: the plain file wins


def test_csv_or_gz_finds_the_xz_twin_of_a_gz_name(tmp_path):
    """Readers that name the .csv.gz get the .csv.xz when the data were committed that way."""
    from hase.utils.paths import csv_or_gz
    from hase.utils.tables import read_machine_csv
    d = tmp_path / "machine_q"
    d.mkdir()
    pd.DataFrame({"model": ["m"], "x": [3]}).to_csv(d / "trace_nodes.csv.xz", index=False)
    assert csv_or_gz(d / "trace_nodes.csv.gz") == d / "trace_nodes.csv.xz"
    df = read_machine_csv(d, "trace_nodes.csv.gz", ["model", "x"])
    assert df["x"].tolist() == [3] and df["machine"].tolist() == ["machine_q"]
    with pytest.raises(HaseError, match="missing column 'y'"):
        read_machine_csv(d, "trace_nodes.csv.gz", ["model", "y"])


def test_overlapping_kernels_are_taken_off_the_largest_multi_kernel_nodes():
    """Older traces summed a node's kernel durations; where a session sums more node time than its GPU busy time,
    the excess is cuDNN's per-group kernels overlapping (wav2vec's positional conv: 2,965 us summed in a session
    busy for 846 us). It comes off the largest multi-kernel nodes, equal ones equally, none below one kernel."""
    nodes = pd.DataFrame({"machine": "m", "model": ["a"] * 5 + ["b"] * 2, "session": 0,
                          "node": ["conv0", "pos", "pos2", "add", "gemm", "c", "d"],
                          "gpu_us": [15.0, 900.0, 900.0, 5.0, 80.0, 40.0, 60.0],
                          "launches": [4, 9, 9, 1, 2, 3, 1]})
    sessions = pd.DataFrame({"machine": "m", "model": ["a", "b"], "session": 0, "gpu_busy_us": [600.0, 100.0]})
    out = fmt.overlap_corrected(sessions, nodes)
    a = out[out["model"] == "a"].set_index("node")["gpu_us"]
    assert a.sum() == pytest.approx(600.0, abs=0.01)          # down to the session's busy time
    assert a["pos"] == pytest.approx(a["pos2"]) and a["pos"] == pytest.approx(250.0, abs=0.01)
    assert (a["conv0"], a["add"], a["gemm"]) == (15.0, 5.0, 80.0)   # below the level: untouched
    # no overlap (sum = busy): nothing changes; traces with per-node unions (gpu_kernel_sum_us) are left alone
    assert out[out["model"] == "b"]["gpu_us"].tolist() == [40.0, 60.0]
    new = nodes.assign(gpu_kernel_sum_us=nodes["gpu_us"] * 2)
    assert fmt.overlap_corrected(sessions, new)["gpu_us"].tolist() == nodes["gpu_us"].tolist()
    # the floor: a node never drops below one kernel's share
    tight = sessions.assign(gpu_busy_us=[150.0, 100.0])
    t = fmt.overlap_corrected(tight, nodes).set_index("node")["gpu_us"]
    assert t["pos"] == pytest.approx(100.0) and t["gemm"] == pytest.approx(40.0) and t["conv0"] == pytest.approx(3.75)
