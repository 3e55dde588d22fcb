"""Models Hase had not seen, brought as a new user would (found by exporting them fresh): each test fails without
its fix. Real ORT sessions (the offline CUDA-EP analysis), real files, `hase predict` in a fresh process."""
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import hase_cli  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
XEON = REPO / "inference" / "results" / "cpu-intel-r-xeon-r-processor" / "timeline_model.json"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HASE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _save(graph, path: Path, opset: int = 17) -> Path:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _two_dynamic_dims_model(path: Path) -> Path:
    """x[batch, seq, 64] -> MatMul(64x64) -> Relu."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          "twodyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 64])], [w])
    return _save(g, path)


def test_two_dynamic_dims_pinned_by_two_set_items(tmp_path, home):
    """The error for an unpinned dim says `--set pin_dims.NAME=SIZE`; a model with two dynamic dims (batch and
    sequence) needs two such items, and the second replaced the first (cli: dict.update; config.resolve: a
    free map replaced whole per --set), so the model could never be pinned that way: the first dim was
    named as unpinned again."""
    from hase.inference.runtime import DEFAULTS
    from hase.utils.config import resolve
    assert resolve(DEFAULTS, None, ["pin_dims.batch=4", "pin_dims.seq=32"])["pin_dims"] == {"batch": 4, "seq": 32}
    f = _two_dynamic_dims_model(tmp_path / "twodyn.onnx")
    q = hase_cli("predict", f, "--gpu", "nvidia-h200", "--set", "pin_dims.batch=4", "--set", "pin_dims.seq=32",
                 "--json", tmp_path / "p.json", home=home)
    assert q.returncode == 0, q.stderr
    assert json.loads((tmp_path / "p.json").read_text())["total_ms"] > 0
    # one missing dim is still named, in one line
    q = hase_cli("predict", f, "--gpu", "nvidia-h200", "--set", "pin_dims.batch=4", home=home)
    assert q.returncode == 2 and "Traceback" not in q.stderr and "pin_dims.seq" in q.stderr, q.stderr


def _loop_model(path: Path) -> Path:
    """y = x run through a Loop of 8 iterations whose body is MatMul(64x64) -> Relu (what torch's EmbeddingBag and
    torch.jit.script loops export to)."""
    w = numpy_helper.from_array(np.eye(64, dtype=np.float32), "w")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("MatMul", ["h_in", "w"], ["m"]),
         helper.make_node("Relu", ["m"], ["h_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [8, 64])])
    trip = numpy_helper.from_array(np.array(8, dtype=np.int64), "trip")
    cond = numpy_helper.from_array(np.array(True), "cond")
    g = helper.make_graph([helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body)], "loop",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [w, trip, cond])
    return _save(g, path)


def test_a_loop_model_is_predicted_and_its_body_named_as_not_modelled(tmp_path, home):
    """A model with a Loop (an If/Scan alike) crashed the analysis with a traceback (TypeError: GraphProto is not
    JSON serializable, from the node's body attribute in the kernel signature). Now the body is summarised in the
    record and the prediction says that the body's nodes are not predicted (a lower bound)."""
    import hase
    f = _loop_model(tmp_path / "loop.onnx")
    p = hase.load_predictor("nvidia-h200")
    rec = p.analyse(f)
    loop = next(k for k in rec["kernels"] if k["op_type"] == "Loop")
    assert loop["attributes"]["body"]["nodes"] == 3 and loop["attributes"]["body"]["ops"]["MatMul"] == 1
    r = p.predict(rec)
    assert r.total_ms > 0
    assert any("control flow not modelled" in w and "Loop" in w and "lower bound" in w for w in r.warnings), r.warnings
    q = hase_cli("predict", f, "--gpu", "nvidia-h100", home=home)
    assert q.returncode == 0 and "Traceback" not in q.stderr and "control flow not modelled" in q.stderr, q.stderr


def test_a_loop_model_on_the_cpu_timeline_names_its_body_as_not_modelled(tmp_path):
    """The CPU EP's table timeline (the committed Xeon's: no kernel predictor) prepared the record without the
    risks the GPU path names: a Loop priced as one node, its body's nodes missing, and not a word."""
    import hase
    f = _loop_model(tmp_path / "loop.onnx")
    p = hase.load_predictor("cpu", timeline_model=XEON)
    r = p.predict(f)
    assert r.total_ms > 0
    assert any("control flow not modelled" in w and "Loop" in w for w in r.warnings), r.warnings


def test_the_table_timeline_names_every_known_gap_of_a_record(tiny_onnx):
    """The table path (no kernel predictor) named only control flow; a record computing in float16, or analysed
    offline and not claimed, went by without a word there (the GPU path named both): one list for both paths."""
    import copy
    import hase
    p = hase.load_predictor("cpu", timeline_model=XEON)
    rec = copy.deepcopy(p.analyse(tiny_onnx))
    assert not any("float16" in w or "not claimed" in w for w in p.predict(rec).warnings)
    for e in rec["kernels"][0]["inputs"] + rec["kernels"][0]["outputs"]:
        if e and e.get("dtype") == "float32":
            e["dtype"] = "float16"
    rec["offline"] = {"claimed": False, "unclaimed_because": ["a reason"]}
    w = p.predict(rec).warnings
    assert any("compute in float16" in x for x in w) and any("not claimed: a reason" in x for x in w), w


def test_a_bfloat16_model_is_refused_with_what_to_do_instead(tmp_path, home):
    """A bfloat16 MatMul model (torch .to(torch.bfloat16), dynamo export): the CUDA EP runs it, the CPU build that
    the offline analysis uses has no bfloat16 MatMul and, unlike float16, inserts no Casts. It said 'ORT cannot
    load it: NOT_IMPLEMENTED', as if the model were broken; now it names bfloat16, the offline analysis and what
    to do (a record made on a GPU machine, or float16)."""
    w = helper.make_tensor("w", TensorProto.BFLOAT16, [64, 64], [0x3F80] * 64 * 64, raw=False)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "bf16",
                          [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [8, 64])], [w])
    f = _save(g, tmp_path / "bf16.onnx")
    q = hase_cli("predict", f, "--gpu", "nvidia-h200", home=home)
    assert q.returncode == 2 and "Traceback" not in q.stderr, q.stderr
    last = q.stderr.strip().splitlines()[-1]
    assert "bf16.onnx: a bfloat16 model" in last and "hase analyse --device cuda" in last, last


