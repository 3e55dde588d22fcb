"""The whole chain on CPU EP (real exports, sessions and measurements), then phase 7's predictor:
metrics file, missing field, and a real Prometheus server scraping the DCGM-format exporter."""
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_script, wait_for_series

REPO = Path(__file__).resolve().parent.parent


def run(args, home, check=True, timeout=900):
    return run_script(args, home, check, timeout, cwd=REPO)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("pipe")
    p = run(["-m", "utils.pipeline", "--device", "cpu"], h)
    assert "pipeline done on cpu" in p.stdout
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
    man = json.loads((slug_dir(home / "training" / "models") / "manifest.json").read_text())
    assert man["metadata"]["data_sha256"] and man["features"]
    ev = slug_dir(home / "evaluation")
    summary = json.loads((ev / "summary.json").read_text())
    assert summary["cases"] > 0 and {"hase", "hase_ignore_load", "sum_standalone", "alpha_sum_beta",
                                     "sum_ort_kernel_time"} <= set(summary["by_condition"])
    assert (ev / "pred_vs_actual.png").exists() and (ev / "error_cdf.png").exists()
    assert list((home / "graph_model" / "model_DAG").glob("*.json"))


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
    busy = dict(json.loads(snap.read_text()), CPU_UTIL_PCT=95.0)
    snap.write_text(json.dumps(busy))
    trace = tmp_path / "timeline.json"
    _predict(home, "--metrics-file", str(snap), "--json", str(out), "--trace", str(trace))
    loaded = json.loads(out.read_text())
    assert loaded["method"] == "timeline" and loaded["neighbour_busy"] == pytest.approx(0.95)
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
    ev = slug_dir(home / "evaluation")
    before = json.loads((ev / "summary.json").read_text())
    run(["evaluator.py", "--device", "cpu", "--from-csv", str(home / "benchmark" / "results" / slug / "models.csv"),
         "--out", str(home / "re_eval")], home)
    after = json.loads((home / "re_eval" / "summary.json").read_text())
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus binary not installed (.ci/run installs it)")
def test_prometheus_end_to_end(home, tmp_path):
    """exporter (fixed DCGM/CPU values) <- real Prometheus scrape <- predictor over the HTTP API."""
    values = {"CPU_UTIL_PCT": 42.0, "CPU_FREQ_MHZ": 2100.0, "MEM_USED_MB": 5000.0, "LOAD_AVG_1M": 1.5,
              "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.42}
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(values))
    eport, pport = _free_port(), _free_port()
    exporter = subprocess.Popen([sys.executable, str(REPO / "inference" / "dcgm_exporter.py"), "--fixed", str(fixed),
                                 "--port", str(eport)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: hase\n"
                   f"    static_configs: [{{targets: ['127.0.0.1:{eport}']}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{pport}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{pport}"
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
    sys.path.insert(0, str(REPO))
    from inference.node_agent import NodeAgent
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(CPU_SNAP))
    eport, pport = _free_port(), _free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: hase\n"
                   f"    static_configs: [{{targets: ['127.0.0.1:{eport}']}}]\n")
    # a 0.001 us idle reference makes every probe run a wait > 0, so 'used' is visible in the output
    sets = ["period_s=1", "probe_budget_ms=1", "idle_probe_us=0.001", "warmup=5"]
    with NodeAgent("cpu", eport, sets, fixed=fixed):
        prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{pport}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{pport}"
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
         "--set", "budget_ms=200", "--set", "settle_s=0.5", "--out", str(out)], home)
    import pandas as pd
    cases = pd.read_csv(out / "cases.csv")
    assert list(cases["condition"]) == ["idle", "corunner-small_infer@0.5"]
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
    sys.path.insert(0, str(REPO))
    from inference.predict_model_latency import format_prediction, predict_record
    from training.train_kernel_model import load_predictor
    from utils.paths import read_json
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
