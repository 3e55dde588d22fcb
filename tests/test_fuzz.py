"""Issue 26 item 13: property-based inputs (hypothesis) for the ONNX loader, the metrics-file parser and the config
resolver. Every input ends in a result or a HaseError (one line: run_main prints it and exits 2), never another
exception (a traceback). A few of the shrunk cases are also run as scripts, for the exit code.

The loader is the real chain a prediction runs on a model file (fusion_detector.build_record: onnx.load, the
static-shape check, an ORT CPU session writing the optimized graph, one profiled run); the metrics file goes
through predict_model_latency.current_load with the CPU predictor's fields; the config through
utils.config.resolve with the predictor's own defaults.
"""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent

from hase.utils.errors import HaseError  # noqa: E402

PY = sys.executable
FUZZ = settings(max_examples=int(os.environ.get("HASE_FUZZ_EXAMPLES", 40)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])
CPU_FIELDS = ["CPU_UTIL_PCT", "CPU_FREQ_MHZ", "MEM_USED_MB", "LOAD_AVG_1M"]


def one_line(e: HaseError) -> None:
    msg = str(e)
    assert msg and "\n" not in msg and "Traceback" not in msg


# ---- the ONNX loader ------------------------------------------------------------------------------------------
def tiny_model(dims, op: str = "Relu", with_shape: bool = True, second_input: bool = False) -> bytes:
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims if with_shape else None)
    inputs, nodes = [x], []
    if op == "Add" and second_input:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, dims if with_shape else None))
        nodes.append(helper.make_node("Add", ["x", "z"], ["y"], name="n0"))
    elif op == "Add":
        nodes.append(helper.make_node("Add", ["x", "x"], ["y"], name="n0"))
    else:
        nodes.append(helper.make_node(op, ["x"], ["y"], name="n0"))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph(nodes, "fuzz", inputs, [y]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def analyse(tmp: Path, data: bytes, pin_dims=None):
    from hase.ort_analysis.fusion_detector import build_record
    p = tmp / "m.onnx"
    p.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_record(p, "cpu", {"pin_dims": pin_dims or {}, "seed": 0, "keep_small_values": 64})


def loads_or_refuses(tmp: Path, data: bytes, pin_dims=None):
    try:
        rec = analyse(tmp, data, pin_dims)
    except HaseError as e:
        one_line(e)
        return None
    assert rec["kernels"] is not None and rec["device"] == "cpu"
    return rec


@pytest.fixture
def fuzz_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HASE_HOME", str(tmp_path / "home"))
    return tmp_path


@FUZZ
@given(data=st.binary(max_size=300))
@example(data=b"")
@example(data=b"\x08\x07\x12\x00")             # parses as a ModelProto with an empty graph
def test_loader_random_bytes(fuzz_home, data):
    loads_or_refuses(fuzz_home, data)


@FUZZ
@given(cut=st.floats(0.0, 0.999))
def test_loader_truncated_model(fuzz_home, cut):
    good = tiny_model([1, 3, 4, 4])
    loads_or_refuses(fuzz_home, good[:int(len(good) * cut)])


DIM = st.one_of(st.integers(-2, 6), st.sampled_from(["N", "batch", "H", ""]), st.none())


@FUZZ
@given(dims=st.lists(DIM, max_size=4), op=st.sampled_from(["Relu", "Add", "Sigmoid", "Softmax"]),
       with_shape=st.booleans(), second=st.booleans(),
       pins=st.dictionaries(st.sampled_from(["N", "batch", "H", "W"]),
                            st.one_of(st.integers(-1, 4), st.text(max_size=3), st.booleans()), max_size=3))
@example(dims=["N", 3], op="Relu", with_shape=True, second=False, pins={})            # dynamic, not pinned
@example(dims=[2, 3], op="Relu", with_shape=False, second=False, pins={})             # no shape at all
@example(dims=["N", 3], op="Relu", with_shape=True, second=False, pins={"N": "two"})  # a pin that is no number
def test_loader_valid_protobufs_missing_shapes_and_dynamic_dims(fuzz_home, dims, op, with_shape, second, pins):
    try:
        data = tiny_model(dims, op, with_shape, second)
    except Exception:  # helper cannot build it (not an input case)
        return
    rec = loads_or_refuses(fuzz_home, data, pins)
    pinned_ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pins.values())
    static = with_shape and all((isinstance(d, int) and d > 0) or (isinstance(d, str) and d in pins) for d in dims)
    if not with_shape or not pinned_ok or not static:
        assert rec is None   # a shape the model does not give, a bad pin or an unpinned dynamic dim is refused


