"""The whole chain on CPU EP (real exports, sessions and measurements), then phase 7's predictor:
metrics file, missing field, and a real Prometheus server scraping the DCGM-format exporter."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import free_port, run_script, start_prometheus, wait_for_series

REPO = Path(__file__).resolve().parent.parent


def run(args, home, check=True, timeout=900):
    return run_script(args, home, check, timeout, cwd=REPO)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("pipe")
    # --idle-busy-max 1: the suite must pass on a loaded machine; refusing a busy baseline is test_reliability's
    p = run(["-m", "hase.utils.pipeline", "--device", "cpu", "--idle-busy-max", "1"], h)
    assert "pipeline done on cpu" in p.stdout
    written = sorted(str(f.relative_to(h)) for f in h.rglob("*") if f.is_file())   # before the tests add theirs
    (h / "pipeline_stderr.txt").write_text(p.stderr)  # what the main job's log gets (not a TTY)
    (h / "pipeline_stdout.txt").write_text(p.stdout)
    (h / "pipeline_files.txt").write_text("\n".join(written) + "\n")
    return h


def slug_dir(root: Path) -> Path:
    dirs = [d for d in root.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_pipeline_outputs(home):
    res = slug_dir(home / "benchmark" / "results")
    import pandas as pd
    k = pd.read_csv(res / "kernels.csv")
    assert set(k["stress_level"]) == {0.0, 0.6} and (k["status"] == "ok").all()
    assert (k["latency_ms"] > 0).all() and "bg_CPU_UTIL_PCT" in k
    m = pd.read_csv(res / "models.csv")   # whole-model labels: median over 3 fresh sessions (config default)
    assert (m["status"] == "ok").all() and (m["label_sessions"] == 3).all()
    assert (m["latency_sessions_p10_ms"] <= m["latency_ms"]).all()
    assert (m["latency_ms"] <= m["latency_sessions_p90_ms"]).all()
    man = json.loads((slug_dir(home / "training" / "models") / "manifest.json").read_text())
    assert man["metadata"]["data_sha256"] and man["features"]
    ev = slug_dir(home / "evaluation")
    summary = json.loads((ev / "summary.json").read_text())
    assert summary["cases"] > 0 and {"hase", "hase_ignore_load", "sum_standalone", "alpha_sum_beta",
                                     "sum_ort_kernel_time"} <= set(summary["by_condition"])
    assert (ev / "pred_vs_actual.png").exists() and (ev / "error_cdf.png").exists()
    cases = pd.read_csv(ev / "cases.csv")   # the judged label with its spread across sessions beside it
    assert (cases["actual_sessions"] == 3).all()
    assert (cases["actual_sessions_p10_ms"] <= cases["actual_ms"]).all()
    assert (cases["actual_ms"] <= cases["actual_sessions_p90_ms"]).all()
    assert list((home / "graph_model" / "model_DAG").glob("*.json"))
    # the log holds a progress line per 10% (or 30 s) of each loop, not tqdm's every refresh
    log = (home / "pipeline_stderr.txt").read_text()
    collect = [ln for ln in log.splitlines() if ln.startswith("collect: ")]
    assert "\r" not in log and 10 <= len(collect) <= 60, collect  # tqdm: ~2 per item (424 items)


def _predict(home, *extra, check=True):
    model = sorted((home / "model_zoo" / "models").glob("resnet18_bs1_64x64.onnx"))[0]
    return run(["inference/predict_model_latency.py", "--device", "cpu", "--model", str(model), *extra], home,
               check=check)


def test_predict_with_metrics_file(home, tmp_path):
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"CPU_UTIL_PCT": 5.0, "CPU_FREQ_MHZ": 2000, "MEM_USED_MB": 4000, "LOAD_AVG_1M": 0.3}))
    out = tmp_path / "pred.json"
    p = _predict(home, "--metrics-file", str(snap), "--json", str(out))
    assert "predicted session.run" in p.stdout
    res = json.loads(out.read_text())
    assert res["total_ms"] > 0 and len(res["kernels"]) > 10 and res["load_source"].startswith("file")
    assert res["p10_ms"] <= res["total_ms"] <= res["p90_ms"]   # every prediction carries its spread
    busy = dict(json.loads(snap.read_text()), CPU_UTIL_PCT=95.0)
    snap.write_text(json.dumps(busy))
    trace = tmp_path / "timeline.json"
    _predict(home, "--metrics-file", str(snap), "--json", str(out), "--trace", str(trace))
    loaded = json.loads(out.read_text())
    assert loaded["method"] == "timeline" and loaded["neighbour_busy"] == pytest.approx(0.95)
    assert loaded["p10_ms"] <= loaded["total_ms"] <= loaded["p90_ms"]
    # the fitted interference can only slow a model down; its idle estimate ignores the load
    assert loaded["total_ms"] >= res["total_ms"] - 1e-9 and loaded["idle_ms"] == pytest.approx(res["idle_ms"])
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("cat") in ("dispatch", "cpu_node") for e in events) == len(loaded["kernels"])


def test_evaluator_fit_saved_and_read_back(home):
    """--fit wrote the timeline model the predictor reads; a plain rerun reproduces the numbers."""
    slug = slug_dir(home / "benchmark" / "results").name
    model = json.loads((home / "inference" / "results" / slug / "timeline_model.json").read_text())
    assert model["format"] == "hase.timeline_model/1" and model["params"]["kappa"] >= 0
    assert model["statistic"] == "mean"  # the default target: the mean of session.run
    from hase.inference import timeline_model as tm
    for k in model["fitted"]:   # every fitted constant inside its physical range; ends on a bound are listed
        assert tm.LOWER[k] <= model["params"][k] <= tm.UPPER[k], k
    assert model["at_bounds"] == tm.at_bounds(model["params"], model["fitted"])
    ev = slug_dir(home / "evaluation")
    before = json.loads((ev / "summary.json").read_text())
    run(["evaluator.py", "--device", "cpu", "--from-csv", str(home / "benchmark" / "results" / slug / "models.csv"),
         "--out", str(home / "re_eval")], home)
    after = json.loads((home / "re_eval" / "summary.json").read_text())
    assert before["params_at_bounds"] == after["params_at_bounds"] == model["at_bounds"]
    assert after["by_condition"]["hase"]["all"]["mape_pct"] == pytest.approx(before["by_condition"]["hase"]["all"]["mape_pct"])
    assert after["batch_scoring_cases_per_s"] > 0


def test_metrics_file_missing_field(home, tmp_path):
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"CPU_UTIL_PCT": 5.0}))
    p = _predict(home, "--metrics-file", str(snap), check=False)
    assert p.returncode == 2
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "CPU_FREQ_MHZ" in last and str(snap) in last


def test_prometheus_down(home):
    p = _predict(home, "--set", "prometheus.url=http://127.0.0.1:1", check=False)
    assert p.returncode == 2 and "--metrics-file" in p.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus binary not installed (.ci/run installs it)")
def test_prometheus_end_to_end(home, tmp_path):
    """exporter (fixed DCGM/CPU values) <- real Prometheus scrape <- predictor over the HTTP API."""
    values = {"CPU_UTIL_PCT": 42.0, "CPU_FREQ_MHZ": 2100.0, "MEM_USED_MB": 5000.0, "LOAD_AVG_1M": 1.5,
              "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.42}
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(values))
    eport = free_port()
    exporter = subprocess.Popen([sys.executable, str(REPO / "inference" / "dcgm_exporter.py"), "--fixed", str(fixed),
                                 "--port", str(eport)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    prom, url = start_prometheus(tmp_path, eport)
    try:
        # two scrapes, so the predictor's 1 s-step subquery over the last seconds surely sees one
        if not wait_for_series(url, "count_over_time(CPU_UTIL_PCT[1m])", min_value=2):
            pytest.fail("Prometheus never scraped the exporter")
        out = tmp_path / "pred.json"
        queries = {f: f"{f}{{{{{{selector}}}}}}" for f in values}
        sets = ["--set", f"prometheus.url={url}", "--set", 'prometheus.selector=job="hase"',
                "--set", "prometheus.lookback_s=5", "--set", f"prometheus.queries={json.dumps(queries)}"]
        _predict(home, *sets, "--json", str(out))
        res = json.loads(out.read_text())
        assert res["load_source"].startswith("prometheus")
        assert res["load"]["bg_CPU_UTIL_PCT"] == pytest.approx(42.0)
        assert res["neighbour_busy"] == pytest.approx(0.42)
    finally:
        for proc in (exporter, prom):
            proc.terminate()
            proc.wait(timeout=10)


CPU_SNAP = {"CPU_UTIL_PCT": 40.0, "CPU_FREQ_MHZ": 2000, "MEM_USED_MB": 4000, "LOAD_AVG_1M": 0.3}


def test_launch_wait_field_absent_stale_and_present(home, tmp_path):
    """No probe field, or a stale one: the DCGM-only prediction and a warning naming the field; a
    fresh one: used, and a model whose every kernel is a dispatch pays it per kernel (slower)."""
    def predict(extra: dict, name: str):
        snap, out = tmp_path / f"{name}.json", tmp_path / f"{name}.pred.json"
        snap.write_text(json.dumps({**CPU_SNAP, **extra}))
        p = _predict(home, "--metrics-file", str(snap), "--json", str(out))
        return p, json.loads(out.read_text())
    p, absent = predict({}, "absent")
    assert "HASE_LAUNCH_WAIT_US absent" in p.stderr and absent["wait_source"] == "dcgm-only (beta_us * u)"
    p, stale = predict({"HASE_LAUNCH_WAIT_US": 50.0, "HASE_LAUNCH_WAIT_AGE_S": 600}, "stale")
    assert "HASE_LAUNCH_WAIT_US" in p.stderr and "600 s old" in p.stderr
    assert stale["wait_source"] == absent["wait_source"] and stale["total_ms"] == pytest.approx(absent["total_ms"])
    p, fresh = predict({"HASE_LAUNCH_WAIT_US": 50.0, "HASE_LAUNCH_WAIT_AGE_S": 2}, "fresh")
    assert "HASE_LAUNCH_WAIT_US" not in p.stderr and fresh["wait_source"].startswith("measured (")
    assert fresh["launch_wait_used_us"] == 50.0 and fresh["launch_wait_age_s"] == 2
    assert fresh["total_ms"] == pytest.approx(absent["total_ms"] + fresh["n_kernels"] * 50.0 / 1e3)
    assert fresh["idle_ms"] == pytest.approx(absent["idle_ms"])  # the idle estimate has no neighbour
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**CPU_SNAP, "HASE_LAUNCH_WAIT_US": -3}))
    p = _predict(home, "--metrics-file", str(bad), check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.startswith(f"error: {bad}: field 'HASE_LAUNCH_WAIT_US'")


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus binary not installed (.ci/run installs it)")
def test_node_agent_scraped_by_prometheus(home, tmp_path):
    """node agent (real probe on CPU EP, fixed CPU fields) <- real Prometheus <- predictor: the
    measured wait is read with the other fields, fresh, and used."""
    from hase.inference.node_agent import NodeAgent
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(CPU_SNAP))
    eport = free_port()
    # a 0.001 us idle reference makes every probe run a wait > 0, so 'used' is visible in the output
    sets = ["period_s=1", "probe_budget_ms=1", "idle_probe_us=0.001", "warmup=5"]
    with NodeAgent("cpu", eport, sets, fixed=fixed):
        prom, url = start_prometheus(tmp_path, eport)
        try:
            if not wait_for_series(url, "count_over_time(hase_launch_wait_us[1m])", min_value=2):
                pytest.fail("Prometheus never scraped the node agent's probe gauges")
            assert wait_for_series(url, 'hase_launch_wait_timestamp_seconds{job="hase",gpu="0"}')
            out = tmp_path / "pred.json"
            fields = {f: f"{f}{{{{{{selector}}}}}}" for f in CPU_SNAP}
            queries = {**fields, "HASE_LAUNCH_WAIT_US": "hase_launch_wait_us{{{selector}}}",
                       "HASE_LAUNCH_WAIT_AGE_S": "time() - hase_launch_wait_timestamp_seconds{{{selector}}}"}
            sets = ["--set", f"prometheus.url={url}", "--set", 'prometheus.selector=job="hase"',
                    "--set", "prometheus.lookback_s=5", "--set", f"prometheus.queries={json.dumps(queries)}"]
            p = _predict(home, *sets, "--json", str(out))
            res = json.loads(out.read_text())
            assert res["load"]["bg_CPU_UTIL_PCT"] == pytest.approx(40.0)
            assert res["wait_source"] == f"measured (prometheus {url})", p.stderr
            assert res["launch_wait_used_us"] > 0 and 0 <= res["launch_wait_age_s"] <= 60
        finally:
            prom.terminate()
            prom.wait(timeout=10)


def test_live_evaluation_under_a_corunner(home, tmp_path):
    """evaluator.py live mode: measure + predict one model at idle and next to a held-out co-runner."""
    model = sorted((home / "model_zoo" / "models").glob("resnet18_bs1_64x64.onnx"))[0]
    out = tmp_path / "live"
    run(["evaluator.py", str(model), "--device", "cpu", "--set",
         "loads=[{kind: stressor, level: 0}, {kind: corunner, name: small_infer, knob: 0.5}]",
         "--set", "budget_ms=200", "--set", "settle_s=0.5", "--set", "label_sessions=2", "--out", str(out)], home)
    import pandas as pd
    cases = pd.read_csv(out / "cases.csv")
    assert list(cases["condition"]) == ["idle", "corunner-small_infer@0.5"]
    assert list(cases["actual_sessions"]) == [2, 2]
    assert (cases["actual_sessions_p10_ms"] <= cases["actual_ms"]).all()
    assert (cases["actual_ms"] <= cases["actual_sessions_p90_ms"]).all()
    assert list(cases["load_split"]) == ["idle", "held-out neighbour"]
    assert (cases["actual_ms"] > 0).all() and (cases["hase_ms"] > 0).all()
    summary = json.loads((out / "summary.json").read_text())
    assert "held-out neighbour / live" in summary["by_split"]["hase"]
    assert summary["slowdown"]["held-out neighbour"]["n"] == 1
    bad = run(["evaluator.py", str(model), "--device", "cpu", "--set", "loads=[{kind: corunner, name: nope}]"],
              home, check=False)
    assert bad.returncode == 2 and "unknown co-runner" in bad.stderr.strip().splitlines()[-1]


def test_evaluator_bad_inputs_are_one_line(home, tmp_path):
    slug = slug_dir(home / "benchmark" / "results").name
    missing = tmp_path / "nope.csv"
    p = run(["evaluator.py", "--device", "cpu", "--from-csv", str(missing)], home, check=False)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == f"error: {missing}: file not found"
    empty = tmp_path / "records"
    empty.mkdir()
    p = run(["evaluator.py", "--device", "cpu", "--from-csv", str(home / "benchmark" / "results" / slug / "models.csv"),
             "--records", str(empty)], home, check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.startswith(f"error: {empty}: no kernel record for model")
    csv = home / "benchmark" / "results" / slug / "models.csv"
    p = run(["evaluator.py", "--device", "cpu", "--from-csv", str(csv), "--set", "actual_stat=p99"], home, check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last == f"error: {csv}: actual_stat must be median or mean, not 'p99'"


def test_plain_sum_without_a_timeline_model(home, tmp_path):
    """No fitted timeline model: the plan's first version (Σ in ORT's order), said so in the output."""
    from hase.inference.predict_model_latency import format_prediction, predict_record
    from hase.training.train_kernel_model import load_predictor
    from hase.utils.paths import read_json
    slug = slug_dir(home / "benchmark" / "results").name
    predictor = load_predictor(home / "training" / "models" / slug)
    record = read_json(home / "ort_analysis" / "ort_kernel_record" / "resnet18_bs1_64x64.cpu.json", "record")
    load = {f: 10.0 for f in predictor.load_fields}
    res = predict_record(record, predictor, load, None)
    assert res["method"] == "sum" and res["total_ms"] == pytest.approx(sum(k["predicted_ms"] for k in res["kernels"]))
    assert "no fitted timeline model" in format_prediction(res, 5)
    missing = tmp_path / "none.json"
    p = _predict(home, "--set", f"timeline_model={missing}", check=False)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == f"error: {missing}: file not found"


# ---- hardening: the headline command, bad inputs, EP mismatch, per-prediction state ----------------
def test_live_evaluation_default_config_on_any_folder(home, tmp_path):
    """`evaluator.py DIR --device cpu` with the default config (levels [0]: no loaded case) on two
    models outside the zoo: a report, an empty slowdown table, no traceback."""
    import pandas as pd
    folder = tmp_path / "mine"
    folder.mkdir()
    for src, name in (("resnet18_bs1_64x64", "netA"), ("mobilenet_v2_bs1_64x64", "netB")):
        shutil.copy(home / "model_zoo" / "models" / f"{src}.onnx", folder / f"{name}.onnx")
    out = tmp_path / "ev"
    run(["evaluator.py", str(folder), "--device", "cpu", "--out", str(out)], home)
    cases = pd.read_csv(out / "cases.csv")
    assert sorted(cases["model"]) == ["netA", "netB"] and set(cases["condition"]) == {"idle"}
    assert (cases["actual_sessions"] == 3).all()          # evaluator's default label_sessions
    assert (cases["actual_sessions_p10_ms"] <= cases["actual_ms"]).all()
    assert (cases["actual_ms"] <= cases["actual_sessions_p90_ms"]).all()
    assert (cases["hase_ms"] > 0).all() and (cases["actual_ms"] > 0).all()
    slow = pd.read_csv(out / "slowdowns.csv")
    assert slow.empty and {"model", "condition", "measured", "predicted"} <= set(slow.columns)
    assert json.loads((out / "summary.json").read_text())["slowdown"] == {}


def test_missing_model_is_one_line_before_any_load(home, tmp_path):
    """Checked before the load is sampled: with an unreachable Prometheus the error is still the file."""
    missing = tmp_path / "nonexistent.onnx"
    p = run(["inference/predict_model_latency.py", "--device", "cpu", "--model", str(missing),
             "--set", "prometheus.url=http://127.0.0.1:1"], home, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == f"error: {missing}: file not found"


@pytest.mark.parametrize("value, shown", [(float("nan"), "is NaN (not measured; "), (150.0, "= 150 is out of range ("),
                                          (-5.0, "= -5 is out of range (")])
def test_metrics_file_value_out_of_range(home, tmp_path, value, shown):
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"CPU_UTIL_PCT": value, "CPU_FREQ_MHZ": 2000, "MEM_USED_MB": 4000, "LOAD_AVG_1M": 0.3}))
    p = _predict(home, "--metrics-file", str(snap), check=False)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == \
        f"error: {snap}: field 'CPU_UTIL_PCT' {shown}expected % in [0, 100])"


def test_predictor_for_another_ep_is_refused(home, tmp_path):
    """A predictor trained on CUDA EP data (manifest device) must not price a CPU EP analysis."""
    slug = slug_dir(home / "training" / "models").name
    other = tmp_path / "cuda_predictor"
    shutil.copytree(home / "training" / "models" / slug, other)
    man = json.loads((other / "manifest.json").read_text())
    man["metadata"]["device"] = "cuda"
    (other / "manifest.json").write_text(json.dumps(man))
    p = _predict(home, "--set", f"predictor_dir={other}", check=False)
    assert p.returncode == 2 and "predicted session.run" not in p.stdout
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {other}: predictor was trained for the cuda EP") and "cpu EP" in last
    model = home / "model_zoo" / "models" / "resnet18_bs1_64x64.onnx"
    p = run(["evaluator.py", str(model), "--device", "cpu", "--set", f"predictor_dir={other}"], home, check=False)
    assert p.returncode == 2 and "predictor was trained for the cuda EP" in p.stderr.strip().splitlines()[-1]


def test_unseen_types_are_per_prediction(home, tmp_path, monkeypatch):
    """One process, one loaded predictor, two models: the second report lists only its own unseen types."""
    import warnings

    import onnx
    from onnx import TensorProto, helper
    monkeypatch.setenv("HASE_HOME", str(home))
    from hase.inference.predict_model_latency import DEFAULTS, analyse, load_timeline_model, predict_record
    from hase.training.train_kernel_model import UnknownKernelTypeWarning, load_predictor
    odd = tmp_path / "odd_sigmoid.onnx"  # an op the training zoo never ran
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])
    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "odd", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), odd)
    slug = slug_dir(home / "benchmark" / "results").name
    predictor = load_predictor(home / "training" / "models" / slug)
    model, _ = load_timeline_model(DEFAULTS, slug)
    load = {f: 10.0 if "UTIL" in f else 1000.0 for f in predictor.load_fields}
    with pytest.warns(UnknownKernelTypeWarning, match="'Sigmoid'"):
        first = predict_record(analyse(odd, "cpu", DEFAULTS), predictor, load, model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # nothing unseen in resnet18, so nothing to warn about
        second = predict_record(analyse(home / "model_zoo" / "models" / "resnet18_bs1_64x64.onnx", "cpu",
                                        DEFAULTS), predictor, load, model)
    assert first["unseen_types"] == ["Sigmoid"] and second["unseen_types"] == []
    with pytest.warns(UnknownKernelTypeWarning, match="'Sigmoid'"):  # said again: each prediction's own log
        again = predict_record(analyse(odd, "cpu", DEFAULTS), predictor, load, None)  # the Σ path too
    assert again["unseen_types"] == ["Sigmoid"]


def test_session_spread_from_new_and_old_models_csv():
    """cases' actual_sessions_p10/p90_ms and actual_sessions: from the session columns of the judged
    statistic; a models.csv from before them (or an upgraded row) loads with NaN spread, 1 session."""
    import pandas as pd
    from hase import evaluator
    new = pd.DataFrame({"latency_e2e_ms_mean": [2.0, 3.0], "latency_e2e_ms_mean_sessions_p10": [1.8, float("nan")],
                        "latency_e2e_ms_mean_sessions_p90": [2.4, float("nan")],
                        "latency_e2e_ms_median_sessions_p10": [9.0, 9.0], "label_sessions": [5, float("nan")]})
    got = evaluator.session_spread(new, "latency_e2e_ms_mean")
    assert got["actual_sessions_p10_ms"].iloc[0] == 1.8 and got["actual_sessions_p90_ms"].iloc[0] == 2.4
    assert list(got["actual_sessions"]) == [5, 1] and got["actual_sessions_p10_ms"].isna().iloc[1]
    old = evaluator.session_spread(pd.DataFrame({"latency_e2e_ms_median": [2.0]}), "latency_e2e_ms_median")
    assert list(old["actual_sessions"]) == [1] and old["actual_sessions_p90_ms"].isna().all()


def test_pred_vs_actual_draws_hase_on_top_with_the_band(tmp_path):
    """Hase's points above five baselines (drawn fainter), and the ±10% band around the diagonal."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
    from hase import evaluator
    actual = np.geomspace(0.5, 20, 12)
    df = pd.DataFrame({"actual_ms": actual, **{f"{e}_ms": actual * (1.02 + 0.1 * i)
                                                for i, e in enumerate(evaluator.ESTIMATORS)}})
    fig, ax = plt.subplots(figsize=(4, 4))
    evaluator.draw_pred_vs_actual(ax, df)
    points = {c.get_label(): c for c in ax.collections if c.get_label() in evaluator.ESTIMATORS}
    assert set(points) == set(evaluator.ESTIMATORS)
    hase = points.pop("hase")
    assert all(hase.get_zorder() > c.get_zorder() and (c.get_alpha() or 1.0) < (hase.get_alpha() or 1.0)
               for c in points.values())
    band = next(c for c in ax.collections if c.get_label() == "±10%")
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(0.8 * df["actual_ms"].min() * 0.9)
    assert ys.max() == pytest.approx(1.2 * df["actual_ms"].max() * 1.1)
    fig.savefig(tmp_path / "pred_vs_actual.png", dpi=80)
    plt.close(fig)
    assert (tmp_path / "pred_vs_actual.png").stat().st_size > 1000


