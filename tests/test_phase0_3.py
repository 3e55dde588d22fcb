"""Phases 0-3 on ORT's CPU EP with real exports, real sessions and small configs (batch 1, 64x64)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parent.parent

from hase.utils.config import resolve  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402
from hase.utils.kernel_registry import canonical_type  # noqa: E402
from hase.utils.ort_session import cuda_probe, resolve_device  # noqa: E402
from helpers import build_residual_model, optimized_model_too_big, run_script  # noqa: E402


def run(script, *args, home, check=True):
    return run_script([REPO / script, *args], home, check)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """Phases 1-3 for resnet18 and resnet34 at batch 1, 64x64, on CPU EP."""
    h = tmp_path_factory.mktemp("hase")
    small = ["--device", "cpu", "--set", "batch_sizes=[1]", "--set", "resolutions=[64]"]
    run("model_zoo/torchvision_exporter.py", *small, "--set", "models=[resnet18,resnet34]", home=h)
    run("ort_analysis/fusion_detector.py", "--device", "cpu", home=h)
    run("kernel_model/kernel_builder.py", "--device", "cpu", home=h)
    return h


def records(home):
    return {p.name.split(".")[0]: json.loads(p.read_text())
            for p in (home / "ort_analysis" / "ort_kernel_record").glob("*.cpu.json")}


# ---------- frame ----------
def test_config_order_and_unknown_keys(tmp_path):
    d = {"a": 1, "nested": {"b": 2, "c": [1]}, "device": "auto"}
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text("a: 5\nnested: {b: 7}\n")
    cfg = resolve(d, cfg_file, ["nested.c=[3, 4]", "a=9"], "cpu")
    assert cfg == {"a": 9, "nested": {"b": 7, "c": [3, 4]}, "device": "cpu"}
    with pytest.raises(HaseError, match="unknown config key 'nested.zz'"):
        resolve(d, cfg_file, ["nested.zz=1"])
    cfg_file.write_text("bogus: 1\n")
    with pytest.raises(HaseError, match="config.yaml: unknown config key 'bogus'"):
        resolve(d, cfg_file)


def test_device_resolution():
    assert resolve_device("cpu") == "cpu"
    ok, why = cuda_probe()
    if ok:
        assert resolve_device("auto") == "cuda"
    else:  # no GPU here: auto falls back, an explicit cuda request is an error
        assert resolve_device("auto") == "cpu"
        with pytest.raises(HaseError, match="--device cuda cannot run"):
            resolve_device("cuda")


def test_registry_names_from_fused_chain():
    assert canonical_type("FusedConv", {"activation": "Relu"}, has_sum=True) == "Conv_Add_Relu"
    assert canonical_type("Conv", {"activation": "Relu"}) == "Conv_Relu"  # nchwc Conv
    assert canonical_type("Conv", {}) == "Conv"
    assert canonical_type("FusedGemm", {"activation": "Relu"}) == "Gemm_Relu"
    assert canonical_type("SkipLayerNormalization", {}) == "SkipLayerNormalization"


def test_every_phase_has_help_device_set():
    for script in ["model_zoo/torchvision_exporter.py", "ort_analysis/ort_graph_parser.py",
                   "ort_analysis/fusion_detector.py", "kernel_model/kernel_builder.py"]:
        out = subprocess.run([sys.executable, str(REPO / script), "--help"], capture_output=True, text=True).stdout
        assert "--device" in out and "--set" in out, script


# ---------- phase 1 ----------
def test_export_and_validation(home):
    models = home / "model_zoo" / "models"
    for m in ["resnet18", "resnet34"]:
        assert (models / f"{m}_bs1_64x64.onnx").exists()
        assert (models / f"{m}_bs1_64x64.opt.cpu.onnx").exists()
    man = json.loads((models / "manifest.json").read_text())
    v = man["files"]["resnet18_bs1_64x64.onnx"]["validated"]["cpu"]
    assert v["relative_error"] <= v["tolerance"] and v["provenance"]["ort_version"] == ort.__version__
    assert (models / "resolved_config.json").exists()
    sess = ort.InferenceSession(str(models / "resnet18_bs1_64x64.onnx"), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"input": np.zeros((1, 3, 64, 64), np.float32)})[0].shape == (1, 1000)


def test_unknown_model_name(tmp_path):
    p = run("model_zoo/torchvision_exporter.py", "--device", "cpu", "--set", "models=[resnet_nope]",
            home=tmp_path, check=False)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "unknown model name 'resnet_nope'" in p.stderr


def test_unknown_config_key_cli(tmp_path):
    p = run("model_zoo/torchvision_exporter.py", "--device", "cpu", "--set", "batchsize=[1]",
            home=tmp_path, check=False)
    assert p.returncode == 2 and "unknown config key 'batchsize'" in p.stderr


# ---------- phase 2 ----------
def test_graph_parser_prints_nodes(home):
    p = run("ort_analysis/ort_graph_parser.py", "--device", "cpu", "--model",
            str(home / "model_zoo" / "models" / "resnet18_bs1_64x64.onnx"), home=home)
    lines = [ln for ln in p.stdout.splitlines() if not ln.startswith("#")]
    assert len(lines) >= 20
    assert any("Conv" in ln and "1x3x64x64" in ln and "1x64x32x32" in ln for ln in lines)


def test_an_optimized_graph_too_big_for_one_protobuf_keeps_its_initializers_beside_it(tmp_path, monkeypatch):
    """ORT cannot save an optimized graph over 2 GB as one protobuf (mvitv2_tiny at batch 32: 3.66 GB): the session
    is made again with its initializers in '<final>.data', and the graph parses as it does inline: a weight's shape
    and dtype from its proto (its data never read), a small constant's value from the data file."""
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    from hase.ort_analysis.ort_graph_parser import optimize, parse_graph
    f = tmp_path / "m.onnx"
    build_residual_model(f, "m", channels=64, blocks=2, hw=8)   # a conv weight of 147 kB, biases of 256 B

    def unnamed(parsed):  # ORT names its inserted ReorderOutput nodes in no fixed order, inline or not
        return dict(parsed, nodes=[dict(n, name=None) for n in parsed["nodes"]])
    opt, info = optimize(f, "cpu")
    inline = unnamed(parse_graph(opt, info))
    roles = {e["role"] for n in inline["nodes"] for e in n["inputs"] if e}
    assert {"weight", "const"} <= roles and not list(opt.parent.glob("*.data")), roles
    calls = optimized_model_too_big(monkeypatch, min_bytes=0)   # every initializer in the data file
    opt2, info2 = optimize(f, "cpu")
    assert calls == [None, "m.opt.cpu.onnx.data"] and opt2 == opt   # one retry, the data file named after the final
    assert sorted(p.name for p in opt.parent.iterdir()) == ["m.opt.cpu.onnx", "m.opt.cpu.onnx.data"]
    stored = onnx.load(str(opt), load_external_data=False).graph.initializer
    assert stored and all(t.data_location == TensorProto.EXTERNAL for t in stored)
    assert unnamed(parse_graph(opt2, info2)) == inline
    optimized_model_too_big(monkeypatch)   # the weights only: parsing never reads them
    opt3, info3 = optimize(f, "cpu")
    (opt3.parent / "m.opt.cpu.onnx.data").unlink()
    assert unnamed(parse_graph(opt3, info3)) == inline


