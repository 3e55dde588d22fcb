"""Kernel space (issue 13), CPU EP: the sampler (kernel_model/kernel_sampler.py) and the packed
multi-kernel runner (benchmark/multi_kernel_runner.py)."""
import copy
import json
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kernel_model import kernel_sampler as ks  # noqa: E402
from kernel_model.kernel_builder import kernel_id, kernel_to_onnx, verify  # noqa: E402
from training.features import feature_frame  # noqa: E402
from utils.errors import HaseError  # noqa: E402
from utils.kernel_registry import base_of, is_known  # noqa: E402
from helpers import run_script  # noqa: E402

SMALL = {"max_elems": 2.0e5, "max_flops": 5.0e7}   # every configuration runs in well under a millisecond


def small_cfg(n=2, seed=0, only=()):
    cfg = copy.deepcopy(ks.DEFAULTS)
    cfg.update({"n_per_type": n, "seed": seed, "only": list(only), "limits": dict(SMALL)})
    return cfg


def one_line_error(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ---------- sampler ----------
def test_sampler_is_seeded_and_reproducible():
    a, b = ks.sample(small_cfg(seed=3), "cpu"), ks.sample(small_cfg(seed=3), "cpu")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    c = ks.sample(small_cfg(seed=4), "cpu")
    assert [kernel_id(k) for k in a] != [kernel_id(k) for k in c]
    # each type has its own stream: sampling a subset gives those types' configurations unchanged
    sub = ks.sample(small_cfg(seed=3, only=["Gemm", "HardSwish"]), "cpu")
    assert [kernel_id(k) for k in sub] == [kernel_id(k) for k in a if base_of(k["type"]) in ("Gemm", "HardSwish")]


def test_every_type_builds_and_runs_on_cpu_and_has_the_record_format(tmp_path):
    big = ks.sample(small_cfg(n=24, seed=1, only=["Mul", "Conv"]), "cpu")   # every conv epilogue of CPU EP
    kernels = (ks.sample(small_cfg(n=2), "cpu") + ks.sample(small_cfg(n=1, seed=1, only=["Conv"]), "cuda")
               + big)
    assert {base_of(k["type"]) for k in kernels} >= set(ks.SPACES)
    keys = {"id", "type", "category", "op_type", "domain", "node_name", "ep", "attributes", "inputs", "outputs",
            "weight_shapes", "flops", "bytes_read", "bytes_written", "source_nodes", "inserted_by_ort",
            "folded_ops", "signature"}   # the keys of a phase 2 record kernel (fusion_detector.build_record)
    for k in kernels:
        assert keys <= set(k) and k["source"] == "sampled" and is_known(k["op_type"])
        path = tmp_path / f"{kernel_id(k)}.onnx"
        onnx.save(kernel_to_onnx(k, ks.OPSETS), str(path))
        res = verify(path, k, "cpu", "disable", 0)   # runs it once; output shapes == recorded ones
        assert res["verified"], k["type"]
    types = {k["type"] for k in kernels}
    assert {"Conv_Relu", "Conv_Add_Relu", "HardSwish", "HardSigmoid", "ReduceMean", "Slice"} <= types
    # squeeze-and-excite broadcast and depthwise convs are in the space
    assert any(k["type"] == "Mul" and k["inputs"][1]["shape"][2:] == [1, 1] for k in big)
    assert any(base_of(k["type"]) == "Conv" and k["attributes"]["group"] == k["inputs"][0]["shape"][1] > 1 for k in big)


def test_sampled_kernels_featurize_like_records():
    kernels = ks.sample(small_cfg(n=2, only=["Conv", "Gemm", "Transpose"]), "cpu")
    f = feature_frame(kernels, [], {})
    assert len(f) == len(kernels) and np.isfinite(f.drop(columns=["kernel_type"]).to_numpy()).all()
    conv = [i for i, k in enumerate(kernels) if base_of(k["type"]) == "Conv"]
    for i in conv:
        k = kernels[i]
        assert f.iloc[i]["groups"] == k["attributes"]["group"] and f.iloc[i]["kernel_h"] == k["attributes"]["kernel_shape"][0]
        assert f.iloc[i]["flops"] == k["flops"] > 0


def test_adaptive_stage_samples_near_the_worst(tmp_path):
    cfg = small_cfg(n=4, only=["Conv", "Gemm"])
    kernels = ks.sample(cfg, "cpu")
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(ks.make_record(kernels, "cpu", cfg, "prior")))
    ids = [kernel_id(k) for k in kernels]
    errs = pd.DataFrame({"Kernel_ID": ids + ["Relu_zoo_kernel"], "ape": [0.01] * len(ids) + [9.0]})
    errs.loc[2, "ape"], errs.loc[5, "ape"] = 3.0, 2.0
    errs.to_csv(tmp_path / "errors.csv", index=False)
    cfg["adaptive"].update({"errors_csv": str(tmp_path / "errors.csv"), "records": [str(rec)], "top_k": 3,
                            "per_config": 3})
    new = ks.adaptive(cfg, "cpu")
    assert new and {k["adaptive_parent"] for k in new} == {ids[2], ids[5]}   # the zoo id has no space: skipped
    assert not set(map(kernel_id, new)) & set(ids)
    parent = {kernel_id(k): k for k in kernels}
    for k in new:
        assert base_of(k["type"]) == base_of(parent[k["adaptive_parent"]]["type"])
    assert [kernel_id(k) for k in ks.adaptive(cfg, "cpu")] == [kernel_id(k) for k in new]