def test_the_timeline_model_names_its_predictor(home, tmp_path):
    """A timeline model whose kernel times come from a predictor records it (predictor_dir): a prediction with it
    uses THAT predictor unless --set predictor_dir says otherwise; one that is not built is a one-line error."""
    slug = slug_dir(home / "training" / "models").name
    other = tmp_path / "its_predictor"
    shutil.copytree(home / "training" / "models" / slug, other)
    model = json.loads((home / "inference" / "results" / slug / "timeline_model.json").read_text())
    assert not model.get("gpu_table")
    tl = tmp_path / "timeline_model.json"
    tl.write_text(json.dumps(dict(model, predictor_dir=str(other))))
    out = tmp_path / "pred.json"
    _predict(home, "--set", f"timeline_model={tl}", "--json", str(out))
    assert json.loads(out.read_text())["predictor_dir"] == str(other)
    _predict(home, "--set", f"timeline_model={tl}", "--set", f"predictor_dir={home / 'training' / 'models' / slug}",
             "--json", str(out))
    assert json.loads(out.read_text())["predictor_dir"] == str(home / "training" / "models" / slug)
    tl.write_text(json.dumps(dict(model, predictor_dir=str(tmp_path / "never_built"))))
    p = _predict(home, "--set", f"timeline_model={tl}", check=False)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.startswith("error:") and "never_built" in last and "not built" in last


