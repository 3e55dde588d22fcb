"""The whole-model timeline model (inference/timeline_model.py), the transfer model
(benchmark/bandwidth.py) and the load calibration script, on real records and real CPU runs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

REPO = Path(__file__).resolve().parent.parent

from hase.benchmark.bandwidth import fit_linear, load_table, transfer_ms  # noqa: E402
from hase.graph_model.overlap_simulator import simulate  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

H200_RECORDS = REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200"
P0 = dict(tm.DEFAULT_PARAMS)


@pytest.fixture(scope="module")
def record():
    # a real CUDA EP record from the H200 (committed in one tar.xz)
    from hase.graph_model.dag_critical_path import load_records
    return load_records(H200_RECORDS / "records.json.xz", ["resnet18_bs16_224x224"])["resnet18_bs16_224x224"]


def prep_of(record, h_us, g_us, h2d_us=0.0, d2h_us=0.0):
    n = len(record["kernels"])
    return {"h": np.full(n, float(h_us)), "dev": np.full(n, float(g_us)), "floor": 0.0, "on_host": np.zeros(n, bool),
            "sync": np.zeros(n, bool), "h2d_us": h2d_us, "d2h_us": d2h_us, "device": "cuda", "n": n}


IDLE = {"u": 0.0, "clock_ratio": 1.0}


def test_dispatch_bound_and_gpu_bound_limits(record):
    n = len(record["kernels"])
    r = tm.timeline_us(prep_of(record, 30.0, 1.0), P0, IDLE)
    assert r["total_us"] == pytest.approx(30.0 * n + 1.0) and r["host_first"] == n
    r = tm.timeline_us(prep_of(record, 1.0, 50.0, h2d_us=100.0, d2h_us=7.0), P0, IDLE)
    assert r["total_us"] == pytest.approx(100.0 + 1.0 + 50.0 * n + 7.0) and r["host_first"] == 1


def test_interference_stretches_gpu_and_charges_idle_launches(record):
    n = len(record["kernels"])
    busy = {"u": 0.5, "clock_ratio": 1.0}
    gpu_bound = prep_of(record, 1.0, 50.0)
    base = tm.timeline_us(gpu_bound, P0, IDLE)["total_us"]
    p = dict(P0, alpha=1.0)
    assert tm.timeline_us(gpu_bound, p, busy)["total_us"] - 1.0 == pytest.approx((base - 1.0) * 1.5)
    p = dict(P0, beta_us=40.0)
    dispatch_bound = prep_of(record, 30.0, 1.0)
    got = tm.timeline_us(dispatch_bound, p, busy)
    assert got["total_us"] == pytest.approx(30.0 * n + 1.0 + 20.0)  # each wait hides under the next dispatch
    assert got["wait_us"] == pytest.approx(20.0 * n)


def test_agrees_with_the_phase6_simulator(record):
    rng = np.random.default_rng(0)
    n = len(record["kernels"])
    prep = prep_of(record, 0, 0, h2d_us=80.0, d2h_us=5.0)
    prep["h"], prep["dev"] = rng.uniform(5, 40, n), rng.uniform(1, 80, n)
    p = dict(P0, c0_us=12.0, kappa=0.8, alpha=0.7, beta_us=25.0)
    terms = {"u": 0.6, "clock_ratio": 1.0}
    mine = tm.timeline_us(prep, p, terms)["total_us"]
    ids = [k["id"] for k in record["kernels"]]
    sim = simulate(record, dict(zip(ids, prep["h"] * p["kappa"])), dict(zip(ids, tm.gpu_stretched(tm.gpu_idle_us(prep, p), p, terms))),
                   {"session_overhead_us": 12.0, "h2d_us_per_byte": 0.0, "d2h_us_per_byte": 0.0, "h2d_fixed_us": 80.0,
                    "d2h_fixed_us": 5.0, "launch_wait_us": 25.0 * 0.6, "ep": "cuda"})
    assert sim["total_ms"] * 1e3 == pytest.approx(mine)


def test_fit_recovers_known_constants(record):
    rng = np.random.default_rng(1)
    n = len(record["kernels"])
    truth = dict(P0, c0_us=40.0, kappa=0.6, alpha=0.9, beta_us=30.0)
    cases = []
    for scale in (0.2, 0.5, 1.0, 2.0, 5.0):   # from dispatch-bound to GPU-bound models
        prep = prep_of(record, 0, 0)
        prep["h"], prep["dev"] = rng.uniform(10, 40, n), rng.uniform(1, 40, n) * scale
        for u in (0.0, 0.3, 0.6, 0.9):
            load = {"bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE": u}
            cases.append((prep, load, tm.predict_ms(prep, truth, load, 0.0)))
    idle = [c for c in cases if c[1]["bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 0]
    p = tm.fit_params(idle, 0.0, ("c0_us", "kappa"), dict(P0))
    p = tm.fit_params(cases, 0.0, ("alpha", "beta_us"), p)
    for k in ("c0_us", "kappa", "alpha", "beta_us"):
        assert p[k] == pytest.approx(truth[k], rel=0.05), k


def test_fit_stays_in_physical_range_and_reports_bounds(record):
    """Measured below what the kernels alone take: the unbounded optimum is a negative fixed cost.
    The fit stops at c0_us = 0 and says so; a constant fitted inside its range is not reported."""
    cases = []
    for g in (10.0, 20.0, 40.0):
        prep = prep_of(record, 0.0, g)
        ideal = tm.predict_ms(prep, P0, {}, 0.0)
        cases.append((prep, {}, ideal - 0.08))   # 80 us less than the kernels' sum
    p = tm.fit_params(cases, 0.0, ("c0_us",), dict(P0))
    assert p["c0_us"] == pytest.approx(tm.LOWER["c0_us"], abs=1e-3)
    assert tm.at_bounds(p, ["c0_us"]) == [{"param": "c0_us", "value": p["c0_us"], "bound": "lower", "limit": 0.0}]
    inside = dict(P0, c0_us=40.0, kappa=0.6, alpha=1.2)
    assert tm.at_bounds(inside, ["c0_us", "kappa"]) == []
    assert [b["param"] for b in tm.at_bounds(dict(inside, alpha=tm.UPPER["alpha"]), ["alpha"])] == ["alpha"]
    for k in tm.DEFAULT_PARAMS:   # one table, every constant, starts inside it
        assert tm.LOWER[k] <= tm.INITIAL[k] <= tm.UPPER[k], k


def test_load_terms_prefix_clock_and_cpu():
    t = tm.load_terms({"bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.7, "bg_DCGM_FI_DEV_SM_CLOCK": 1500.0}, 1980.0)
    assert t["u"] == pytest.approx(0.7) and t["clock_ratio"] == pytest.approx(1980 / 1500)
    assert tm.load_terms({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 2.0}, 0.0)["u"] == 1.0
    assert tm.load_terms({"bg_CPU_UTIL_PCT": 35.0}, 0.0)["u"] == pytest.approx(0.35)


def test_host_table_fallbacks(record):
    import pandas as pd
    nt = pd.DataFrame([{"model": "m", "stress_level": 0.0, "node_name": k["node_name"], "op_name": k["op_type"],
                        "kernel_time_us": 20.0 if k["op_type"] == "Conv" else 10.0} for k in record["kernels"]])
    table = tm.host_table(nt, {"m": record})
    assert table["by_op_us"]["Conv"] == 20.0 and table["by_op_us"]["Relu"] == 10.0
    fake = {"kernels": [{"op_type": "Conv", "category": "conv"}, {"op_type": "NewOp", "category": "conv"},
                        {"op_type": "Other", "category": "unknown"}]}
    assert list(tm.host_us(fake, table)) == [20.0, 20.0, table["default_us"]]
    with pytest.raises(HaseError):
        tm.host_table(nt.assign(stress_level=0.5), {"m": record})


# ---- transfer model (seed 003) -------------------------------------------------------------------
def test_bandwidth_fit_on_synthetic_copies():
    sizes = np.array([4e3, 6.4e4, 1e6, 1.6e7, 2.6e8])
    ms = 8e-8 * sizes + 0.01          # 12.5 GB/s, 10 us fixed
    f = fit_linear(sizes, ms * (1 + 0.01 * np.sin(sizes)))
    assert f["bandwidth_GBps"] == pytest.approx(12.5, rel=0.03) and f["fixed_us"] == pytest.approx(10, rel=0.05)
    with pytest.raises(HaseError):
        fit_linear([1e3, 1e3], [0.1, 0.1])


def test_bandwidth_cli_on_cpu_and_transfer_ms(tmp_path):
    env = dict(os.environ, HASE_HOME=str(tmp_path))
    r = subprocess.run([sys.executable, "benchmark/bandwidth.py", "--device", "cpu", "--set",
                        "bandwidth.sizes_kb=[4,64,1024,16384]", "--set", "bandwidth.budget_ms=30"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    path = next((tmp_path / "benchmark" / "results").glob("*/bandwidth_table.json"))
    table = load_table(path)
    for d in ("h2d", "d2h"):
        pts = table["directions"][d]["points"]
        assert [p["bytes"] for p in pts] == [4096, 65536, 1048576, 16777216]
        assert all(p["p10_ms"] <= p["median_ms"] <= p["p90_ms"] for p in pts)
        assert table["directions"][d]["fit"]["bandwidth_GBps"] > 0.1
    assert transfer_ms(table, "h2d", 0) == 0.0
    assert transfer_ms(table, "h2d", 2 ** 30) > transfer_ms(table, "h2d", 2 ** 20) > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"directions": {}}))
    with pytest.raises(HaseError, match="not a bandwidth table"):
        load_table(bad)


def test_load_calibration_cli_on_cpu(tmp_path):
    env = dict(os.environ, HASE_HOME=str(tmp_path))
    r = subprocess.run([sys.executable, "benchmark/calibrate_loads.py", "--device", "cpu", "--set", "settle_s=0.2",
                        "--set", "calibration.sample_s=0.5", "--set", "calibration.stressor_levels=[0,1]",
                        "--set", "calibration.stressor_modes=[matmul]",
                        "--set", "idle_busy_max=1"],   # not about the idle check (test_reliability.py): any machine
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import pandas as pd
    d = next((tmp_path / "benchmark" / "results").glob("*/load_calibration.csv")).parent
    df = pd.read_csv(d / "load_calibration.csv")
    assert list(df["level"]) == [0.0, 1.0] and "CPU_UTIL_PCT" in df
    assert "| stressor-matmul | 1 |" in (d / "load_calibration.md").read_text()
    # the launch probe ran after each window; the idle row is its reference
    assert (df["PROBE_N"] > 0).all() and (df["PROBE_RUN_US_MEAN"] > 0).all()
    assert df["PROBE_WAIT_US_PER_LAUNCH"].iloc[0] == 0 and (df["PROBE_WAIT_US_PER_LAUNCH"] >= 0).all()
    r = subprocess.run([sys.executable, "benchmark/calibrate_loads.py", "--device", "cpu", "--set", "settle_s=0.2",
                        "--set", "calibration.sample_s=0.2", "--set", "calibration.stressor_levels=[0.5]",
                        "--set", "calibration.stressor_modes=[matmul]"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "needs an idle setting" in r.stderr.strip().splitlines()[-1]
    r = subprocess.run([sys.executable, "benchmark/calibrate_loads.py", "--device", "cpu", "--set",
                        "calibration.stressor_levels=[1.5]"], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error:")


def test_launch_probe_chain_on_cpu():
    from hase.benchmark.launch_probe import N_LAUNCHES, make_probe, probe, probe_model, wait_per_launch_us
    model = onnx.load_from_string(probe_model())
    assert [n.op_type for n in model.graph.node] == ["Relu"] * N_LAUNCHES
    res = probe(make_probe("cpu", warmup=5), budget_ms=30)
    assert res["PROBE_N"] >= 20 and 0 < res["PROBE_RUN_US_MEDIAN"] <= res["PROBE_RUN_US_P90"]
    assert wait_per_launch_us(48.0, 16.0, 16) == 2.0 and wait_per_launch_us(10.0, 16.0) == 0.0


# ---- lookup table (seed 003) ---------------------------------------------------------------------
def _rows():
    import pandas as pd
    rows = []
    for kid, size, base in (("Conv_a", 1e6, 0.1), ("Conv_b", 1e8, 1.0), ("Relu_a", 1e6, 0.02)):
        for busy, slow in ((0.0, 1.0), (0.4, 1.2), (0.9, 2.0)):
            rows.append({"Kernel_ID": kid, "OpType": kid.split("_")[0], "flops": size / 2, "bytes_read": size / 4,
                         "bytes_written": size / 4, "bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE": busy,
                         "latency_device_ms_median": base * slow})
    return pd.DataFrame(rows)


def test_lookup_exact_interpolated_and_flagged():
    from hase.training.lookup_table import LookupTable, build
    lt = LookupTable(build(_rows(), "latency_device_ms_median"))
    load = lambda u: {"bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE": u}  # noqa: E731
    assert lt.predict("Conv_a", "Conv", 1e6, load(0.4)) == (pytest.approx(0.12), "exact")
    ms, how = lt.predict("Conv_a", "Conv", 1e6, load(0.2))
    assert how == "load-interp" and 0.1 < ms < 0.12          # monotone between measured loads
    assert lt.predict("Conv_a", "Conv", 1e6, load(1.0))[1] == "load-extrapolated"
    ms, how = lt.predict("Conv_new", "Conv", 1e7, load(0.0))  # between two measured sizes (log-log)
    assert how == "shape-interp" and ms == pytest.approx(np.sqrt(0.1 * 1.0))
    assert lt.predict("Conv_big", "Conv", 1e9, load(0.0)) == (pytest.approx(10.0), "shape-extrapolated")
    ms, how = lt.predict("Gemm_x", "Gemm", 1e6, load(0.0))
    assert how == "missing" and np.isnan(ms)


def test_lookup_drops_a_bad_run_but_keeps_physics():
    from hase.training.lookup_table import sane_points
    # a kernel 40x slower at idle than under every heavier load is a bad run; a real slowdown stays
    assert sane_points([0.0, 0.3, 0.6], [1.7, 0.04, 0.041]) == ([0.3, 0.6], [0.04, 0.041])
    assert sane_points([0.0, 0.3, 0.9], [0.05, 0.06, 1.0]) == ([0.0, 0.3, 0.9], [0.05, 0.06, 1.0])


def test_records_from_one_tar_xz_or_a_folder(tmp_path):
    """load_records reads the committed records.json.xz ({model: record}) or a folder of .json / .json.gz files;
    a model that is not there is a one-line error naming it and the file."""
    import gzip
    import json
    from hase.graph_model.dag_critical_path import load_records, records_in_file
    tar = H200_RECORDS / "records.json.xz"
    every = records_in_file(tar)
    assert len(every) >= 40 and all("kernels" in r and "edges" in r for r in every.values())
    two = load_records(tar, ["resnet18_bs1_224x224", "vit_b_16_bs16_224x224"])
    assert set(two) == {"resnet18_bs1_224x224", "vit_b_16_bs16_224x224"}
    with pytest.raises(HaseError, match=r"records\.json\.xz: no CUDA record for no_such_model"):
        load_records(tar, ["no_such_model"])
    (tmp_path / "a.cuda.json").write_text(json.dumps(two["resnet18_bs1_224x224"]))
    (tmp_path / "b.cuda.json.gz").write_bytes(gzip.compress(json.dumps(two["vit_b_16_bs16_224x224"]).encode()))
    got = load_records(tmp_path, ["a", "b"])
    assert got["a"]["kernels"] == two["resnet18_bs1_224x224"]["kernels"] and len(got["b"]["kernels"]) > 10