def test_records_fields_and_shared_types(home):
    recs = records(home)
    r18, r34 = recs["resnet18_bs1_64x64"], recs["resnet34_bs1_64x64"]
    k = r18["kernels"][0]
    for field in ["id", "type", "attributes", "inputs", "outputs", "weight_shapes", "flops", "bytes_read",
                  "bytes_written", "source_nodes", "ep", "signature"]:
        assert field in k
    assert k["id"] == f"{k['type']}#0" and k["ep"] == "CPUExecutionProvider"
    # first conv: 64x3x7x7 stride 2 on 1x3x64x64 -> 1x64x32x32
    assert k["inputs"][0]["shape"] == [1, 3, 64, 64] and k["outputs"][0]["shape"] == [1, 64, 32, 32]
    assert k["attributes"]["strides"] == [2, 2] and k["attributes"]["kernel_shape"] == [7, 7]
    macs = 64 * 32 * 32 * 3 * 7 * 7
    assert 2 * macs <= k["flops"] <= 2 * macs + 4 * 64 * 32 * 32
    assert k["bytes_written"] == 64 * 32 * 32 * 4
    # the same fusion gets the same type name in both models
    shared = set(r18["type_counts"]) & set(r34["type_counts"])
    conv_types = {t for t in shared if t.startswith("Conv")}
    assert conv_types, (r18["type_counts"], r34["type_counts"])
    assert r18["type_counts"] .keys() == r34["type_counts"].keys()
    # edges connect existing kernels, and every kernel but the first has a producer
    ids = {k["id"] for k in r18["kernels"]}
    assert all(e["src"] in ids and e["dst"] in ids for e in r18["edges"])
    assert len({e["dst"] for e in r18["edges"]}) == len(ids) - 1
    # ORT's fusions are detected from the graphs, e.g. Conv+Add+Relu on CPU's NCHWc path
    fused = [f for f in r18["fusions"] if f["sources"] == ["Conv", "Add", "Relu"]]
    if "Conv_Add_Relu" in r18["type_counts"]:
        assert len(fused) == r18["type_counts"]["Conv_Add_Relu"]