# ---- issue 26 on the main job's output --------------------------------------------------------------------
def test_evaluator_fit_refuses_an_idle_reference_under_load(home, tmp_path):
    """Item 1: the timeline fit's idle cases measured next to a 97%-busy neighbour are refused, naming the field,
    its value and the threshold (the clean clone's fit took bg_CPU_UTIL_PCT = 96.8 as its idle load)."""
    import pandas as pd
    res = slug_dir(home / "benchmark" / "results")
    d = tmp_path / res.name
    d.mkdir()
    m = pd.read_csv(res / "models.csv")
    m.loc[m["stress_level"] == 0, "bg_CPU_UTIL_PCT"] = 96.8
    m.to_csv(d / "models.csv", index=False)
    shutil.copy(res / "node_times.csv", d / "node_times.csv")
    before = (home / "inference" / "results" / res.name / "timeline_model.json").read_bytes()
    p = run(["evaluator.py", "--device", "cpu", "--from-csv", str(d / "models.csv"), "--fit", "--out",
             str(tmp_path / "ev")], home, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    n_idle = int((m["stress_level"] == 0).sum())
    assert p.stderr.strip().splitlines()[-1] == (
        f"error: {d / 'models.csv'}: the idle cases of the fit were measured under load: bg_CPU_UTIL_PCT = 96.8 % "
        f"(median of {n_idle} idle cases) > 10 % (idle_busy_max 0.1); measure stress level 0 again on an idle "
        f"machine, or raise idle_busy_max")
    assert (home / "inference" / "results" / res.name / "timeline_model.json").read_bytes() == before


def test_prediction_idle_above_loaded_is_a_warning(home, tmp_path):
    """Item 1: a timeline model whose idle reference was taken under load predicts 'idle' slower than loaded:
    the prediction says so. Item 9: CPU EP words, and no invented spread."""
    res = slug_dir(home / "benchmark" / "results")
    model = json.loads((home / "inference" / "results" / res.name / "timeline_model.json").read_text())
    model["idle_load"]["bg_CPU_UTIL_PCT"] = 96.8
    model["params"]["alpha"] = max(model["params"]["alpha"], 1.0)   # the load matters, as on the clean clone
    model.pop("spread", None)
    bad = tmp_path / "timeline_model.json"
    bad.write_text(json.dumps(model))
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(dict(CPU_SNAP, CPU_UTIL_PCT=2.0)))
    p = _predict(home, "--metrics-file", str(snap), "--set", f"timeline_model={bad}")
    warn = [ln for ln in p.stderr.splitlines() if "exceeds the one under the current load" in ln]
    assert len(warn) == 1 and "its idle_load has bg_CPU_UTIL_PCT = 96.8" in warn[0], p.stderr
    for gpu_word in ("GPU Σ", "launches onto an idle stream", "across fresh sessions"):
        assert gpu_word not in p.stdout, p.stdout
    assert "no spread measured for this machine" in p.stdout and "nodes on the CPU EP: compute Σ" in p.stdout
    assert "load from file" in p.stdout
    model["idle_load"]["bg_CPU_UTIL_PCT"] = 1.0   # a sound reference: no warning
    bad.write_text(json.dumps(model))
    p = _predict(home, "--metrics-file", str(snap), "--set", f"timeline_model={bad}")
    assert "exceeds the one under the current load" not in p.stderr