def test_a_model_ort_refuses_is_one_line_on_stderr(tmp_path, home):
    """A node of an unknown domain (org.acme:Frobnicate): the analysis session's own ORT log ('[E:onnxruntime:...]
    Could not write a profile because no model was loaded', in colour) came before Hase's one-line error, for the
    GPU (offline) and the CPU EP alike; a model that fails while it runs printed ORT's executor error the same
    way. Now stderr is the one line, exit 2."""
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]),
                           helper.make_node("Frobnicate", ["h"], ["y"], domain="org.acme")], "acme",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.acme", 1)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "acme.onnx"))
    # runs, but not at the size it is asked for: a Reshape to a fixed shape (a legacy export's traced constant)
    shape = numpy_helper.from_array(np.array([8, 64], np.int64), "shape")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "fixed",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [shape])
    _save(g, tmp_path / "fixed.onnx")
    for args in (["acme.onnx", "--gpu", "nvidia-h200"], ["acme.onnx", "--device", "cpu", "--set",
                                                         f"timeline_model={XEON}"],
                 ["fixed.onnx", "--gpu", "nvidia-h200", "--set", "pin_dims.N=4"],
                 ["fixed.onnx", "--device", "cpu", "--set", f"timeline_model={XEON}", "--set", "pin_dims.N=4"]):
        q = hase_cli("predict", tmp_path / args[0], *args[1:], home=home)
        lines = q.stderr.strip().splitlines()
        assert q.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, q.stderr)
        # fixed.onnx: the model itself fails at N=4 (test_a_model_that_cannot_run_at_the_pinned_size_...)
        assert args[0] in lines[0] and ("ORT cannot" if args[0] == "acme.onnx" else
                                        "the model itself cannot run at pin_dims {'N': 4}: ") in lines[0], lines


