"""The float16 GPU-time term (inference/precision.py): its algebra, and what it does to a real CUDA-EP record of a
float16 model (the float16 twin of resnet50 at batch 32, recorded on an H100: corpus_records.machine_k shard)."""
from pathlib import Path

import numpy as np
import pytest

from hase.inference import precision

REPO = Path(__file__).resolve().parent.parent
TERM = {"classes": {"conv": {"floor_us": 10.0, "ratio": 0.5}, "gemm": {"floor_us": 2.0, "ratio": 0.5},
                    "mem": {"floor_us": 2.0, "ratio": 0.75}}}


def _k(op, dtype="float16", br=1000.0, bw=500.0):
    e = {"name": "x", "dtype": dtype, "shape": [1, 8], "role": "activation"}
    return {"id": op, "op_type": op, "type": op, "inputs": [e], "outputs": [dict(e, name="y")],
            "bytes_read": br, "bytes_written": bw}


def test_the_term_takes_float16_time_above_the_floor_only():
    ks = [_k("Conv"), _k("Conv"), _k("MatMul"), _k("Relu"), _k("Relu", "float32"), _k("Cast")]
    ks[5]["outputs"][0]["dtype"] = "float32"           # a Cast float16 -> float32: not a float16 node
    viewed, mask = precision.views(ks)
    assert mask.tolist() == [True, True, True, True, False, False]
    g = precision.apply(ks, [30.0, 6.0, 10.0, 10.0, 10.0, 10.0], mask, TERM)
    # conv above its floor: 10 + 20 * 0.5; below it: as priced; gemm 2 + 8 * 0.5; mem 2 + 8 * 0.75; others as priced
    assert g.tolist() == [20.0, 6.0, 6.0, 8.0, 10.0, 10.0]
    v = viewed[0]
    assert v["bytes_read"] == 2000.0 and v["bytes_written"] == 1000.0
    assert {e["dtype"] for e in v["inputs"] + v["outputs"]} == {"float32"}
    assert ks[0]["bytes_read"] == 1000.0 and ks[0]["inputs"][0]["dtype"] == "float16"   # the record is not touched
    assert precision.views([_k("Relu", "float32")])[1] is None


def test_a_term_file_without_a_class_is_one_line(tmp_path):
    from hase.utils.errors import HaseError
    f = tmp_path / "t.json"
    f.write_text('{"classes": {"conv": {}, "gemm": {}}}')
    with pytest.raises(HaseError, match="classes.mem missing"):
        precision.load_term(f)
    assert precision.load_term(tmp_path / "none.json") is None


def test_the_committed_term_is_physical_and_found_for_both_gpus():
    t = precision.load_term(precision.term_path("nvidia-h200"))    # no H200 twins yet: the H100's
    assert t is not None and "nvidia-h100" in t["path"]
    for c in ("conv", "gemm", "mem"):
        assert 0.0 <= t["classes"][c]["floor_us"] <= 20.0 and 0.3 <= t["classes"][c]["ratio"] <= 1.0


@pytest.fixture(scope="module")
def h100():
    from helpers import corpus_records
    from hase.inference import timeline_model as tm
    from hase.training.train_kernel_model import load_predictor
    recs = corpus_records(["resnet50-fp16_bs32_224x224", "resnet50_bs32_224x224"])
    model = tm.load(REPO / "inference/results/nvidia-h100/corpus/timeline_model.json")
    return recs, model, load_predictor(REPO / model["predictor_dir"])


def test_a_float16_record_is_priced_by_the_term_and_says_so(h100, monkeypatch):
    from hase.inference.runtime import prepare_record
    recs, model, pred = h100
    r16, r32 = recs["resnet50-fp16_bs32_224x224"], recs["resnet50_bs32_224x224"]
    with_term = prepare_record(r16, pred, model)
    plain32 = prepare_record(r32, pred, model)
    monkeypatch.setattr(precision, "term_path", lambda slug="", root=None: Path("/nonexistent/term.json"))
    without = prepare_record(r16, pred, model)
    again32 = prepare_record(r32, pred, model)
    # a float32 record is untouched by the term; the float16 one costs less GPU time than the trees alone price it
    assert again32["kernel_ms"] == plain32["kernel_ms"]
    s16, s0, s32 = with_term["standalone_sum_ms"], without["standalone_sum_ms"], plain32["standalone_sum_ms"]
    assert s16 < s0 and s16 < s32
    assert any("float16 term" in r and "not yet checked on another GPU" in r for r in with_term["risks"])
    assert any("has not been measured" in r for r in without["risks"])
    assert np.isfinite(s16) and s16 > 0.3 * s32          # the term's ratios are bounded below by 0.3


def test_the_warning_counts_the_nodes_the_term_priced_and_trees_that_know_float16_are_left_alone(h100):
    """The float16 line counted the model's Casts (float16 in, float32 out) as priced by the term; and a node model
    whose manifest says it was trained on float16 would have been corrected twice."""
    from hase.inference.node_model import precision_risk
    from hase.inference.runtime import prepare_record
    cast = _k("Cast")
    cast["outputs"][0]["dtype"] = "float32"
    line = precision_risk([_k("Conv"), cast, _k("Relu", "float32")], ("float32",), dict(TERM, path="t.json"))
    assert line.startswith("1 of 3 kernels compute in float16")
    recs, model, pred = h100
    r16 = recs["resnet50-fp16_bs32_224x224"]
    priced = prepare_record(r16, pred, model)["standalone_sum_ms"]
    knows = type(pred).__new__(type(pred))
    knows.__dict__.update(pred.__dict__, manifest=dict(pred.manifest, float_dtypes=["float16", "float32"]))
    as_is = prepare_record(r16, knows, model)
    assert as_is["standalone_sum_ms"] > priced and not any("float16 term" in r for r in as_is["risks"])