def test_loader_cases_as_scripts(tmp_path):
    """The same refusals from the CLI: one line, exit 2."""
    cases = {"trunc.onnx": tiny_model([1, 3, 4, 4])[:20], "noshape.onnx": tiny_model([2, 3], with_shape=False),
             "dyn.onnx": tiny_model(["N", 3]), "rand.onnx": os.urandom(64)}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        r = subprocess.run([PY, "ort_analysis/fusion_detector.py", "--device", "cpu", "--model", tmp_path / name],
                           cwd=REPO, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "HASE_HOME": str(tmp_path / "home")})
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert lines[-1].startswith(f"error: {tmp_path / name}: "), r.stderr
    r = subprocess.run([PY, "ort_analysis/fusion_detector.py", "--device", "cpu", "--model", tmp_path / "noshape.onnx"],
                       cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HASE_HOME": str(tmp_path / "home")})
    assert "has no shape in the model" in r.stderr


# ---- the metrics-file parser ---------------------------------------------------------------------------------
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
FIELD = st.sampled_from(CPU_FIELDS + ["bg_CPU_UTIL_PCT", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_SM_CLOCK",
                                      "HASE_LAUNCH_WAIT_US", "HASE_LAUNCH_WAIT_AGE_S", "FOO_BAR", "metrics"])
VALUE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10 ** 400), st.text(max_size=5),
                  st.booleans(), st.none(), st.lists(st.integers(), max_size=2))
# a metrics file: any JSON, a flat {field: value}, or DCGM-exporter-like {"metrics": {field: value}}
METRICS_DOC = st.one_of(JSON, st.dictionaries(FIELD, VALUE, max_size=6),
                        st.dictionaries(st.just("metrics"), st.dictionaries(FIELD, VALUE, max_size=5), max_size=1))


def parse_snapshot(path: Path):
    from hase.inference.predict_model_latency import DEFAULTS, current_load
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return current_load(DEFAULTS, "cpu", CPU_FIELDS, path)
    except HaseError as e:
        one_line(e)
        return None


@FUZZ
@given(doc=METRICS_DOC)
def test_metrics_file_any_json(tmp_path, doc):
    p = tmp_path / "snap.json"
    p.write_text(json.dumps(doc, allow_nan=True))
    got = parse_snapshot(p)
    if got is not None:   # a result: every CPU field the predictor reads, each in its range
        from hase.benchmark.gpu_metrics import check_value
        load = got[0]
        assert set(load) >= {"bg_" + f for f in CPU_FIELDS}
        for f in CPU_FIELDS:
            check_value(f, load["bg_" + f])


@FUZZ
@given(data=st.binary(max_size=200))
def test_metrics_file_any_bytes(tmp_path, data):
    p = tmp_path / "snap.json"
    p.write_bytes(data)
    parse_snapshot(p)


# ---- the config resolver -------------------------------------------------------------------------------------
KEYS = st.sampled_from(["sample_s", "top_kernels", "io_binding", "pin_dims", "prometheus.url", "prometheus.queries",
                        "probe.max_age_s", "probe", "seed", "nope", "", "a..b", "sample_s.x", "pin_dims.N"])
