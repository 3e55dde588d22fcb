"""Phases 5-6 on CPU with real ORT measurements (no GPU): features, training, predictor, DAG,
overlap simulator.

The phase 4 CSV fixture is measured here: phases 1-3 build resnet18 + mobilenet_v2 at 64x64 into
a temp HASE_HOME, then each kernel model runs in onnxruntime (median of 20 timed session.run) at
two load levels (idle, and one busy-loop process of our own), with background metrics sampled by
psutil while the kernel is idle, as phase 4 does.
"""
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent

from hase.graph_model import dag_critical_path as dcp  # noqa: E402
from hase.graph_model import overlap_simulator as osim  # noqa: E402
from hase.training import features as F  # noqa: E402
from hase.training import train_kernel_model as tkm  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402
from hase.utils.onnx_io import dummy_feed  # noqa: E402
from hase.utils.ort_session import device_slug  # noqa: E402

PY = sys.executable
RUNS, WARMUP = 20, 3
# the fixture measures session.run (e2e) per kernel, so train on that target
FAST_TREES = ["--set", "xgboost.n_estimators=150", "--set", "random_forest.n_estimators=60", "--set", "target=latency_ms"]


def run_script(script, *args, home: Path, check=True):
    env = dict(os.environ, HASE_HOME=str(home))
    res = subprocess.run([PY, str(REPO / script), *args], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    if check and res.returncode != 0:
        raise AssertionError(f"{script} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


# ---- phase 4 CSV from real measurements --------------------------------------------------------

def cpu_metrics(interval_s: float) -> dict:
    """System-wide CPU metrics; cpu_percent over interval_s while this process does nothing."""
    freq = psutil.cpu_freq()
    return {"CPU_UTIL_PCT": psutil.cpu_percent(interval=interval_s),
            "CPU_FREQ_MHZ": freq.current if freq else math.nan,
            "MEM_USED_MB": psutil.virtual_memory().used / 2**20, "LOAD_AVG_1M": os.getloadavg()[0]}


def time_kernel(path: Path) -> list:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as phase 3 built it
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feed = dummy_feed(sess)
    for _ in range(WARMUP):
        sess.run(None, feed)
    ms = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        sess.run(None, feed)
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def geometry(entry: dict) -> dict:
    """Phase 4's geometry columns, computed independently of training/features.py."""
    act = next(e for e in entry["inputs"] if e and e["role"] == "activation")["shape"]
    out = entry["outputs"][0]["shape"]
    pad = lambda s: (list(s) + [1, 1, 1, 1])[:4] if len(s) >= 2 else [1, (s or [1])[0], 1, 1]  # noqa: E731
    n, c, h, w = pad(act)
    _, co, ho, wo = pad(out)
    a = entry["attributes"]
    ks, st = a.get("kernel_shape", [1, 1]), a.get("strides", [1, 1])
    return {"N": n, "C": c, "H": h, "W": w, "Cout": co, "Hout": ho, "Wout": wo, "kernel_h": ks[0],
            "kernel_w": ks[-1], "stride_h": st[0], "groups": a.get("group", 1)}


def measure_csv(home: Path, out_csv: Path) -> pd.DataFrame:
    index = json.loads((home / "kernel_model" / "kernel_onnx" / "index.json").read_text())
    rows = []
    for level, load in ((0, "none"), (1, "stressor-cpu-busyloop")):
        stressor = None
        if level:
            stressor = subprocess.Popen([PY, "-c", "while True:\n    sum(i * i for i in range(10000))"])
            time.sleep(0.3)
        try:
            for fname, e in sorted(index["kernels"].items()):
                bg = cpu_metrics(0.03)
                t_start = time.time()
                ms = time_kernel(home / "kernel_model" / "kernel_onnx" / fname)
                window = cpu_metrics(0.0)   # since the last call: includes the kernel's own work
                act = next(i for i in e["inputs"] if i and i["role"] == "activation")["shape"]
                row = {"Kernel_ID": Path(fname).stem, "OpType": e["type"], "category": e["category"],
                       "op_type": e["op_type"], "Input_Shape": "x".join(map(str, act)),
                       "input_shapes": json.dumps([i["shape"] for i in e["inputs"] if i]),
                       "output_shapes": json.dumps([o["shape"] for o in e["outputs"]]),
                       "weight_shapes": json.dumps([i["shape"] for i in e["inputs"] if i and i["role"] == "weight"]),
                       "attributes": json.dumps(e["attributes"]), **geometry(e),
                       "flops": e["flops"], "bytes_read": e["bytes_read"], "bytes_written": e["bytes_written"],
                       "stress_level": level, "load": load, "status": "ok", "error": "",
                       "latency_e2e_ms_mean": statistics.fmean(ms), "latency_e2e_ms_median": statistics.median(ms),
                       "latency_e2e_ms_p10": float(np.percentile(ms, 10)),
                       "latency_e2e_ms_p90": float(np.percentile(ms, 90)),
                       "latency_device_ms_mean": math.nan, "latency_device_ms_median": math.nan,
                       "latency_device_ms_p10": math.nan, "latency_device_ms_p90": math.nan,
                       "latency_ms": statistics.median(ms), **window, **{f"bg_{k}": v for k, v in bg.items()},
                       "start_ts": t_start, "end_ts": time.time(), "gpu_name": "", "gpu_driver": "",
                       "ort_version": ort.__version__, "device": "cpu"}
                rows.append(row)
        finally:
            if stressor is not None:
                stressor.kill()
                stressor.wait()
    df = pd.DataFrame(rows)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    return df


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    h = tmp_path_factory.mktemp("hase_home")
    run_script("model_zoo/torchvision_exporter.py", "--device", "cpu", "--set", "batch_sizes=[1]",
               "--set", "resolutions=[64]", "--set", "models=[resnet18,mobilenet_v2]", home=h)
    run_script("ort_analysis/fusion_detector.py", "--device", "cpu", home=h)
    run_script("kernel_model/kernel_builder.py", "--device", "cpu", home=h)
    return h


@pytest.fixture(scope="module")
def records(home) -> dict:
    d = home / "ort_analysis" / "ort_kernel_record"
    return {p.name.split(".")[0]: json.loads(p.read_text()) for p in sorted(d.glob("*.cpu.json"))}


@pytest.fixture(scope="module")
def bench(home):
    slug = device_slug("cpu")
    csv = home / "benchmark" / "results" / slug / "kernels.csv"
    return measure_csv(home, csv), csv, slug


@pytest.fixture(scope="module")
def trained(home, bench):
    """Train through the CLI on the default data path of the device."""
    res = run_script("training/train_kernel_model.py", "--device", "cpu", "--set", "min_rows_per_type=10",
                     "--set", "min_kernels_per_type=3", *FAST_TREES, home=home)
    model_dir = home / "training" / "models" / bench[2]
    return res, model_dir


# ---- phase 5 -----------------------------------------------------------------------------------

def test_fixture_is_real_measurements(bench):
    df, _, _ = bench
    assert (df["latency_ms"] > 0).all() and df["Kernel_ID"].nunique() >= 40
    assert set(df["stress_level"]) == {0, 1}


def test_features_numeric_named_and_same_for_record_and_csv(bench, records):
    df, _, _ = bench
    load_fields = ["bg_CPU_UTIL_PCT", "bg_MEM_USED_MB"]
    codes = F.type_vocabulary(df["OpType"])
    X = F.feature_frame(df, load_fields, codes)
    feats = F.feature_names(load_fields)
    assert list(X.columns) == feats + [F.META_TYPE]
    assert all(pd.api.types.is_float_dtype(X[c]) for c in feats)
    assert np.isfinite(X[feats].to_numpy()).all()
    assert not any(c.startswith("feature") for c in feats)
    assert {"cat_conv", "cat_gemm", "type_code", "arith_intensity", "log_flops"} <= set(feats)
    # the same kernel from its record (prediction) and from its CSV row (training): same features
    by_id = df.drop_duplicates("Kernel_ID").set_index("Kernel_ID")
    load = {"bg_CPU_UTIL_PCT": 12.0, "MEM_USED_MB": 1000.0}   # bare DCGM-style name accepted too
    n = 0
    for rec in records.values():
        for k in rec["kernels"]:
            row = by_id.loc[f"{k['type']}_{k['signature']}"].to_dict()
            row.update({"bg_CPU_UTIL_PCT": 12.0, "bg_MEM_USED_MB": 1000.0})
            assert F.kernel_features(k, load_fields, codes, load=load) == F.kernel_features(row, load_fields, codes)
            n += 1
    assert n == sum(len(r["kernels"]) for r in records.values())
    conv = next(k for k in records["resnet18_bs1_64x64"]["kernels"] if k["type"] == "Conv_Relu")
    f = F.kernel_features(conv, [], codes)
    assert (f["N"], f["C"], f["H"], f["W"], f["Cout"], f["kernel_h"], f["stride_h"]) == (1, 3, 64, 64, 64, 7, 2)
    assert f["cat_conv"] == 1.0 and f["fused_act"] == 1.0 and f["fused_add"] == 0.0


def test_group_split_has_no_kernel_leak(bench):
    df, _, _ = bench
    tr, te = tkm.group_split(df["Kernel_ID"].to_numpy(), 0.25, 0)
    assert len(tr) and len(te)
    assert not set(df["Kernel_ID"].iloc[tr]) & set(df["Kernel_ID"].iloc[te])
    assert len(tr) + len(te) == len(df)


def test_load_dataset_keeps_ok_rows_only(bench, tmp_path):
    df, _, _ = bench
    bad = df.iloc[:1].copy()
    bad[["status", "error", "latency_ms"]] = ["failed", "ORT error", math.nan]
    path = tmp_path / "kernels.csv"
    pd.concat([df, bad]).to_csv(path, index=False)
    got = tkm.load_dataset(path, "latency_ms")
    assert len(got) == len(df) and (got["status"] == "ok").all()


def test_training_writes_manifest_onnx_and_predicts(trained, bench, records):
    res, model_dir = trained
    df, csv, slug = bench
    assert "MAPE=" in res.stdout and "RMSPE=" in res.stdout and "±10%=" in res.stdout
    assert "processed features" in res.stdout
    m = json.loads((model_dir / "manifest.json").read_text())
    assert m["format"] == tkm.FORMAT and m["features"][:4] == ["N", "C", "H", "W"]
    assert m["load_fields"] and all(f.startswith("bg_") for f in m["load_fields"])
    assert m["metadata"]["data_sha256"] == tkm.sha256_file(csv) and m["metadata"]["ort_version"] == ort.__version__
    assert {"global", "generic"} <= set(m["models"]) and m["metrics"]["test"]["n"] > 0
    assert set(m["per_type"]) == set(df["OpType"])
    for entry in m["models"].values():
        assert (model_dir / entry["onnx"]).exists() and entry["onnx_max_abs_diff_log"] < 1e-3
        if entry["algo"] == "xgboost":
            assert (model_dir / entry["native"]).exists()
    assert not list(model_dir.glob("*.pkl")) and not list(model_dir.glob("*.joblib"))
    pred = tkm.load_predictor(model_dir)
    rows = pred.feature_rows(df.to_dict("records"), load=df.iloc[0].to_dict())
    ms = pred.predict(rows)
    assert ms.shape == (len(df),) and np.isfinite(ms).all() and (ms > 0).all()
    # without the kernel_type column the type_code column routes: same answer
    assert np.allclose(pred.predict(rows.drop(columns=[F.META_TYPE])), ms)
    with pytest.raises(HaseError, match="manifest"):
        tkm.load_predictor(model_dir.parent)
    rec = records["resnet18_bs1_64x64"]
    load = {f: float(df[f].median()) for f in m["load_fields"]}
    by_id = pred.predict_kernels(rec["kernels"], load)
    assert list(by_id) == [k["id"] for k in rec["kernels"]] and all(v > 0 for v in by_id.values())


def test_unknown_type_falls_back_with_warning(trained, bench, records):
    _, model_dir = trained
    df, _, _ = bench
    pred = tkm.load_predictor(model_dir)
    k = dict(records["resnet18_bs1_64x64"]["kernels"][1], type="Frobnicate_Relu", category="other")
    load = {f: float(df[f].median()) for f in pred.load_fields}
    with pytest.warns(tkm.UnknownKernelTypeWarning, match="Frobnicate_Relu"):
        out = pred.predict_kernels([k], load)
    assert math.isfinite(out[k["id"]]) and out[k["id"]] > 0 and pred.unseen_types([k]) == ["Frobnicate_Relu"]


def test_missing_load_field_error_names_it(trained, bench, records):
    _, model_dir = trained
    df, _, _ = bench
    pred = tkm.load_predictor(model_dir)
    missing = pred.load_fields[0]
    load = {f: float(df[f].median()) for f in pred.load_fields if f != missing}
    with pytest.raises(HaseError, match=missing):
        pred.predict_kernels(records["resnet18_bs1_64x64"]["kernels"], load)


def test_training_cli_errors_are_one_line(home, tmp_path):
    res = run_script("training/train_kernel_model.py", "--set", f"data_csv={tmp_path}/none.csv", home=home,
                     check=False)
    assert res.returncode == 2 and res.stderr.strip().startswith("error:") and len(res.stderr.strip().splitlines()) == 1
    res = run_script("training/train_kernel_model.py", "--set", "nonsense=1", home=home, check=False)
    assert res.returncode == 2 and "nonsense" in res.stderr


# ---- phase 6.1 -----------------------------------------------------------------------------------

def test_dag_from_real_record(home, records):
    rec = records["mobilenet_v2_bs1_64x64"]
    dag = dcp.build_dag(rec)
    assert dag.number_of_nodes() == len(rec["kernels"])
    assert dag.number_of_edges() == len({(e["src"], e["dst"]) for e in rec["edges"]})
    order = dcp.execution_order(dag)
    assert order == [k["id"] for k in rec["kernels"]]  # the record is ORT's (topological) order
    rng = np.random.default_rng(0)
    node_ms = {k["id"]: float(rng.uniform(0.01, 1.0)) for k in rec["kernels"]}
    assert dcp.calculate_latency(dag, node_ms) == pytest.approx(sum(node_ms.values()), rel=1e-12)
    cp_ms, cp = dcp.critical_path(dag, node_ms)
    assert max(node_ms.values()) <= cp_ms <= sum(node_ms.values())
    assert cp_ms == pytest.approx(sum(node_ms[n] for n in cp))
    assert all(dag.has_edge(a, b) for a, b in zip(cp, cp[1:]))
    with pytest.raises(HaseError, match=re.escape(order[3])):
        dcp.calculate_latency(dag, {n: 1.0 for n in order if n != order[3]})
    # CLI writes a DAG per record that networkx reads back
    run_script("graph_model/dag_critical_path.py", "--device", "cpu", home=home)
    for name, r in records.items():
        back = dcp.load_dag(home / "graph_model" / "model_DAG" / f"{name}.cpu.json")
        assert back.number_of_nodes() == len(r["kernels"]) and back.graph["model"] == name


# ---- phase 6.2 -----------------------------------------------------------------------------------

def chain_record(n: int) -> dict:
    kernels = [{"id": f"K#{i}", "type": "K", "op_type": "K", "category": "other", "ep": "CUDAExecutionProvider",
                "flops": 0, "bytes_read": 0, "bytes_written": 0} for i in range(n)]
    edges = [{"src": f"K#{i}", "dst": f"K#{i + 1}", "tensor": f"t{i}", "bytes": 4} for i in range(n - 1)]
    return {"model": "chain", "device": "cuda", "kernels": kernels, "edges": edges,
            "graph_inputs": [{"name": "x", "shape": [1, 250], "dtype": "float32"}],
            "graph_outputs": [{"name": "y", "shape": [1, 25], "dtype": "float32"}]}


NO_FIXED = {"session_overhead_us": 0.0, "h2d_us_per_byte": 0.0, "h2d_fixed_us": 0.0, "d2h_us_per_byte": 0.0,
            "d2h_fixed_us": 0.0}


def test_dispatch_bound_total_is_sum_of_host(records):
    rec = records["resnet18_bs1_64x64"]
    ids = [k["id"] for k in rec["kernels"]]
    r = osim.simulate(rec, {i: 50.0 for i in ids}, {i: 1.0 for i in ids}, dict(NO_FIXED, ep="cuda"))
    assert r["total_ms"] == pytest.approx(len(ids) * 50.0 / 1e3 + 1.0 / 1e3)   # + the last kernel
    assert set(r["bound_by"].values()) == {"host"} and r["gpu_busy_fraction"] < 0.05
    assert r["critical_path"][-1]["resource"] in ("gpu", "copy")


def test_gpu_bound_total_is_sum_of_gpu(records):
    rec = records["resnet18_bs1_64x64"]
    ids = [k["id"] for k in rec["kernels"]]
    r = osim.simulate(rec, {i: 2.0 for i in ids}, {i: 100.0 for i in ids}, dict(NO_FIXED, ep="cuda"))
    assert r["total_ms"] == pytest.approx((2.0 + len(ids) * 100.0) / 1e3)   # + the first launch
    assert list(r["bound_by"].values()).count("gpu") == len(ids) - 1 and r["gpu_busy_fraction"] > 0.99
    assert [s["resource"] for s in r["critical_path"] if s["end_us"] > s["start_us"]] == ["host", "gpu"]


def test_three_node_hand_computed():
    """overhead 5, H2D 0.01*1000+2 = 12, D2H 0.01*100+3 = 4 (us).
    host: A [17,27] B [27,29] C [29,59];  gpu: A [27,47] B [47,52] (queued behind A) C [59,60] (waits
    for its launch); D2H [60,64]. Total 64 us; critical path: overhead+H2D, host through C, C on gpu, D2H."""
    rec = chain_record(3)
    p = {"ep": "cuda", "session_overhead_us": 5.0, "h2d_us_per_byte": 0.01, "h2d_fixed_us": 2.0,
         "d2h_us_per_byte": 0.01, "d2h_fixed_us": 3.0}
    r = osim.simulate(rec, {"K#0": 10, "K#1": 2, "K#2": 30}, {"K#0": 20, "K#1": 5, "K#2": 1}, p)
    assert r["total_ms"] == pytest.approx(0.064, abs=1e-12)
    kern = {e["node"]: (e["start_us"], e["end_us"]) for e in r["timeline"] if e["kind"] == "kernel"}
    assert kern == {"K#0": (27, 47), "K#1": (47, 52), "K#2": (59, 60)}
    assert r["bound_by"] == {"K#0": "host", "K#1": "gpu", "K#2": "host"}
    segs = [(s["resource"], s["start_us"], s["end_us"]) for s in r["critical_path"]]
    assert segs == [("host", 0, 5), ("copy", 5, 17), ("host", 17, 59), ("gpu", 59, 60), ("copy", 60, 64)]
    assert sum(s["dur_ms"] for s in r["critical_path"]) == pytest.approx(r["total_ms"])
    assert r["gpu_busy_fraction"] == pytest.approx(26 / 64)
    # CPU EP: one thread computes and dispatches
    c = osim.simulate(rec, {"K#0": 10, "K#1": 2, "K#2": 30}, {"K#0": 20, "K#1": 5, "K#2": 1},
                      dict(p, ep="cpu"))
    assert c["total_ms"] == pytest.approx((5 + 10 + 2 + 30 + 20 + 5 + 1) / 1e3)
    assert c["gpu_busy_fraction"] == 0.0
    with pytest.raises(HaseError, match="K#1"):
        osim.simulate(rec, {"K#0": 1, "K#2": 1}, 1.0, p)


def test_memcpy_to_host_blocks_the_host():
    rec = chain_record(3)
    rec["kernels"][1]["op_type"] = "MemcpyToHost"
    r = osim.simulate(rec, 1.0, {"K#0": 100, "K#1": 1, "K#2": 1}, dict(NO_FIXED, ep="cuda"))
    disp = {e["node"]: e["start_us"] for e in r["timeline"] if e["kind"] == "dispatch"}
    assert disp["K#2"] == pytest.approx(102)   # waited for the copy (1 + 100 + 1), not 2


def test_chrome_trace_is_valid(records, tmp_path, home):
    rec = records["mobilenet_v2_bs1_64x64"]
    ids = [k["id"] for k in rec["kernels"]]
    r = osim.simulate(rec, 8.0, {i: 5.0 + (i.startswith("Conv") * 10.0) for i in ids}, {"ep": "cuda"})
    path = osim.write_chrome_trace(r, tmp_path / "t.json")
    data = json.loads(path.read_text())
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in xs} == {1, 2}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and isinstance(e["name"], str) for e in xs)
    names = {e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"host dispatch", "GPU stream"}
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(r["total_ms"] * 1e3, rel=1e-6)
    # CLI on a real record with per-node times from a JSON file
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"host_us": {i: 8.0 for i in ids}, "gpu_us": {i: 5.0 for i in ids}}))
    rp = home / "ort_analysis" / "ort_kernel_record" / "mobilenet_v2_bs1_64x64.cpu.json"
    res = run_script("graph_model/overlap_simulator.py", "--record", str(rp), "--times", str(times),
                     "--set", "overlap.ep=cuda", "--trace", str(tmp_path / "cli.json"), home=home)
    assert "predicted session.run" in res.stdout
    assert json.loads((tmp_path / "cli.json").read_text())["traceEvents"]