def test_local_sampling_names_its_window(home, tmp_path):
    """Item 2: local sampling averages over at least sample_s (1 s), longer while the busy field is noisy, and
    the output names the window."""
    out = tmp_path / "pred.json"
    p = _predict(home, "--json", str(out))
    res = json.loads(out.read_text())
    assert 1.0 <= res["load_window_s"] <= 5.0 + 1.0 and res["load_windows"] >= 4
    assert res["load_busy_field"] == "CPU_UTIL_PCT"
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("  load from local sampling over ")]
    assert len(line) == 1 and "windows of 0.25 s; CPU_UTIL_PCT standard error" in line[0], p.stdout


@pytest.mark.parametrize("field, value, said", [
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 97, "= 97 is out of range (expected ratio in [0, 1])"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", -5, "= -5 is out of range (expected ratio in [0, 1])"),
    ("bg_DCGM_FI_DEV_SM_CLOCK", 0, "= 0 is out of range (expected MHz > 0)"),
])
def test_metrics_file_known_fields_checked_even_unread(home, tmp_path, field, value, said):
    """Item 5: the CPU predictor does not read DCGM fields, but a snapshot holding 97 for a ratio is wrong."""
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({**CPU_SNAP, field: value}))
    p = _predict(home, "--metrics-file", str(snap), check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    name = field.removeprefix("bg_")
    assert p.stderr.strip().splitlines()[-1] == f"error: {snap}: field '{name}' {said}"


def test_metrics_file_unknown_fields_named_in_one_warning(home, tmp_path):
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({**CPU_SNAP, "FOO_BAR": 1, "bg_BAZ": 2}))
    p = _predict(home, "--metrics-file", str(snap))
    warn = [ln for ln in p.stderr.splitlines() if "unknown load field" in ln]
    assert warn == [f"WARNING hase.inference: {snap}: unknown load fields BAZ, FOO_BAR (not in "
                    f"gpu_metrics.FIELD_SPECS): ignored"], p.stderr