def test_another_cpus_timeline_says_whose_numbers_they_are(tmp_path):
    """--device cpu --set timeline_model=<the committed Xeon's> on another machine (this 2-core AMD EPYC): the
    prediction was labelled with this machine's name (target cpu-amd-epyc, 'the timeline model for cpu-amd-epyc')
    and nothing said the numbers are the Xeon's at 8 threads. Now a warning names the timeline and its threads;
    a predictor named after the Xeon itself does not get it."""
    import hase
    from hase.utils.ort_session import device_slug
    f = _two_dynamic_dims_model(tmp_path / "m.onnx")
    r = hase.load_predictor("cpu", timeline_model=XEON).predict(
        hase.load_predictor("cpu", timeline_model=XEON).analyse(f, pin_dims={"batch": 2, "seq": 8}))
    mine = [w for w in r.warnings if "is not this machine's" in w]
    if device_slug("cpu") == "cpu-intel-r-xeon-r-processor":
        pytest.skip("this machine is the Xeon the timeline was measured on")
    assert len(mine) == 1 and str(XEON) in mine[0] and "8 intra-op threads" in mine[0], r.warnings
    own = hase.load_predictor("cpu-intel-r-xeon-r-processor")
    assert not [w for w in own.predict(own.analyse(f, pin_dims={"batch": 2, "seq": 8})).warnings
                if "is not this machine's" in w]


def test_every_unpinned_dim_is_named_in_one_line_in_each_entry_points_words(tmp_path, home):
    """A model with two unpinned dynamic dims (batch and seq): the error named only the first (the user pinned it
    and was then told about the second). Now every unpinned dim is named in one line, with how to pin them all in
    the words of the entry point: `--set pin_dims.X=SIZE` on the command line, `pin_dims={...}` through the Python
    API (with the dims already pinned kept in it), the form field pin_dims through the service's upload."""
    import hase
    from hase.utils.errors import HaseError
    f = _two_dynamic_dims_model(tmp_path / "twodyn.onnx")
    q = hase_cli("predict", f, "--gpu", "nvidia-h200", home=home)
    lines = q.stderr.strip().splitlines()
    assert q.returncode == 2 and len(lines) == 1, q.stderr
    assert ("input 'x' dims 0 (batch) and 1 (seq) are dynamic; pin them with --set pin_dims.batch=SIZE "
            "--set pin_dims.seq=SIZE") in lines[0], lines
    p = hase.load_predictor("nvidia-h200")
    for call in (lambda: p.analyse(f), lambda: p.predict(f), lambda: p.sweep(f, "batch", [1, 2])):
        with pytest.raises(HaseError) as e:
            call()
        assert "--set" not in str(e.value) and len(str(e.value).splitlines()) == 1, str(e.value)
    with pytest.raises(HaseError) as e:
        p.analyse(f)
    assert "input 'x' dims 0 (batch) and 1 (seq) are dynamic; pin them with pin_dims={'batch': SIZE, 'seq': SIZE}" \
        in str(e.value), str(e.value)
    with pytest.raises(HaseError) as e:
        p.analyse(f, pin_dims={"batch": 4})
    assert "dim 1 is dynamic (seq); pin it with pin_dims={'batch': 4, 'seq': SIZE}" in str(e.value), str(e.value)
    # the CLI's words again after the API's: the second --set is what is missing
    q = hase_cli("predict", f, "--gpu", "nvidia-h200", "--set", "pin_dims.batch=4", home=home)
    assert q.returncode == 2 and "pin it with --set pin_dims.seq=SIZE" in q.stderr and "{" not in q.stderr, q.stderr
    # several inputs sharing the dims: named together
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("MatMul", ["s", "w"], ["y"])],
                          "twoin", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", 64])
                                    for n in ("a", "b")],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 64])], [w])
    with pytest.raises(HaseError) as e:
        p.analyse(_save(g, tmp_path / "twoin.onnx"))
    assert "inputs 'a' and 'b' dims 0 (batch) and 1 (seq) are dynamic" in str(e.value), str(e.value)
    # the service's upload: the form field
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from hase.service import create_app
    with TestClient(create_app()) as c:
        r = c.post("/v1/analyse", files={"model": ("twodyn.onnx", f.read_bytes())}, data={"target": "nvidia-h200"})
        assert r.status_code == 422 and r.json()["field"] == "model", r.text
        err = r.json()["error"]
        assert "dims 0 (batch) and 1 (seq) are dynamic" in err and "--set" not in err, err
        assert 'the form field pin_dims={"batch": SIZE, "seq": SIZE}' in err, err
        r = c.post("/v1/analyse", files={"model": ("twodyn.onnx", f.read_bytes())},
                   data={"target": "nvidia-h200", "pin_dims": json.dumps({"batch": 2, "seq": 8})})
        assert r.status_code == 200, r.text