RAW = st.one_of(st.text(max_size=12), st.sampled_from(["abc", "-1", ".nan", ".inf", "[1, 2]", "{a: 1}", "true", "~",
                                                       "!!python/object:os.system ls", "&a [*a]", "'", "1e999"]))


@FUZZ
@given(sets=st.lists(st.one_of(st.builds(lambda k, v: f"{k}={v}", KEYS, RAW), st.text(max_size=10)), max_size=3),
       yaml_text=st.one_of(st.none(), st.text(max_size=40),
                           st.builds(lambda k, v: f"{k}: {v}\n", KEYS.filter(lambda k: "." not in k and k), RAW)))
@example(sets=[], yaml_text="sample_s: &a [*a]")          # a value that contains itself (found by a CI run)
@example(sets=["sample_s=&a [*a]"], yaml_text=None)
def test_config_resolver(tmp_path, sets, yaml_text):
    from hase.inference.predict_model_latency import DEFAULTS
    from hase.utils.config import resolve
    path = None
    if yaml_text is not None:
        path = tmp_path / "c.yaml"
        path.write_text(yaml_text)
    try:
        cfg = resolve(DEFAULTS, path, sets)
    except HaseError as e:
        one_line(e)
        return
    assert set(cfg) == set(DEFAULTS)   # a result keeps the defaults' keys, each of its default's type
    for k in ("sample_s", "sample_max_s", "top_kernels"):
        assert isinstance(cfg[k], (int, float)) and not isinstance(cfg[k], bool) and cfg[k] >= 0
    assert isinstance(cfg["io_binding"], bool) and isinstance(cfg["pin_dims"], dict)


def test_config_cases_as_scripts(tmp_path):
    for sets in (["sample_s=abc"], ["a..b=1"], ["pin_dims.N=x"], ["=3"], ["probe=1"]):
        r = subprocess.run([PY, "inference/predict_model_latency.py", "--device", "cpu", "--model", "x.onnx",
                            *[x for s in sets for x in ("--set", s)]], cwd=REPO, capture_output=True, text=True,
                           timeout=120, env={**os.environ, "HASE_HOME": str(tmp_path)})
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (sets, r.stderr)


def test_a_line_break_in_the_source_stays_one_line():
    """Found by test_config_resolver: '--set nope=<newline>' put the line break of the value into the message."""
    from hase.utils.config import resolve
    from hase.inference.predict_model_latency import DEFAULTS
    with pytest.raises(HaseError) as e:
        resolve(DEFAULTS, None, ["nope=\n"])
    one_line(e.value)
    assert "nope" in str(e.value)


