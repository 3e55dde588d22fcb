"""The timeline model with measured terms (inference/fit_measured_timeline.py, timeline_model.with_spread /
with_options): pure functions on synthetic data with hand-computed answers."""
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inference import fit_measured_timeline as fmt  # noqa: E402
from inference import timeline_model as tm  # noqa: E402
from utils.errors import HaseError  # noqa: E402

IDLE = {"u": 0.0, "clock_ratio": 1.0, "wait_us": 0.0}
P = dict(tm.DEFAULT_PARAMS, c0_us=100.0, overhead_us=20.0)


def prep(h, dev, launch_at_start=True, h2d=50.0, d2h=10.0):
    n = len(h)
    return {"h": np.array(h, float), "dev": np.array(dev, float), "floor": 0.0, "floor_us": 2.0,
            "launch_at_start": launch_at_start, "on_host": np.zeros(n, bool), "sync": np.zeros(n, bool),
            "h2d_us": h2d, "d2h_us": d2h, "device": "cuda", "n": n}


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
    from inference.predict_model_latency import session_options
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


def test_csv_or_gz_reads_the_committed_twin(tmp_path):
    """Large measured CSVs are committed gzipped: a reader asked for x.csv gets x.csv.gz when only that exists."""
    from utils.paths import csv_or_gz
    plain = tmp_path / "kernels.csv"
    assert csv_or_gz(plain) == plain                      # neither: the plain name (its reader reports it missing)
    pd.DataFrame({"a": [1, 2]}).to_csv(tmp_path / "kernels.csv.gz", index=False)
    assert csv_or_gz(plain) == tmp_path / "kernels.csv.gz"
    assert pd.read_csv(csv_or_gz(plain))["a"].tolist() == [1, 2]
    plain.write_text("a\n3\n")
    assert csv_or_gz(plain) == plain                      # both: the plain file wins


def test_csv_or_gz_finds_the_xz_twin_of_a_gz_name(tmp_path):
    """Readers that name the .csv.gz get the .csv.xz when the data were committed that way."""
    from utils.paths import csv_or_gz
    from utils.tables import read_machine_csv
    d = tmp_path / "machine_q"
    d.mkdir()
    pd.DataFrame({"model": ["m"], "x": [3]}).to_csv(d / "trace_nodes.csv.xz", index=False)
    assert csv_or_gz(d / "trace_nodes.csv.gz") == d / "trace_nodes.csv.xz"
    df = read_machine_csv(d, "trace_nodes.csv.gz", ["model", "x"])
    assert df["x"].tolist() == [3] and df["machine"].tolist() == ["machine_q"]
    with pytest.raises(HaseError, match="missing column 'y'"):
        read_machine_csv(d, "trace_nodes.csv.gz", ["model", "y"])