# ---------- phase 3 ----------
def test_kernel_models_built_once_and_run(home):
    kdir = home / "kernel_model" / "kernel_onnx"
    index = json.loads((kdir / "index.json").read_text())["kernels"]
    recs = records(home)
    n_inst = sum(len(r["kernels"]) for r in recs.values())
    assert len(index) < n_inst  # resnet18 and resnet34 share kernels
    shared = [e for e in index.values() if {i.split(":")[0] for i in e["instances"]} ==
              {"resnet18_bs1_64x64", "resnet34_bs1_64x64"}]
    assert shared
    for name, e in list(index.items())[:10]:
        path = kdir / name
        assert path.exists() and name.startswith(e["type"] + "_") and e["verified"]
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {i.name: np.random.rand(*i.shape).astype(np.float32) for i in sess.get_inputs()}
        out = sess.run(None, feed)
        assert list(out[0].shape) == e["outputs"][0]["shape"]


def test_kernel_build_function_from_record(home, tmp_path):
    from hase.kernel_model.kernel_builder import kernel_build
    rec = records(home)["resnet18_bs1_64x64"]
    idx = kernel_build(rec, out_dir=tmp_path)  # the plan's call: device and settings from the record/defaults
    assert len(idx["kernels"]) == len({k["signature"] + k["type"] for k in rec["kernels"]})
    assert all((tmp_path / f).exists() for f in idx["kernels"]) and all(e["verified"] for e in idx["kernels"].values())
    first = onnx.load(str(tmp_path / next(iter(idx["kernels"]))))
    props = {p.key: p.value for p in first.metadata_props}
    assert props["hase.ep"] == "CPUExecutionProvider" and props["hase.ort_version"] == ort.__version__


# ---------- bad input ----------
def _one_line_error(p, *needles):
    assert p.returncode == 2, p.stderr
    msg = p.stderr.strip().splitlines()[-1]  # progress bars may precede it; the error is one line
    assert msg.startswith("error:"), p.stderr
    for n in needles:
        assert n in msg, msg


def test_corrupt_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf at all")
    p = run("ort_analysis/fusion_detector.py", "--device", "cpu", "--model", str(bad), home=tmp_path, check=False)
    _one_line_error(p, str(bad), "ONNX")
    assert not list((tmp_path / "ort_analysis" / "ort_kernel_record").glob("*.json"))


