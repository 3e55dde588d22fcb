"""The CUDA EP's graph analysed without a GPU (ort_analysis/offline_cuda.py) against the records made on the H200,
with real torchvision exports and the installed (CPU) onnxruntime."""
import json
from pathlib import Path

import pytest

from tests.helpers import run_script as run

REPO = Path(__file__).resolve().parent.parent

H200 = REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200" / "records.json.xz"
# one of each family the committed records hold, cheap to export on a CPU: a ResNet (ORT keeps Conv, Relu, Add apart
# on CUDA), EfficientNet (SiLU -> QuickGelu), ConvNeXt (Gelu, LayerNorm, transposes moved, MatMul+Add -> Gemm),
# MobileNetV3 (HardSwish: one CUDA kernel, inlined by the CPU EP), ViT (FusedMatMul, Split, SkipLayerNormalization)
MODELS = ["resnet18_bs1_224x224", "efficientnet_b1_bs1_224x224", "convnext_tiny_bs8_224x224",
          "mobilenet_v3_small_bs1_224x224", "vit_b_16_bs16_224x224"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """The comparison script on MODELS (exported here), as CI runs it: its summary."""
    home = tmp_path_factory.mktemp("offline_cuda")
    out = home / "check"
    run(["ort_analysis/compare_offline_cuda.py", "--export", "--out", out, "--records", H200,
         "--set", f"models=[{','.join(MODELS)}]", "--set", "timeline_models=[measured_cupti_lines]"], home, cwd=REPO)
    return home, json.loads((out / "summary.json").read_text())


def test_claimed_models_match_the_gpu_records_kernel_for_kernel(compared):
    _, s = compared
    assert s["compared"] == len(MODELS) and s["claimed"] == len(MODELS)
    for m in MODELS:
        r = s["per_model"][m]
        assert r["claimed"], (m, r["unclaimed_because"])
        # the exporter made the graph the GPU job analysed, and ORT rewrote it the same way, kernel for kernel
        assert r["original_nodes"][0] == r["original_nodes"][1], m
        assert r["kernel_for_kernel"], (m, r.get("count_diff"), r.get("first_difference"))
        p = r["prediction_ms"]["measured_cupti_lines"]
        assert p["gpu_record"] > 0 and abs(p["rel_diff"]) < 0.01, (m, p)


def test_offline_record_is_marked_and_on_the_cuda_ep(compared):
    home, _ = compared
    rec = json.loads((home / "ort_analysis" / "ort_kernel_record" / f"{MODELS[0]}.cuda-offline.json").read_text())
    assert rec["device"] == "cuda" and rec["provenance"]["offline"] is True
    assert rec["offline"]["claimed"] and rec["offline"]["disabled_transformers"]
    assert {k["ep"] for k in rec["kernels"]} == {"CUDAExecutionProvider"}
    # CUDA's rewrite, not the CPU EP's: no NCHWc layout, no fused conv
    assert not any(k["domain"].endswith("nchwc") or k["op_type"] == "FusedConv" for k in rec["kernels"])


def test_the_cpu_only_transformers_are_what_makes_the_difference(compared, monkeypatch):
    """Negative controls: the plain CPU session's graph, and the CUDA one with ConvActivationFusion left on, are NOT
    the GPU record; so a match above is the switched-off transformers' doing, not a comparison that cannot fail."""
    home, _ = compared
    monkeypatch.setenv("HASE_HOME", str(home))
    from hase.graph_model.dag_critical_path import records_in_file
    from hase.ort_analysis import offline_cuda
    from hase.ort_analysis.compare_offline_cuda import compare_records
    from hase.ort_analysis.fusion_detector import build_record
    onnx = home / "model_zoo" / "models" / f"{MODELS[0]}.onnx"
    gpu = records_in_file(H200, models=[MODELS[0]])[MODELS[0]]
    cfg = {"pin_dims": {}, "seed": 0, "keep_small_values": 64}
    for off in ((), tuple(t for t in offline_cuda.CPU_ONLY_TRANSFORMERS if t != "ConvActivationFusion")):
        rec = build_record(onnx, "cuda", cfg, optimizer=lambda mp, c, off=off: offline_cuda.optimize_offline(
            mp, disabled=off, out_dir=home / "neg"))
        c = compare_records(gpu, rec)
        assert not c["kernel_list_match"] and not c["kernel_for_kernel"], off
        fused = "Conv_Relu" if off else "Conv_Add_Relu"
        assert fused in rec["type_counts"], rec["type_counts"]


def test_every_switched_off_transformer_exists_in_this_ort():
    """A name ORT does not know is ignored by disabled_optimizers: a renamed transformer would silently stay on."""
    from hase.ort_analysis import offline_cuda
    from tests.helpers import build_residual_model
    import tempfile
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "m.onnx"
        build_residual_model(f, "m", 8, 2, 16)
        levels = offline_cuda.list_transformers(f)
    names = {n for v in levels.values() for n in v}
    assert len(levels) >= 3 and "ConvActivationFusion" in names and "TransposeOptimizer" in names
    # Avx2WeightS8ToU8Transformer is registered only where avx2 precision mode is asked for
    missing = set(offline_cuda.CPU_ONLY_TRANSFORMERS) - names - {"Avx2WeightS8ToU8Transformer"}
    assert not missing, missing


def _tiny(path, op_nodes, inits=(), x_shape=(1, 4, 8, 8), y_shape=(1, 4, 16, 16), y_type=None):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", y_type or TensorProto.FLOAT, list(y_shape))
    m = helper.make_model(helper.make_graph(op_nodes, "t", [x], [y], list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_ops_never_seen_on_cuda_are_not_claimed(tmp_path, monkeypatch):
    """Hardmax is in no committed GPU record: whether the CUDA EP runs it or a CPU fallback with copies is not known
    offline, so the record says it is not claimed, and why. (Resize was the example until the unet family's
    records showed the CUDA EP running it.)"""
    import numpy as np
    from onnx import helper, numpy_helper
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from hase.ort_analysis import offline_cuda
    f = tmp_path / "hardmax.onnx"
    _tiny(f, [helper.make_node("Relu", ["x"], ["r"], name="relu"),
              helper.make_node("Hardmax", ["r"], ["y"], name="hardmax", axis=-1)], [])
    rec = offline_cuda.analyse(f)
    assert not rec["offline"]["claimed"]
    assert any("ai.onnx:Hardmax" in w for w in rec["offline"]["unclaimed_because"])
    assert [k["type"] for k in rec["kernels"]] == ["Relu", "Hardmax"]


def test_a_shape_computed_in_the_graph_is_not_claimed_an_integer_data_path_is(tmp_path, monkeypatch):
    """The CUDA EP reads a Reshape's shape from host memory: a node computing it runs on the CPU EP, with copies,
    which is not modelled, so not claimed. Integer indices on the data path (Gather) stay on the GPU: claimed."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from hase.ort_analysis import offline_cuda

    def save(path, nodes, inputs, out, inits=()):
        m = helper.make_model(helper.make_graph(nodes, "t", inputs, [out], list(inits)),
                              opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, str(path))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [4])
    zero = numpy_helper.from_array(np.zeros(4, np.int64), "zero")
    f = tmp_path / "computed_shape.onnx"
    save(f, [helper.make_node("Add", ["n", "zero"], ["s"], name="shape_add"),   # the dummy feed is 0: keep dims
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
         [x, n], helper.make_tensor_value_info("y", TensorProto.FLOAT, None), [zero])
    rec = offline_cuda.analyse(f)
    assert not rec["offline"]["claimed"]
    assert any("Reshape input 1" in w for w in rec["offline"]["unclaimed_because"]), rec["offline"]
    table = helper.make_tensor_value_info("t", TensorProto.FLOAT, [10, 4])
    idx = helper.make_tensor_value_info("i", TensorProto.INT64, [3])
    g = tmp_path / "gather.onnx"
    save(g, [helper.make_node("Gather", ["t", "i"], ["y"], name="gather", axis=0)], [table, idx],
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]))
    rec = offline_cuda.analyse(g)
    assert rec["offline"]["claimed"], rec["offline"]["unclaimed_because"]
    assert [k["type"] for k in rec["kernels"]] == ["Gather"]


def test_predict_for_a_gpu_on_a_machine_without_a_cuda_ep(compared, tmp_path):
    """`predict_model_latency.py --gpu nvidia-h200` here (no CUDA EP) analyses the CUDA EP's graph offline, says so
    (stdout, log, JSON), and predicts what the GPU record predicts."""
    from hase.utils.ort_session import cuda_probe
    if cuda_probe()[0]:
        pytest.skip("a CUDA EP runs here: --gpu analyses on it, not offline")
    home, _ = compared
    # a small CUDA predictor from the committed H200 kernels (the timeline below takes its GPU times from its own
    # CUPTI table; the predictor is what the command loads and checks is for the CUDA EP)
    run(["training/train_kernel_model.py", "--device", "cuda", "--set",
         "data_csv=benchmark/results/nvidia-h200/kernels.csv.xz", "--set", "device_slug=nvidia-h200",
         "--set", "models=[xgboost]", "--set", "xgboost.n_estimators=20"], home, cwd=REPO)
    tl = REPO / "inference" / "results" / "nvidia-h200" / "measured_cupti_lines" / "timeline_model.json"
    onnx = home / "model_zoo" / "models" / f"{MODELS[0]}.onnx"
    out = tmp_path / "pred.json"
    p = run(["inference/predict_model_latency.py", "--gpu", "nvidia-h200", "--model", onnx, "--json", out,
             "--set", f"timeline_model={tl}"], home, cwd=REPO)
    assert "analysed offline" in p.stdout and "claimed" in p.stdout
    assert "reproduced offline" in p.stderr and "predicting at idle" in p.stderr
    res = json.loads(out.read_text())
    assert res["analysis"]["offline"] is True and res["analysis"]["claimed"] is True and res["gpu"] == "nvidia-h200"
    assert res["device"] == "cuda" and res["load_source"].startswith("idle")
    # the same number the GPU record gives through the same path
    from hase.graph_model.dag_critical_path import records_in_file
    from hase.inference import timeline_model as tm
    from hase.ort_analysis.compare_offline_cuda import NoKernelPredictor, predict_idle
    gpu = records_in_file(H200, models=[MODELS[0]])[MODELS[0]]
    want = predict_idle(gpu, tm.load(tl), NoKernelPredictor())
    assert abs(res["total_ms"] - want) / want < 0.01, (res["total_ms"], want)
    # --gpu is the CUDA EP: with --device cpu it is refused in one line
    q = run(["inference/predict_model_latency.py", "--gpu", "nvidia-h200", "--device", "cpu", "--model", onnx],
            home, check=False, cwd=REPO)
    assert q.returncode == 2 and "--gpu" in q.stderr and len(q.stderr.strip().splitlines()) == 1


def test_another_onnxruntime_than_the_gpu_records_is_not_claimed(tmp_path, monkeypatch):
    """Transformers change between ORT versions: an analysis with another version than the GPU records' is no claim."""
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from onnx import helper
    from hase.ort_analysis import offline_cuda
    f = tmp_path / "relu.onnx"
    _tiny(f, [helper.make_node("Relu", ["x"], ["y"], name="relu")], y_shape=(1, 4, 8, 8))
    assert offline_cuda.analyse(f)["offline"]["claimed"]   # Relu, float32, the records' version: claimed
    monkeypatch.setattr(offline_cuda.ort, "__version__", "0.0.1")
    rec = offline_cuda.analyse(f)
    assert not rec["offline"]["claimed"] and "0.0.1" in rec["offline"]["unclaimed_because"][0]


CORPUS = REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200" / "corpus_records.json.xz"
# a generated corpus model whose window attention adds a learned relative-position bias before its Softmax: the CUDA
# EP fuses Add + Softmax into BiasSoftmax (a fusion whose pattern match takes CUDA/ROCm nodes only)
CORPUS_MODEL = "hybrid-s8_bs1_224x224"


def test_a_corpus_model_with_bias_softmax_matches_kernel_for_kernel(tmp_path):
    run(["model_zoo/build_corpus.py", "--set", f"archs=[{CORPUS_MODEL.split('_bs')[0]}]", "--set", "max_configs=1",
         "--set", "validate=false"], tmp_path, cwd=REPO)
    out = tmp_path / "check"
    run(["ort_analysis/compare_offline_cuda.py", "--out", out, "--records", CORPUS,
         "--set", f"models=[{CORPUS_MODEL}]", "--set", "timeline_models=[measured_cupti_lines]"], tmp_path, cwd=REPO)
    r = json.loads((out / "summary.json").read_text())["per_model"][CORPUS_MODEL]
    assert r["claimed"], r["unclaimed_because"]
    assert r["kernel_for_kernel"], (r.get("count_diff"), r.get("first_difference"))
    rec = json.loads((tmp_path / "ort_analysis" / "ort_kernel_record" / f"{CORPUS_MODEL}.cuda-offline.json").read_text())
    assert rec["offline"]["fused_here"]["BiasSoftmaxFusion"] == rec["type_counts"]["BiasSoftmax"] > 0


@pytest.mark.parametrize("x_shape,b_shape,want", [
    ((2, 3, 5, 5), (3, 5, 5), {"axis": 3, "is_inner_broadcast": 0, "first": "x"}),     # relative-position bias
    ((2, 3, 5, 5), (2, 1, 1, 5), {"axis": 3, "is_inner_broadcast": 1, "first": "x"}),  # BERT-style mask
    ((2, 3, 5, 5), (1, 3, 5, 5), {"axis": 3, "is_inner_broadcast": 0, "first": "x"}),
    ((2, 3, 5, 5), (2, 3, 5, 1), None),                                                # not along the softmax axis
])
def test_bias_softmax_fusion_follows_orts_conditions(tmp_path, x_shape, b_shape, want):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from hase.ort_analysis import offline_cuda
    b = numpy_helper.from_array(np.ones(b_shape, np.float32), "b")
    nodes = [helper.make_node("Add", ["b", "x"], ["s"], name="add"),
             helper.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1)]
    f = tmp_path / "m.onnx"
    m = helper.make_model(helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)], [b]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(f))
    info = {"add": {"inputs": [("float32", list(b_shape)), ("float32", list(x_shape))],
                    "outputs": [("float32", list(x_shape))]},
            "softmax": {"inputs": [("float32", list(x_shape))], "outputs": [("float32", list(x_shape))]}}
    n = offline_cuda.fuse_bias_softmax(f, info)
    ops = [(x.op_type, list(x.input), {a.name: a.i for a in x.attribute}) for x in onnx.load(str(f)).graph.node]
    if want is None:
        assert n == 0 and [o[0] for o in ops] == ["Add", "Softmax"]
        return
    first = want.pop("first")
    assert n == 1 and ops == [("BiasSoftmax", [first, "b"], want)]
    assert info["BiasSoftmax"]["inputs"][0][1] == list(x_shape)