def test_fits_labelled_and_the_saved_one_logged(home):
    """Item 10: each timeline fit in the log says which it is; the constants logged just before 'written' are
    the saved ones. Item 8: a CPU EP fit holds kappa at 0, and the leave-one-architecture-out lines say what
    they were refitted on."""
    res = slug_dir(home / "benchmark" / "results")
    saved = json.loads((home / "inference" / "results" / res.name / "timeline_model.json").read_text())
    log = (home / "pipeline_stderr.txt").read_text().splitlines()
    fits = [ln for ln in log if "hase.evaluator: timeline model" in ln and "bound" not in ln]
    assert any("(all training architectures): c0_us=" in ln for ln in fits)
    assert any("(leave-one-architecture-out refit without mobilenet_v2, not saved): c0_us=" in ln for ln in fits)
    i = next(i for i, ln in enumerate(log) if "timeline model written to" in ln)
    assert log[i - 1].split("hase.evaluator: ")[1] == "timeline model saved (all training architectures): " + \
        ", ".join(f"{k}={v:.4g}" for k, v in saved["params"].items())
    assert saved["params"]["kappa"] == 0 and "kappa" not in saved["fitted"]
    assert not {"copy_scale", "beta_us"} & set(saved["fitted"])
    out = (home / "pipeline_stdout.txt").read_text().splitlines()
    loao = [ln for ln in out if "leave-one-architecture-out " in ln and "MAPE" in ln]
    assert len(loao) == 2 and all("constants refitted on 1 other architecture" in ln and "indicative only" in ln
                                  for ln in loao), loao