def test_a_bad_model_in_a_list_costs_only_its_own_record(tmp_path):
    """A GPU worker's list lost 14 records to one model ORT could not load: the list goes on past it, the summary
    has the good ones, and the exit status (one line) names the failures."""
    bad, good = tmp_path / "bad.onnx", tmp_path / "good.onnx"
    bad.write_bytes(b"this is not a protobuf at all")
    build_residual_model(good, "good", channels=4, blocks=1, hw=8)
    p = run("ort_analysis/fusion_detector.py", "--device", "cpu", "--model", str(bad), "--model", str(good),
            home=tmp_path, check=False)
    rec_dir = tmp_path / "ort_analysis" / "ort_kernel_record"
    assert json.loads((rec_dir / "good.cpu.json").read_text())["kernel_count"] >= 1, p.stderr
    assert list(json.loads((rec_dir / "summary_cpu.json").read_text())["models"]) == ["good"]
    assert not (rec_dir / "bad.cpu.json").exists()
    assert any(str(bad) in ln and "ONNX" in ln for ln in p.stderr.splitlines()[:-1]), p.stderr  # the cause, once
    _one_line_error(p, "1 of 2 models failed", "bad.onnx")
    assert "good.onnx" not in p.stderr.strip().splitlines()[-1]


def _relu_model(path, dims, op="Relu", domain=""):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    node = helper.make_node(op, ["x"], ["y"], domain=domain)
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=imports)
    m.ir_version = 8
    onnx.save(m, str(path))


def test_dynamic_dims_need_pinning(tmp_path):
    f = tmp_path / "dyn.onnx"
    _relu_model(f, ["batch", 8])
    p = run("ort_analysis/fusion_detector.py", "--device", "cpu", "--model", str(f), home=tmp_path, check=False)
    _one_line_error(p, str(f), "dynamic", "pin_dims.batch")
    p = run("ort_analysis/fusion_detector.py", "--device", "cpu", "--model", str(f), "--set", "pin_dims={batch: 4}",
            home=tmp_path)
    rec = json.loads((tmp_path / "ort_analysis" / "ort_kernel_record" / "dyn.cpu.json").read_text())
    assert rec["kernels"][0]["inputs"][0]["shape"] == [4, 8]


def test_op_the_ep_cannot_run(tmp_path):
    f = tmp_path / "custom.onnx"
    _relu_model(f, [2, 8], op="NoSuchOp", domain="com.example")
    p = run("ort_analysis/fusion_detector.py", "--device", "cpu", "--model", str(f), home=tmp_path, check=False)
    _one_line_error(p, str(f), "ORT cannot")


# ---------- the zoo the plan names ----------
PLAN_ZOO = ["resnet18", "resnet34", "resnet50", "mobilenet_v2", "vgg11", "densenet121", "efficientnet_b0",
            "vit_b_16"]