def test_rewrites_of_a_graph_with_external_initializers_keep_them_there(tmp_path, monkeypatch):
    """An optimized graph over 2 GB keeps its initializers in '<final>.data' (utils/ort_session.open_session): the
    offline rewrites (stand-in put back, BiasSoftmax fused) save the graph with those references intact, and the
    record is the one the inline graph gives."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tests.helpers import optimized_model_too_big
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from hase.ort_analysis import offline_cuda
    f = tmp_path / "m.onnx"
    b = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 16, 16)).astype(np.float32), "b")
    nodes = [helper.make_node("Add", ["x", "b"], ["s"], name="add"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             helper.make_node("HardSwish", ["p"], ["y"], name="hardswish")]

    def vi(n):
        return helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, 16, 16])
    m = helper.make_model(helper.make_graph(nodes, "t", [vi("x")], [vi("y")], [b]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(f))

    def kernels(rec):
        return [{k: v for k, v in x.items() if k != "node_name"} for x in rec["kernels"]]
    inline = offline_cuda.analyse(f)
    assert inline["type_counts"] == {"BiasSoftmax": 1, "HardSwish": 1}, inline["type_counts"]
    calls = optimized_model_too_big(monkeypatch, min_bytes=0)
    rec = offline_cuda.analyse(f)
    opt = Path(rec["optimized_model"])
    assert calls == [None, opt.name + ".data"] and (opt.parent / (opt.name + ".data")).is_file()
    stored = onnx.load(str(opt), load_external_data=False).graph.initializer
    assert [t.name for t in stored] == ["b"] and stored[0].data_location == TensorProto.EXTERNAL
    assert [n.op_type for n in onnx.load(str(opt)).graph.node] == ["BiasSoftmax", "HardSwish"]   # the data is there
    assert kernels(rec) == kernels(inline) and rec["offline"] == inline["offline"]


def test_a_second_prediction_reads_neither_the_gpu_records_nor_the_model_again(tmp_path, monkeypatch):
    """`hase predict m.onnx --gpu ...` without a CUDA EP: the GPU records' facts (400 MB of corpus JSON, ~9 s) are
    cached per records file under HASE_HOME (read again when the file changes), and the offline record of the model
    is cached on disk, so a later process neither parses the records nor analyses the model again."""
    import shutil
    import onnx
    from onnx import helper
    from hase.ort_analysis import offline_cuda
    from hase.utils import paths
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    recs = tmp_path / "records.json.xz"
    shutil.copyfile(H200, recs)
    src = (str(recs),)
    want = offline_cuda.gpu_record_facts.__wrapped__(src)
    assert ("ai.onnx", "Conv") in want[0] and want[1]
    real_read = paths.read_json

    def no_read(path, what):   # a new process: the lru cache is empty; the records file must not be parsed
        raise AssertionError(f"parsed {path}")
    monkeypatch.setattr(paths, "read_json", no_read)
    assert offline_cuda.gpu_record_facts.__wrapped__(src) == want
    recs.write_bytes(recs.read_bytes())   # rewritten: another mtime, so read again
    monkeypatch.setattr(paths, "read_json", real_read)
    assert offline_cuda.gpu_record_facts.__wrapped__(src) == want

    # the model's offline record: analysed once, then read from disk by a new Predictor
    f = tmp_path / "relu.onnx"
    _tiny(f, [helper.make_node("Relu", ["x"], ["y"], name="relu")], y_shape=(1, 4, 8, 8))
    onnx.checker.check_model(str(f))
    import hase.api as api
    monkeypatch.setattr(api, "cuda_here", lambda: False)
    calls = []
    real = offline_cuda.analyse
    monkeypatch.setattr(offline_cuda, "analyse", lambda *a, **k: calls.append(a) or real(*a, **k))
    cfg = {"pin_dims": {}, "seed": 0}
    r1, how = api.analyse_onnx(f, "cuda", cfg)
    r2, _ = api.analyse_onnx(f, "cuda", cfg)
    assert "offline" in how and len(calls) == 1 and r1["kernels"] == r2["kernels"] and r2["offline"]["claimed"]


def _half_net(path, half: bool):
    """A small float16 (or float32) conv net from torch, with explicit float32 casts around a Softmax as mixed-precision
    models have them."""
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            y = torch.relu(self.c2(y)) + y
            y = self.fc(y.mean((2, 3)))
            return y.float().softmax(-1).to(x.dtype)

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 3, 16, 16)
    if half:
        net, x = net.half(), x.half()
    torch.onnx.export(net, x, str(path), opset_version=17, dynamo=False)


def test_a_float16_model_gets_the_cuda_eps_kernels_not_the_cpu_eps_casts(tmp_path, monkeypatch):
    """The CPU EP runs float16 nodes it has no kernel for through float32 copies (Casts named
    InsertedPrecisionFreeCast_...); the CUDA EP runs them in float16. The offline record takes those Casts out: the
    same kernels as the float32 twin, in float16 (half the bytes), the model's own Casts kept, and a prediction that
    names both what the analysis assumed and that the predictor never trained on float16."""
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from hase.ort_analysis import offline_cuda
    f16, f32 = tmp_path / "half.onnx", tmp_path / "single.onnx"
    _half_net(f16, True)
    _half_net(f32, False)
    r16, r32 = offline_cuda.analyse(f16), offline_cuda.analyse(f32)
    assert r16["offline"]["cpu_casts_removed"] > 0 and r32["offline"]["cpu_casts_removed"] == 0
    names = [e["name"] for k in r16["kernels"] for e in k["inputs"] + k["outputs"] if e] + [k["node_name"] for k in
                                                                                            r16["kernels"]]
    assert not any(n.startswith(offline_cuda.CPU_CAST_PREFIX) for n in names)
    t16 = sorted(k["type"] for k in r16["kernels"] if k["op_type"] != "Cast")
    assert t16 == sorted(k["type"] for k in r32["kernels"] if k["op_type"] != "Cast")
    own_casts = [k for k in r16["kernels"] if k["op_type"] == "Cast"]
    assert own_casts and all(not k["node_name"].startswith(offline_cuda.CPU_CAST_PREFIX) for k in own_casts)
    conv16 = [k for k in r16["kernels"] if k["op_type"] == "Conv"]
    conv32 = [k for k in r32["kernels"] if k["op_type"] == "Conv"]
    assert {e["dtype"] for k in conv16 for e in k["inputs"] + k["outputs"] if e} == {"float16"}
    assert [k["weight_shapes"] for k in conv16] == [k["weight_shapes"] for k in conv32]
    for a, b in zip(conv16, conv32):
        assert a["bytes_read"] * 2 == b["bytes_read"] and a["bytes_written"] * 2 == b["bytes_written"]
    casts32 = [k for k in r32["kernels"] if k["op_type"] == "Cast"]   # the model's own Casts, both kept in float16
    assert len(r16["edges"]) - len(r32["edges"]) == len(own_casts) - len(casts32)
    sm = [k for k in r16["kernels"] if k["op_type"] == "Softmax"]       # the float32 island between them
    assert len(sm) == 1 and {e["dtype"] for e in sm[0]["inputs"] + sm[0]["outputs"] if e} == {"float32"}
    assert not r16["offline"]["claimed"] and "float16" in r16["offline"]["unclaimed_because"][0]
    from hase.inference.node_model import precision_risk
    assert "float16" in precision_risk(r16["kernels"]) and precision_risk(r32["kernels"]) == ""
    import hase
    p = hase.load_predictor("nvidia-h200")
    w16, w32 = p.predict(r16).warnings, p.predict(r32).warnings
    assert any("float16" in w and "float16 term" in w for w in w16)   # priced by inference/precision.py, named
    assert any("not claimed" in w for w in w16) and not any("float16" in w for w in w32)


def test_a_pure_float16_model_is_analysed_as_its_float32_copy(tmp_path, monkeypatch):
    """A model in float16 throughout: the CPU EP would leave its float16 Gelu, LayerNorm + Add and Softmax unfused or
    inlined; its float32 copy is rewritten as the float32 model is (float16 constants that are the rounding of a
    constant ORT's fusions test, such as sqrt 2, taken as that constant, as ORT does for float16), and every float
    tensor is float16 again: the float32 twin's kernels, half its bytes."""
    import torch
    import torch.nn as nn
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from hase.ort_analysis import offline_cuda
    class Block(nn.Module):   # pre-norm attention + GELU MLP with fixed shapes (no Shape/Cast: float16 throughout)
        def __init__(self, d=64, h=4):
            super().__init__()
            self.h, self.d = h, d
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

        def forward(self, x):
            b, t = 2, 16
            q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.h, self.d // self.h).permute(2, 0, 3, 1, 4)
            a = torch.softmax(q @ k.transpose(-1, -2) * (self.d // self.h) ** -0.5, dim=-1)
            x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, self.d))
            return x + self.mlp(self.ln2(x))
    torch.manual_seed(0)
    layer = nn.Sequential(Block(), Block()).eval()
    x = torch.randn(2, 16, 64)
    f32, f16 = tmp_path / "enc.onnx", tmp_path / "enc16.onnx"
    import copy
    for net, inp, f in ((layer, x, f32), (copy.deepcopy(layer).half(), x.half(), f16)):
        torch.onnx.export(net, (inp,), str(f), opset_version=17, dynamo=False)
    r32, r16 = offline_cuda.analyse(f32), offline_cuda.analyse(f16)
    t32 = sorted(k["type"] for k in r32["kernels"])
    assert "Gelu" in t32 and sorted(k["type"] for k in r16["kernels"]) == t32
    assert r16["offline"]["analysed_as"].startswith("its float32 copy") and r16["model"] == "enc16"
    assert {e["dtype"] for k in r16["kernels"] for e in k["inputs"] + k["outputs"]
            if e and e["dtype"].startswith("float")} == {"float16"}
    assert sum(k["bytes_read"] for k in r16["kernels"]) * 2 == pytest.approx(
        sum(k["bytes_read"] for k in r32["kernels"]), rel=0.05)
    assert not r16["offline"]["claimed"] and any("float32 copy" in w for w in r16["offline"]["unclaimed_because"])
    assert offline_cuda.pure_float16(offline_cuda.load_model(f16, load_weights=False))
    assert not offline_cuda.pure_float16(offline_cuda.load_model(f32, load_weights=False))


def test_a_mixed_float16_model_gets_the_cuda_eps_fusions_and_keeps_its_float32_island(tmp_path, monkeypatch):
    """A float16 model with a float32 island between Casts of its own: the CPU EP alone would inline its float16
    Softmax and leave its float16 Gelu (erf) apart. Analysed as the float32 copy of its level-1 graph, it gets the
    CUDA EP's Softmax and Gelu kernels in float16, while the island stays float32 behind the model's own Casts."""
    import torch
    import torch.nn as nn
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from hase.ort_analysis import offline_cuda

    class Mixed(nn.Module):
        def __init__(self, d=32):
            super().__init__()
            self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

        def forward(self, x):
            h = torch.softmax(self.a(x), dim=-1)
            s = (h.float() * 3.0 + 1.0).to(h.dtype)     # the float32 island
            return nn.functional.gelu(self.b(s))        # erf form

    torch.manual_seed(0)
    f16 = tmp_path / "mixed16.onnx"
    torch.onnx.export(Mixed().eval().half(), (torch.randn(4, 8, 32).half(),), str(f16), opset_version=17, dynamo=False)
    orig = offline_cuda.load_model(f16, load_weights=False)
    assert offline_cuda.mixed_float16(orig) and not offline_cuda.pure_float16(orig)
    dtypes = offline_cuda.model_dtypes(orig)
    island = {n.name for n in orig.graph.node if n.op_type not in ("Cast", "Constant")
              and dtypes.get(n.output[0]) == "float32"}
    assert len(island) == 2   # Mul, Add

    r = offline_cuda.analyse(f16)
    types = [k["type"] for k in r["kernels"]]
    for fused in ("Softmax", "Gelu"):
        ks = [k for k in r["kernels"] if k["type"] == fused]
        assert len(ks) == 1 and {e["dtype"] for e in ks[0]["inputs"] + ks[0]["outputs"] if e} == {"float16"}
    assert not {"Erf", "Exp", "ReduceMax", "ReduceSum"} & set(types)
    isl = [k for k in r["kernels"] if k["node_name"] in island]
    assert len(isl) == len(island) and {e["dtype"] for k in isl for e in k["inputs"] + k["outputs"] if e} == {"float32"}
    casts = [k for k in r["kernels"] if k["op_type"] == "Cast"]
    assert sorted((k["inputs"][0]["dtype"], k["outputs"][0]["dtype"]) for k in casts) == [
        ("float16", "float32"), ("float32", "float16")]
    assert not any(k["node_name"].startswith(offline_cuda.CPU_CAST_PREFIX) for k in r["kernels"])
    assert not r["offline"]["claimed"] and "mixed float16" in r["offline"]["unclaimed_because"][0]
    # the CPU EP's own rewrite of the float16 model (the road before) inlines Softmax and leaves Gelu apart
    before = offline_cuda._analyse(f16, orig, None, 0, 64, None)
    assert not {"Gelu", "Softmax"} & {k["type"] for k in before["kernels"]}