# ---- the prediction service's request bodies -------------------------------------------------------------------
@pytest.fixture(scope="module")
def service():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient
    from hase.graph_model.dag_critical_path import records_in_file
    from hase.service import create_app
    rec = records_in_file(str(REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200" / "records.json.xz"))
    return TestClient(create_app("", "nvidia-h200"), raise_server_exceptions=False), rec["resnet18_bs1_224x224"]


BODY_KEY = st.sampled_from(["target", "analysis_id", "record", "load", "prometheus", "options", "breakdown",
                            "candidates", "colour"])


def mutated_record(rec, draw_kernel_keys, value):
    """The real record with some of its first kernel's keys dropped or given a random value."""
    k0 = dict(rec["kernels"][0])
    for k in draw_kernel_keys:
        if value is None:
            k0.pop(k, None)
        else:
            k0[k] = value
    return dict(rec, kernels=[k0] + rec["kernels"][1:])


@FUZZ
@given(body=st.one_of(JSON, st.dictionaries(BODY_KEY, JSON, max_size=4)),
       keys=st.lists(st.sampled_from(["id", "type", "op_type", "inputs", "outputs", "attributes", "flops", "bytes_read",
                                     "bytes_written", "category", "ep", "signature", "weight_shapes"]), max_size=3),
       value=st.one_of(st.none(), JSON), use_record=st.booleans(), path=st.sampled_from(["/v1/predict", "/v1/place"]))
def test_service_request_bodies(service, body, keys, value, use_record, path):
    """Item 13, the service: any JSON body is an answer or an error naming its field (4xx, one line), never a 500."""
    client, rec = service
    if use_record and isinstance(body, dict):
        body = dict(body, record=mutated_record(rec, keys, value))
    r = client.post(path, content=json.dumps(body, allow_nan=True), headers={"content-type": "application/json"})
    assert r.status_code < 500 or r.status_code == 501, (r.status_code, r.text[:300])
    if r.status_code >= 400:
        err = r.json()
        assert "\n" not in err["error"] and "internal error" not in err["error"], err


# ---- the same through the Predictor API and `hase predict` (hase.api: its own load check and record reader) ------
XEON = "cpu-intel-r-xeon-r-processor"   # the committed CPU timeline: a CPU EP prediction without a phase 5 predictor


@pytest.fixture(scope="module")
def xeon(tmp_path_factory):
    """(Predictor for the committed Xeon CPU timeline, a real CPU EP record of a small model)."""
    import hase
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers import build_residual_model
    p = tmp_path_factory.mktemp("xeon") / "tiny_bs1_16x16.onnx"
    build_residual_model(p, "tiny", 8, 2, 16)
    pred = hase.load_predictor(XEON)
    return pred, pred.analyse(p)


def api_predict(pred, model, load=None):
    try:
        return pred.predict(model, load)
    except HaseError as e:
        one_line(e)
        return None


@FUZZ
@given(doc=METRICS_DOC)
@example(doc={"CPU_UTIL_PCT": 10, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 97})
def test_metrics_file_any_json_through_the_api(xeon, tmp_path, doc):
    """`hase predict --metrics-file`'s chain (load_sources.load_from_file, then Predictor.check_load, then
    predict): a result whose every known field is in range, or one line."""
    from hase.benchmark.gpu_metrics import FIELD_SPECS, check_value
    from hase.inference.load_sources import load_from_file
    pred, rec = xeon
    p = tmp_path / "snap.json"
    p.write_text(json.dumps(doc, allow_nan=True))
    try:
        got = load_from_file(p)
    except HaseError as e:
        one_line(e)
        return
    res = api_predict(pred, rec, got)
    if res is not None:
        for f, v in got.items():
            if f in FIELD_SPECS:
                check_value(f, v)   # a known field out of range or NaN never gives a result
        assert res.total_ms > 0


RECORD_KEY = st.sampled_from(["model", "device", "provenance", "graph_inputs", "graph_outputs", "edges", "kernels",
                              "opsets", "fusions", "type_counts", "kernel_count"])
KERNEL_KEY = st.sampled_from(["id", "type", "op_type", "inputs", "outputs", "attributes", "flops", "bytes_read",
                              "bytes_written", "category", "ep", "node_name"])
TENSOR = st.one_of(JSON, st.fixed_dictionaries({"name": JSON, "shape": JSON, "dtype": JSON}))


@FUZZ
@given(top=st.dictionaries(RECORD_KEY, st.one_of(st.none(), JSON, st.lists(TENSOR, max_size=2)), max_size=3),
       kernel=st.dictionaries(KERNEL_KEY, st.one_of(st.none(), JSON), max_size=2),
       edge=st.one_of(st.none(), JSON, st.fixed_dictionaries({"src": JSON, "dst": JSON, "tensor": JSON})))
@example(top={"model": None}, kernel={}, edge=None)                    # no 'model'
@example(top={}, kernel={"op_type": None}, edge=None)                  # a kernel without op_type (the host table)
@example(top={"provenance": "x"}, kernel={}, edge=None)                # provenance not an object
@example(top={"graph_inputs": [None]}, kernel={}, edge=None)
@example(top={"graph_outputs": 3}, kernel={}, edge=None)
@example(top={}, kernel={}, edge={"src": "nope", "dst": 1, "tensor": None})
def test_record_handed_to_the_api(xeon, top, kernel, edge):
    """A record handed to Predictor.predict (what `hase serve` takes as 'record' and `hase predict` reads from a
    .json): a real one with top-level keys, its first kernel's keys or an edge dropped (None) or replaced."""
    pred, rec = xeon
    r = json.loads(json.dumps(rec))
    for k, v in top.items():
        if v is None:
            r.pop(k, None)
        else:
            r[k] = v
    if isinstance(r.get("kernels"), list) and r["kernels"] and isinstance(r["kernels"][0], dict):
        for k, v in kernel.items():
            if v is None:
                r["kernels"][0].pop(k, None)
            else:
                r["kernels"][0][k] = v
    if edge is not None and isinstance(r.get("edges"), list):
        r["edges"] = r["edges"] + [edge]
    api_predict(pred, r, {"CPU_UTIL_PCT": 5.0})


def test_record_files_through_hase_predict(xeon, tmp_path):
    """A record file given to `hase predict` is checked like a record handed to the API: one line, exit 2 (a kernel
    without 'op_type' or a record without 'model' ended in a KeyError traceback)."""
    _, rec = xeon
    k0 = {k: v for k, v in rec["kernels"][0].items() if k != "op_type"}
    cases = {"no_op_type.json": dict(rec, kernels=[k0] + rec["kernels"][1:]),
             "no_model.json": {k: v for k, v in rec.items() if k != "model"},
             "bad_inputs.json": dict(rec, graph_inputs=[None]),
             "bad_edge.json": dict(rec, edges=rec["edges"] + [{"src": "nope"}])}
    for name, doc in cases.items():
        (tmp_path / name).write_text(json.dumps(doc))
        r = subprocess.run([PY, "-m", "hase.cli", "predict", tmp_path / name, "--device", "cpu", "--set",
                            f"timeline_model={REPO / 'inference/results' / XEON / 'timeline_model.json'}"],
                           cwd=REPO, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "HASE_HOME": str(tmp_path / "home")})
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        assert r.returncode == 2 and "Traceback" not in r.stderr, (name, r.stderr[-1500:])
        assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / name}: record"), (name, r.stderr)


