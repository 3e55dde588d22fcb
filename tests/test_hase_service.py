"""`hase serve` for real: the server in its own process on a free port, a real HTTP client, a real Prometheus
scraping a stand-in exporter of 8 GPUs' DCGM fields (Debian package 'prometheus'; skipped when it is absent)."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parent.parent

from helpers import build_residual_model, free_port, start_prometheus, wait_for_series  # noqa: E402

RECORDS = REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200" / "records.json.xz"
BUSY = {i: b for i, b in enumerate((0.9, 0.1, 0.55, 0.0, 0.75, 0.3, 0.65, 0.2))}   # GPU index -> engine busy
CALIBRATED = {"slowhost": 2.0, "fasthost": 0.5}   # idle GPU 0 of these hosts: host index / the training reference


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus binary not installed (Debian package 'prometheus')")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from prometheus_client import CollectorRegistry, Gauge, start_http_server
    tmp = tmp_path_factory.mktemp("serve")
    reg = CollectorRegistry()
    busy = Gauge("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "engine busy", ["gpu", "Hostname"], registry=reg)
    clock = Gauge("DCGM_FI_DEV_SM_CLOCK", "sm clock", ["gpu", "Hostname"], registry=reg)
    dram = Gauge("DCGM_FI_PROF_DRAM_ACTIVE", "dram", ["gpu", "Hostname"], registry=reg)
    for i, b in BUSY.items():
        busy.labels(str(i), "node1").set(b)
        clock.labels(str(i), "node1").set(1980)
        dram.labels(str(i), "node1").set(b / 4)
    # two more idle GPUs on machines whose node agents export a host calibration: 2x and 0.5x the training reference
    cal = Gauge("hase_calib_host_index_us", "host index", ["gpu", "Hostname"], registry=reg)
    cal_t = Gauge("hase_calib_timestamp_seconds", "calibrated at", ["gpu", "Hostname"], registry=reg)
    from hase.api import load_predictor
    ref = load_predictor("nvidia-h200").model["calibration_ref"]["host_index_us"]
    for host, f in CALIBRATED.items():
        for g in (busy, dram):
            g.labels("0", host).set(0.0)
        clock.labels("0", host).set(1980)
        cal.labels("0", host).set(f * ref)
        cal_t.labels("0", host).set(time.time())
    busy.labels("0", "nanhost").set(float("nan"))   # a reading that did not happen (issue 26 item 6)
    clock.labels("0", "nanhost").set(1980)
    dram.labels("0", "nanhost").set(0.0)
    exp_port = free_port()
    exporter, _ = start_http_server(exp_port, addr="127.0.0.1", registry=reg)
    prom, prom_url = start_prometheus(tmp, exp_port, job="dcgm")
    port = free_port()
    env = dict(os.environ, HASE_HOME=str(tmp / "home"))
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "hase.cli", "serve", "--port", str(port), "--prometheus",
                               prom_url, "--preload", "nvidia-h200"], cwd=REPO, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_series(prom_url, "count_over_time(DCGM_FI_DEV_SM_CLOCK[1m])", min_value=2):
            pytest.fail("prometheus did not scrape the stand-in exporter within 60 s")
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if requests.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if server.poll() is not None:
                pytest.fail(f"hase serve exited: {(tmp / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        else:
            pytest.fail("hase serve did not answer /healthz within 120 s")
        yield {"url": url, "prom": prom_url, "tmp": tmp, "server": server}
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        prom.terminate()
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()
        exporter.shutdown()
        log.close()


@pytest.fixture(scope="module")
def record():
    from hase.graph_model.dag_critical_path import records_in_file
    return records_in_file(str(RECORDS))["resnet18_bs1_224x224"]


def sel(i):
    return f'gpu="{i}",Hostname="node1"'


def test_predict_record_then_analysis_id_then_prometheus(stack, record):
    url = stack["url"]
    r = requests.post(f"{url}/v1/predict", json={"target": "nvidia-h200", "record": record}, timeout=60)
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["p10_ms"] <= first["total_ms"] <= first["p90_ms"] and len(first["breakdown"]) == len(record["kernels"])
    r = requests.post(f"{url}/v1/predict", json={"analysis_id": first["analysis_id"], "breakdown": False}, timeout=60)
    assert r.status_code == 200, r.text
    again = r.json()
    assert again["total_ms"] == first["total_ms"] and "breakdown" not in again
    r = requests.post(f"{url}/v1/predict", json={"analysis_id": first["analysis_id"],
                                                 "prometheus": {"selector": sel(0)}}, timeout=60)
    assert r.status_code == 200, r.text
    loaded = r.json()
    assert loaded["details"]["load"]["bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(BUSY[0])
    assert loaded["total_ms"] > first["total_ms"]
    r = requests.post(f"{url}/v1/predict", json={"analysis_id": first["analysis_id"],
                                                 "load": {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.9,
                                                          "DCGM_FI_DEV_SM_CLOCK": 1980}}, timeout=60)
    assert r.status_code == 200 and r.json()["total_ms"] == pytest.approx(loaded["total_ms"], rel=1e-6)


def test_place_ranks_8_gpus_by_their_prometheus_load(stack, record):
    cands = [{"target": "nvidia-h200", "selector": sel(i), "name": f"node1/gpu{i}"} for i in BUSY]
    cands.append({"target": "nvidia-h200", "selector": 'gpu="99"', "name": "ghost"})   # no series: listed last
    r = requests.post(f"{stack['url']}/v1/place", json={"record": record, "candidates": cands}, timeout=60)
    assert r.status_code == 200, r.text
    ranked = r.json()["ranked"]
    assert [c["name"] for c in ranked[:8]] == [f"node1/gpu{i}" for i in sorted(BUSY, key=BUSY.get)]
    assert r.json()["best"] == "node1/gpu3"
    totals = [c["total_ms"] for c in ranked[:8]]
    assert totals == sorted(totals) and totals[-1] > totals[0]
    assert all(c["p10_ms"] <= c["total_ms"] <= c["p90_ms"] for c in ranked[:8])
    assert ranked[-1]["name"] == "ghost" and "no series" in ranked[-1]["error"]


def test_place_and_predict_scale_the_host_by_each_nodes_calibration_gauge(stack, record):
    """Issue 23: the node agent's hase_calib_host_index_us for a candidate's selector scales that candidate's host
    side. Three idle GPUs: one on a host without the gauge (not scaled), one on a host twice as slow as the training
    processes, one twice as fast; a dispatch-bound model ranks them fast < plain < slow."""
    cands = [{"target": "nvidia-h200", "selector": sel(3), "name": "plain"}] + [
        {"target": "nvidia-h200", "selector": f'gpu="0",Hostname="{h}"', "name": h} for h in CALIBRATED]
    deadline = time.time() + 60   # the age query needs a scraped point
    while True:
        r = requests.post(f"{stack['url']}/v1/place", json={"record": record, "candidates": cands}, timeout=60)
        assert r.status_code == 200, r.text
        by = {c["name"]: c for c in r.json()["ranked"]}
        if all(by[h].get("host_scale") for h in CALIBRATED) or time.time() > deadline:
            break
        time.sleep(1.0)
    assert [c["name"] for c in r.json()["ranked"]] == ["fasthost", "plain", "slowhost"], r.json()
    assert by["plain"]["host_scale"] is None
    assert by["slowhost"]["host_scale"] > 1.2 and by["fasthost"]["host_scale"] < 0.85
    assert by["slowhost"]["total_ms"] > 1.2 * by["plain"]["total_ms"]
    one = requests.post(f"{stack['url']}/v1/predict", json={"record": record, "target": "nvidia-h200",
                                                           "prometheus": {"selector": cands[1]["selector"]}}, timeout=60)
    assert one.status_code == 200, one.text
    assert one.json()["total_ms"] == pytest.approx(by["slowhost"]["total_ms"], rel=1e-6)
    assert one.json()["details"]["host_scale"] == pytest.approx(by["slowhost"]["host_scale"])


def test_nan_from_prometheus_is_said_as_not_measured(stack, record, tmp_path):
    """Issue 26 item 6: a GPU whose exporter gives NaN (a field not measured) is refused as 'NaN (not measured)',
    never as out of range, by /v1/predict, /v1/place and `hase predict --prometheus`."""
    nan_sel = 'gpu="0",Hostname="nanhost"'
    assert wait_for_series(stack["prom"], f"count_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{nan_sel}}}[1m])", 1)
    said = "returned NaN (not measured) for 'DCGM_FI_PROF_GR_ENGINE_ACTIVE'"
    r = requests.post(f"{stack['url']}/v1/predict", json={"record": record, "prometheus": {"selector": nan_sel}},
                      timeout=60)
    assert r.status_code == 424 and r.json()["field"] == "prometheus" and said in r.json()["error"], r.text
    r = requests.post(f"{stack['url']}/v1/place", json={"record": record, "candidates": [
        {"target": "nvidia-h200", "selector": sel(3), "name": "idle"},
        {"target": "nvidia-h200", "selector": nan_sel, "name": "nan"}]}, timeout=60)
    assert r.status_code == 200 and r.json()["best"] == "idle", r.text
    assert said in r.json()["ranked"][-1]["error"], r.text
    rec = tmp_path / "r18.json"
    rec.write_text(json.dumps(record))
    p = subprocess.run([sys.executable, "-m", "hase.cli", "predict", rec, "--gpu", "nvidia-h200", "--prometheus",
                        stack["prom"], "--selector", nan_sel], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HASE_HOME=str(tmp_path / "home")))
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and said in lines[0], p.stderr


def test_upload_onnx_for_cpu_ep(stack, tmp_path):
    """A real ONNX upload, analysed here for the CPU EP, predicted with the committed Xeon CPU timeline."""
    build_residual_model(tmp_path / "m.onnx", "m", 8, 2, 16)
    with open(tmp_path / "m.onnx", "rb") as f:
        r = requests.post(f"{stack['url']}/v1/predict", files={"model": ("m.onnx", f)},
                          data={"target": "cpu-intel-r-xeon-r-processor", "load": json.dumps({"CPU_UTIL_PCT": 0})},
                          timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "m" and r.json()["total_ms"] > 0


def test_upload_with_dynamic_dims_pinned_per_request(stack, tmp_path):
    """A dynamic-batch ONNX upload: without pin_dims one 422 naming the dim; with them each batch is its own analysis
    (batch 64 predicted slower than batch 1), through /v1/analyse and the multipart /v1/predict; bad pin_dims name
    the field."""
    import onnx
    f = tmp_path / "dyn.onnx"
    build_residual_model(f, "dyn", 16, 3, 32)
    m = onnx.load(str(f))
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(m, str(f))
    url = stack["url"]

    def post(path, **data):
        with open(f, "rb") as fh:
            return requests.post(f"{url}{path}", files={"model": ("dyn.onnx", fh)}, timeout=120,
                                 data={"target": "nvidia-h200", **data})
    r = post("/v1/analyse")
    assert r.status_code == 422 and r.json()["field"] == "model" and "pin_dims" in r.json()["error"], r.text
    ids = {n: post("/v1/analyse", pin_dims=json.dumps({"N": n})).json()["analysis_id"] for n in (1, 64)}
    assert ids[1] != ids[64]
    tot = {n: requests.post(f"{url}/v1/predict", json={"analysis_id": ids[n]}, timeout=60).json()["total_ms"]
           for n in (1, 64)}
    assert tot[64] > tot[1], tot
    r = post("/v1/predict", pin_dims=json.dumps({"N": 64}))
    assert r.status_code == 200 and r.json()["total_ms"] == pytest.approx(tot[64]), r.text
    for bad, field in (("{nope", "pin_dims"), ('{"N": 0}', "pin_dims.N"), ('[64]', "pin_dims")):
        r = post("/v1/analyse", pin_dims=bad)
        assert r.status_code == 422 and r.json()["field"] == field, (bad, r.text)


def test_bad_requests_name_the_field(stack, record, tmp_path):
    url = stack["url"]
    cases = [
        # missing field
        (dict(json={"record": record}), "/v1/place", 422, "candidates"),
        (dict(json={"target": "nvidia-h200"}), "/v1/predict", 422, "analysis_id"),
        # wrong type
        (dict(json={"record": record, "load": {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "busy"}}), "/v1/predict", 422, "load"),
        (dict(json={"record": record, "candidates": "gpu0"}), "/v1/place", 422, "candidates"),
        # out of range and missing load fields
        (dict(json={"record": record, "load": {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 97, "DCGM_FI_DEV_SM_CLOCK": 1980}}),
         "/v1/predict", 422, "load"),
        (dict(json={"record": record, "load": {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.3}}), "/v1/predict", 422, "load"),
        # unknown GPU
        (dict(json={"target": "nvidia-a100", "record": record}), "/v1/predict", 404, "target"),
        (dict(json={"record": record, "candidates": [{"target": "nvidia-a100", "selector": sel(0)}]}), "/v1/place", 404,
         "candidates.0.target"),
        # not JSON, unknown key, unknown analysis
        (dict(data="{nope", headers={"content-type": "application/json"}), "/v1/predict", 400, "body"),
        (dict(json={"record": record, "colour": "red"}), "/v1/predict", 422, "colour"),
        (dict(json={"analysis_id": "0123456789abcdef"}), "/v1/predict", 404, "analysis_id"),
        (dict(json={"record": record, "options": {"cudnn_conv_algo_search": "DEFAULT"}}), "/v1/predict", 422, "options"),
    ]
    (tmp_path / "x.onnx").write_bytes(b"this is not an onnx model")
    for kw, path, status, field in cases:
        r = requests.post(f"{url}{path}", timeout=60, **kw)
        assert r.status_code == status, (kw, r.text)
        body = r.json()
        assert field in body["field"] and field.split(".")[0] in body["error"] or field in body["error"], body
    with open(tmp_path / "x.onnx", "rb") as f:   # a non-ONNX upload
        r = requests.post(f"{url}/v1/predict", files={"model": ("x.onnx", f)}, data={"target": "nvidia-h200"}, timeout=60)
    assert r.status_code == 415 and r.json()["field"] == "model" and "not an ONNX model" in r.json()["error"]
    assert requests.get(f"{url}/healthz", timeout=5).json()["status"] == "ok"   # the process is still there
    assert stack["server"].poll() is None


def test_metrics_count_requests(stack, record):
    url = stack["url"]
    before = requests.get(f"{url}/metrics", timeout=5).text
    requests.post(f"{url}/v1/predict", json={"record": record}, timeout=60)
    text = requests.get(f"{url}/metrics", timeout=5).text

    def count(t):
        for line in t.splitlines():
            if line.startswith('hase_requests_total{code="200",endpoint="/v1/predict"}'):
                return float(line.split()[-1])
        return 0.0
    assert count(text) == count(before) + 1
    assert 'hase_request_seconds_bucket{endpoint="/v1/predict"' in text
    schema = requests.get(f"{url}/openapi.json", timeout=5).json()
    assert "/v1/place" in schema["paths"] and "/v1/predict" in schema["paths"]
