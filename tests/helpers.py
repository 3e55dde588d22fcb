"""Shared by the test files: run a Hase script in a fresh process, start and wait for a real Prometheus,
build a small residual ONNX model."""
import os
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent

from hase.utils.local_prometheus import free_port, start_prometheus  # noqa: F401  (the tests import them from here)


CORPUS_RECORDS = REPO / "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz"
_CORPUS = {}


def corpus_records(models=None) -> dict:
    """records_in_file(CORPUS_RECORDS[, models]): the H200 corpus records with their shards. All of them are read once
    per test module (~55 s and ~7.6 GB on a 2-core machine; conftest drops them when the module ends); named ones are
    cut out of the files alone (seconds). Read-only: a test copies a record or kernel before it changes one."""
    from hase.graph_model.dag_critical_path import records_in_file
    if models is not None:
        return records_in_file(CORPUS_RECORDS, models=models)
    if "all" not in _CORPUS:
        _CORPUS["all"] = records_in_file(CORPUS_RECORDS)
    return _CORPUS["all"]


def drop_corpus_records() -> None:
    _CORPUS.clear()


def run_script(args: list, home, check: bool = True, timeout: float = 900, cwd=None):
    """[script, *args] with the project's Python and HASE_HOME=home; AssertionError with the output tail."""
    env = dict(os.environ, HASE_HOME=str(home))
    p = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{args[:1]} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p


def hase_cli(*args, home, timeout: float = 600, cwd=None):
    """`python -m hase.cli ARGS` in a fresh process with HASE_HOME=home (from the checkout unless cwd is given)."""
    env = dict(os.environ, HASE_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "hase.cli", *map(str, args)], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def wait_for_series(url: str, query: str, min_value: float = None, timeout_s: float = 60) -> bool:
    """Poll Prometheus' HTTP API until `query` has a result (at least min_value when given)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            res = requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=2).json()["data"]["result"]
            if res and (min_value is None or float(res[0]["value"][1]) >= min_value):
                return True
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.5)
    return False


def build_residual_model(path: Path, name: str, channels: int, blocks: int, hw: int) -> None:
    """x -> [Conv -> Relu -> Add(residual)] * blocks -> GlobalAveragePool -> y, seeded weights."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(blocks):
        w = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.1
        b = rng.standard_normal(channels).astype(np.float32) * 0.1
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Add", [f"r{i}", cur], [f"a{i}"], name=f"add{i}")]
        cur = f"a{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [cur], ["y"], name="gap"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])
    model = helper.make_model(helper.make_graph(nodes, name, [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def synthetic_prep(h, dev, h2d=50.0, d2h=10.0, **extra) -> dict:
    """A prepared timeline input (inference/timeline_model.prepared's keys) of len(h) nodes: node i dispatches in
    h[i] us (launching at the start of its interval) and runs dev[i] us on the GPU; extra keys override."""
    import numpy as np
    n = len(h)
    return {"h": np.array(h, float), "dev": np.array(dev, float), "floor": 0.0, "floor_us": 0.0,
            "launch_at_start": True, "on_host": np.zeros(n, bool), "sync": np.zeros(n, bool),
            "h2d_us": h2d, "d2h_us": d2h, "device": "cuda", "n": n, **extra}


def optimized_model_too_big(monkeypatch, min_bytes: int = 32768) -> list:
    """Make ORT's save of an optimized model ('<final>.tmp.onnx') fail as it does over protobuf's 2 GB, unless the
    session writes its initializers externally (those of min_bytes and up: ort_session's default; 0 puts the small
    constants there too, so that reading them back is tested). Returns the list each such session appends its
    external file name to (None: inline)."""
    import onnxruntime as ort
    from hase.utils import ort_session
    real, calls = ort.InferenceSession, []

    def session(src, so=None, *args, **kwargs):
        if so is not None and so.optimized_model_filepath.endswith(".tmp.onnx"):
            try:
                calls.append(so.get_session_config_entry("session.optimized_model_external_initializers_file_name"))
            except RuntimeError:  # no such entry: ORT would write one protobuf
                calls.append(None)
                raise RuntimeError("[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Protobuf serialization failed.")
        return real(src, so, *args, **kwargs)
    monkeypatch.setattr(ort, "InferenceSession", session)
    monkeypatch.setattr(ort_session, "EXTERNAL_MIN_BYTES", min_bytes, raising=False)
    return calls