def test_sampler_cli_writes_a_record_kernel_builder_reads(tmp_path):
    home = tmp_path / "h"
    run_script([REPO / "kernel_model/kernel_sampler.py", "--device", "cpu", "--set", "n_per_type=1",
                "--set", "only=[Conv, HardSwish, Resize]", "--set", "types.Conv.count=0",
                "--set", "limits.max_elems=100000", "--set", "limits.max_flops=1.0e+7"], home)
    rec = home / "ort_analysis/ort_kernel_record/sampled/kspace_s0.cpu.json"
    data = json.loads(rec.read_text())
    assert data["source"] == "sampled" and data["kernel_count"] == 3
    run_script([REPO / "kernel_model/kernel_builder.py", "--device", "cpu", "--record", rec], home)
    index = json.loads((home / "kernel_model/kernel_onnx/index.json").read_text())
    assert len(index["kernels"]) == 3 and all(e["verified"] for e in index["kernels"].values())


@pytest.mark.parametrize("setting,needles", [
    ("only=[Frobnicate]", ["only", "Frobnicate"]),
    ("types.Frobnicate={count: 3}", ["types.Frobnicate"]),
    ("types.Gemm.m={min: 10, max: 2}", ["types.Gemm.m", "bad range"]),
    ("types.Conv.kernel=[]", ["types.Conv.kernel"]),
    ("types.Conv.cin=[64, -3]", ["types.Conv.cin"]),
    ("limits.max_flops=0", ["limits.max_flops"]),
])
def test_sampler_bad_input_is_one_line_error(tmp_path, setting, needles):
    p = run_script([REPO / "kernel_model/kernel_sampler.py", "--device", "cpu", "--set", setting], tmp_path,
                   check=False)
    one_line_error(p, *needles)
    assert not (tmp_path / "ort_analysis").exists()   # nothing written


def test_sampler_exhausted_space_names_the_type():
    cfg = small_cfg(n=5, only=["GlobalAveragePool"])
    cfg["types"]["GlobalAveragePool"].update({"batch": [1], "hw": [7], "c": [8, 16]})   # 2 configurations exist
    cfg["max_tries"] = 20
    with pytest.raises(HaseError, match="types.GlobalAveragePool"):
        ks.sample(cfg, "cpu")