def test_plan_zoo_exports_and_passes_phases_2_3(tmp_path):
    """Every model the plan names exports, validates against PyTorch, is analysed, and each of its
    kernels builds and runs as its own model (CPU EP, batch 1, 64x64)."""
    small = ["--device", "cpu", "--set", "batch_sizes=[1]", "--set", "resolutions=[64]"]
    run("model_zoo/torchvision_exporter.py", *small, "--set", f"models=[{','.join(PLAN_ZOO)}]", home=tmp_path)
    run("ort_analysis/fusion_detector.py", "--device", "cpu", home=tmp_path)
    run("kernel_model/kernel_builder.py", "--device", "cpu", home=tmp_path)
    manifest = json.loads((tmp_path / "model_zoo" / "models" / "manifest.json").read_text())["files"]
    recs = records(tmp_path)
    index = json.loads((tmp_path / "kernel_model" / "kernel_onnx" / "index.json").read_text())["kernels"]
    built = {i for e in index.values() if e["verified"] for i in e["instances"]}
    for m in PLAN_ZOO:
        stem = f"{m}_bs1_64x64"
        assert manifest[stem + ".onnx"]["validated"]["cpu"]["relative_error"] <= 1e-3
        rec = recs[stem]
        assert rec["kernel_count"] > 0 and all(k["ep"] == "CPUExecutionProvider" for k in rec["kernels"])
        assert all(k["type"] for k in rec["kernels"])
        missing = [k["id"] for k in rec["kernels"] if f"{stem}:{k['id']}" not in built]
        assert not missing, (stem, missing[:5])
        # every original node is accounted for: fused into a kernel, folded, or a folded constant
        assert sum(len(k["source_nodes"]) for k in rec["kernels"]) <= rec["original_node_count"]
        # the original nodes are shared out sensibly: a kernel that computes has sources; only
        # reshape-like and layout nodes may be ORT's own; no pooling, concat or elementwise kernel
        # swallows a conv or a matrix product, and no original node goes to two kernels
        for k in rec["kernels"]:
            ops = [s["op_type"] for s in k["source_nodes"]]
            if not ops:
                assert k["category"] in ("shape", "copy"), (stem, k["id"], k["node_name"])
            if k["category"] not in ("conv", "gemm", "attention"):
                assert not {"Conv", "MatMul", "Gemm"} & set(ops), (stem, k["id"], ops)
            if k["category"] == "conv":
                assert {"Conv", "BatchNormalization"} & set(ops), (stem, k["id"], ops)
        names = [s["name"] for k in rec["kernels"] for s in k["source_nodes"]]
        assert len(names) == len(set(names)), stem
    summary = json.loads((tmp_path / "ort_analysis" / "ort_kernel_record" / "summary_cpu.json").read_text())
    assert set(summary["models"]) == {f"{m}_bs1_64x64" for m in PLAN_ZOO}
    s18 = summary["models"]["resnet18_bs1_64x64"]
    assert s18["type_counts"] == recs["resnet18_bs1_64x64"]["type_counts"]
    assert s18["ort_vs_torch_relative_error"] <= 1e-3
    assert sum(sum(c.values()) for c in s18["source_chains"].values()) == s18["kernels"]
    # what ORT fused is read from the graphs: erf-GELU (ViT) and sigmoid*x (EfficientNet's SiLU)
    # each become one kernel; ViT's MatMul+Add on 3-D input becomes one Gemm between two reshapes
    vit = recs["vit_b_16_bs1_64x64"]
    gemm_chains = summary["models"]["vit_b_16_bs1_64x64"]["source_chains"]["Gemm"]
    assert gemm_chains.get("MatMul+Add", 0) >= 12, gemm_chains
    gelu = [f["sources"] for f in vit["fusions"] if f["kernel"].startswith("Gelu#")]
    assert gelu and all("Erf" in s for s in gelu)
    eff = recs["efficientnet_b0_bs1_64x64"]
    silu = [f["sources"] for f in eff["fusions"] if f["kernel"].startswith("QuickGelu#")]
    assert silu and all(sorted(s) == ["Mul", "Sigmoid"] for s in silu)


# ---- progress in logs (utils/progress.py) -----------------------------------------------------------
class FakeClock:
    """Deterministic time for the every-N-seconds rule (no sleeping, no wall clock)."""
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_in_a_log_writes_a_line_per_10_percent():
    import io
    from hase.utils.progress import LogProgress, progress
    out = io.StringIO()  # not a TTY, like the main job's log
    bar = progress(range(200), desc="collect", unit="item", stream=out, clock=FakeClock())
    assert isinstance(bar, LogProgress)
    assert sum(1 for _ in bar) == 200
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 10
    assert lines[0] == "collect: 20/200 item (10%) in 0 s, eta 0 s" and lines[-1].startswith("collect: 200/200 item (100%)")


def test_progress_in_a_log_every_few_seconds_and_at_the_end():
    import io
    from hase.utils.progress import progress
    out, clock = io.StringIO(), FakeClock()
    with progress(total=1000, desc="collect", unit="item", stream=out, every_s=30, clock=clock) as bar:
        for i in range(25):          # 2.5% in 125 s: no 10% step, but a line every 30 s
            clock.t += 5.0
            bar.set_postfix_str("stressor-matmul@0.6")
            bar.update(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 + 1, lines   # at 30, 60, 90, 120 s, and the last one on close
    assert lines[0] == "collect: 6/1000 item (1%) in 30 s, eta 4970 s [stressor-matmul@0.6]"
    assert lines[-1].startswith("collect: 25/1000 item (2%) in 125 s")
    gen = progress((x for x in range(3)), desc="export", stream=io.StringIO(), clock=clock)  # unknown length
    assert list(gen) == [0, 1, 2] and gen.line() == "export: 3 it in 0 s"


def test_progress_on_a_terminal_is_tqdm():
    import io
    from tqdm import tqdm
    from hase.utils.progress import progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    bar = progress(range(3), desc="build", stream=Tty())
    assert isinstance(bar, tqdm) and list(bar) == [0, 1, 2]