CONFIG_KEY = st.sampled_from(["sample_s", "top_kernels", "io_binding", "pin_dims", "prometheus", "probe", "device",
                              "timeline_model", "predictor_dir", "cudnn_conv_algo_search", "nope", ""])


@FUZZ
@given(config=st.one_of(JSON, st.dictionaries(CONFIG_KEY, JSON, max_size=3)))
@example(config=[1])
@example(config="sample_s=abc")
@example(config={"probe": {"max_age_s": float("nan")}})
def test_config_handed_to_the_api(xeon, config):
    """hase.load_predictor(config=...) resolves a config like --set: a Predictor, or one line."""
    import hase
    try:
        p = hase.load_predictor(XEON, config=config)
    except HaseError as e:
        one_line(e)
        return
    assert p.device == "cpu" and isinstance(p.cfg["sample_s"], (int, float))


def test_dynamic_dims_refused_with_what_to_do(fuzz_home):
    """A named dynamic dim says which pin_dims key to set; a dim with neither a size nor a name (nothing to pin)
    says so, instead of 'pin it with --set pin_dims.NAME=N'."""
    with pytest.raises(HaseError) as e:
        analyse(fuzz_home, tiny_model(["batch", 3]))
    assert "dim 0 is dynamic (batch); pin it with --set pin_dims.batch=SIZE (a whole number > 0)" in str(e.value)
    for unnamed in (None, ""):
        with pytest.raises(HaseError) as e:
            analyse(fuzz_home, tiny_model([unnamed, 3]))
        one_line(e.value)
        assert "dim 0 has neither a size nor a name: export the model with static input shapes" in str(e.value)
    rec = analyse(fuzz_home, tiny_model(["batch", 3]), {"batch": 2})
    assert rec["graph_inputs"][0]["shape"] == [2, 3]