def test_loao_lines_name_constants_at_their_bounds(home):
    """Item 8: a leave-one-architecture-out line names the constants its refit left on a bound (the resnet18-less
    refit's c0_us ends at 0 on this machine): the log's warning and the printed line say the same thing."""
    from hase.evaluator import loao_line
    at = [{"param": "c0_us", "value": 2.4e-13, "bound": "lower", "limit": 0.0}]
    line = loao_line("resnet18", {"mape_pct": 24.6, "within_10pct": 37.5, "refit_on": ["mobilenet_v2"], "at_bounds": at})
    assert line.endswith("; c0_us ended at its lower bound 0: that term is not what the data show)"), line
    log = (home / "pipeline_stderr.txt").read_text().splitlines()
    bounds = {}
    for ln in log:
        if "(leave-one-architecture-out refit without " in ln and " bound " in ln:
            arch = ln.split("refit without ")[1].split(",")[0]
            param, rest = ln.split("not saved): ")[1].split(" = ", 1)
            side, limit = rest.split(" is at its ")[1].split(" bound ")
            bounds.setdefault(arch, []).append(f"{param} ended at its {side} bound {limit}")
    out = [ln for ln in (home / "pipeline_stdout.txt").read_text().splitlines()
           if "leave-one-architecture-out " in ln and "MAPE" in ln]
    for ln in out:
        arch = ln.split("leave-one-architecture-out ")[1].split()[0]
        said = bounds.get(arch, [])
        assert all(b in ln for b in said) and (said or " bound " not in ln), (ln, said)


def test_main_job_output_is_ignored_by_git(home):
    """Item 11: nothing the main job writes would be an untracked file in the clone (HASE_HOME = the clone)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git clone")
    written = (home / "pipeline_files.txt").read_text().split()
    assert any(w.startswith("benchmark/results/") for w in written)
    r = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-v", "-n"], cwd=REPO, input="\n".join(written),
                       capture_output=True, text=True)
    not_ignored = [ln.split("\t", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("::")]
    assert not not_ignored, not_ignored