def _traced_reshape_model(path: Path) -> Path:
    """torch's TorchScript exporter (dynamo=False) with a dynamic batch N, of a module whose forward takes the batch
    as a Python int: the traced size 8 is baked into the Reshape, so the exported model only runs at N=8."""
    import torch

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 32)

        def forward(self, x):
            b = int(x.shape[0])   # a Python int: a constant in the trace
            return self.fc(x).reshape(b, 4, 8)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Flat().eval(), torch.randn(8, 64), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=17)
    return path


def test_a_model_that_cannot_run_at_the_pinned_size_is_blamed_not_the_rewrite(tmp_path, home):
    """A TorchScript export with the traced batch baked into a Reshape runs at N=8 only. At N=4 the offline analysis
    said 'ORT cannot run the rewritten graph on the CPU EP', blaming Hase's rewrite; the plain model fails the
    same way. Now the error says that the model itself cannot run at those pins, with ORT's message; one line,
    exit 2 (the GPU's offline analysis and the CPU EP alike)."""
    import hase
    from hase.utils.errors import HaseError
    f = _traced_reshape_model(tmp_path / "traced.onnx")
    rec = hase.load_predictor("nvidia-h200").analyse(f, pin_dims={"N": 8})
    assert rec["graph_inputs"][0]["shape"] == [8, 64]
    for args in (["--gpu", "nvidia-h200"], ["--device", "cpu", "--set", f"timeline_model={XEON}"]):
        q = hase_cli("predict", f, *args, "--set", "pin_dims.N=4", home=home)
        lines = q.stderr.strip().splitlines()
        assert q.returncode == 2 and len(lines) == 1, (args, q.stderr)
        assert "traced.onnx: the model itself cannot run at pin_dims {'N': 4}: " in lines[0], lines
        assert "Reshape" in lines[0] and "rewritten" not in lines[0], lines
    with pytest.raises(HaseError) as e:
        hase.load_predictor("nvidia-h200").analyse(f, pin_dims={"N": 4})
    assert "the model itself cannot run at pin_dims {'N': 4}" in str(e.value), str(e.value)


def _resnet(name: str, path: Path) -> Path:
    """A torchvision ResNet (random weights) exported with a dynamic batch N, as a new user would."""
    import warnings
    import torch
    import torchvision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(getattr(torchvision.models, name)(weights=None).eval(), torch.randn(1, 3, 224, 224),
                          str(path), dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=17)
    return path


def test_a_pinned_size_too_big_for_this_machine_is_refused_before_the_run(tmp_path, home):
    """The analysis runs the model once at the pinned size on this machine's CPU: a ResNet-18 at N=100000 allocated
    its dummy input (56 GiB) and failed with 'Unable to allocate 56.1 GiB' (or swapped). Now it is refused before
    the run in one line naming the pins, the estimate and the memory available here; a ResNet-50 at batch 64
    still analyses."""
    import hase
    import psutil
    f = _resnet("resnet18", tmp_path / "r18.onnx")
    for args in (["--gpu", "nvidia-h200"], ["--device", "cpu", "--set", f"timeline_model={XEON}"]):
        q = hase_cli("predict", f, *args, "--set", "pin_dims.N=100000", home=home)
        lines = q.stderr.strip().splitlines()
        assert q.returncode == 2 and len(lines) == 1, (args, q.stderr)
        assert "r18.onnx: " in lines[0] and "pin_dims {'N': 100000}" in lines[0], lines
        assert "56.1 GiB" in lines[0] and "GiB available" in lines[0], lines
    avail = psutil.virtual_memory().available / 2 ** 30
    assert avail > 4, f"{avail:.1f} GiB available: too little to analyse a ResNet-50 at batch 64"
    rec = hase.load_predictor("nvidia-h200").analyse(_resnet("resnet50", tmp_path / "r50.onnx"), pin_dims={"N": 64})
    assert rec["graph_inputs"][0]["shape"] == [64, 3, 224, 224]
