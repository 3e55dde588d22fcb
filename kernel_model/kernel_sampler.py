"""Phase 3 (kernel space): sample kernel configurations beyond the zoo's, as a phase 2 style record.

  python kernel_model/kernel_sampler.py [--device cuda] [--set seed=1] [--set n_per_type=20]
      [--set 'only=[Conv, HardSwish]'] [--set adaptive.errors_csv=errors.csv]

nn-Meter's sampler, for ORT kernels: each kernel type has a prior over the parameters real CNNs and
ViTs use (types.<Type>: a list = uniform choice, {min, max} = log-uniform integer), drawn with a seeded
generator per type (numpy default_rng([seed, crc32(type)]): the same seed gives the same configurations,
adding a type changes no other type's). A draw outside `limits` (elements per tensor, FLOPs) or
impossible (groups that do not divide the channels) is drawn again, at most `max_tries` times.

Each configuration becomes a kernel dict in the SAME format phase 2 records use (op_type, domain,
attributes, inputs with roles activation/weight/const, outputs, flops, bytes, signature), with
`source: sampled` and the drawn parameters under `space`, so kernel_builder.kernel_to_onnx builds it,
training/features.py featurizes it and phase 4 (collector.py or multi_kernel_runner.py) measures it.
Types are the canonical names of utils/kernel_registry.py. The zoo's records are not touched: the sample
is its own record, ort_analysis/ort_kernel_record/sampled/kspace_s<seed>.<ep>.json (outside the folder
phase 3 globs by default; pass it with --record).

Conv epilogues follow what ORT fuses on the EP (`epilogues.<ep>`): on CPU EP FusedConv with an activation
and/or a residual sum (Conv_Relu, Conv_Add, Conv_Add_Relu, ...); on CUDA EP the zoo's records show
Conv, Relu and Add kept apart (README), so plain Conv by default there.

Adaptive second stage (`adaptive.errors_csv`): a CSV with Kernel_ID and an error column (e.g. the
absolute percentage error of a trained predictor on measured kernels); the `top_k` worst configurations
that have a `space` (sampled ones, looked up in `adaptive.records`) each get `per_config` neighbours:
every parameter moves one step in its choice list, or by a factor 0.5-2 in its range, with probability
`adaptive.move_p`. Seeded like the first stage; written as kspace_s<seed>_adaptive.<ep>.json.
"""
import copy
import json
import math
import zlib
from collections import Counter
from pathlib import Path


import numpy as np  # noqa: E402

from hase.ort_analysis.flops import kernel_bytes, kernel_flops  # noqa: E402
from hase.ort_analysis.fusion_detector import signature  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.kernel_registry import canonical_type, instance_id, is_known, spec  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import provenance, resolve_device  # noqa: E402

CONFIG = paths.REPO / "kernel_model" / "sampler.yaml"
OPSETS = {"ai.onnx": 17, "com.microsoft": 1}
F32, I64 = "float32", "int64"
SOURCE = "sampled"

# channel widths of torchvision / timm CNNs and ViTs (stems, MobileNet/EfficientNet expansions, ResNet stages)
CH = [3, 8, 16, 24, 32, 40, 48, 64, 72, 80, 96, 112, 120, 128, 144, 160, 192, 240, 256, 320, 384, 480, 512,
      576, 640, 672, 768, 960, 1024, 1152, 1280, 1536, 2048]
CH_NO3 = [c for c in CH if c != 3]
BATCH = [1, 2, 4, 8, 16, 32, 64]
HW = [7, 14, 28, 56, 112, 224]
TOKENS = [49, 50, 196, 197, 256, 577, 1024]          # ViT / Swin sequence lengths
DIM = [64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 3072]
UNARY = {"layout": ["nchw", "nchw", "tokens"], "batch": BATCH, "hw": HW, "c": CH_NO3, "tokens": TOKENS, "dim": DIM}

SPACES = {
    "Conv": {"batch": BATCH, "hw": HW, "cin": CH, "cout": CH_NO3, "kernel": [1, 1, 3, 3, 5, 7], "stride": [1, 1, 2],
             "dilation": [1, 1, 1, 1, 2], "groups": ["dense", "dense", "depthwise", "grouped"],
             "group_count": [2, 4, 8, 16, 32, 64], "epilogue": ["from_ep"]},
    "Gemm": {"m": {"min": 1, "max": 50176}, "k": DIM + [2048, 4096], "n": DIM + [1000, 2048, 4096], "trans_b": [0, 1]},
    "MatMul": {"mode": ["weight", "batched"], "batch": BATCH, "heads": [1, 3, 4, 6, 8, 12, 16], "m": TOKENS + [64, 512],
               "k": [32, 64, 128] + DIM, "n": TOKENS + DIM},
    "Add": {"mode": ["same", "same", "bias", "se"], **UNARY},
    "Mul": {"mode": ["same", "se", "se", "bias"], **UNARY},
    "Relu": dict(UNARY), "Sigmoid": dict(UNARY), "HardSigmoid": dict(UNARY), "HardSwish": dict(UNARY),
    "Clip": dict(UNARY), "Erf": dict(UNARY), "Tanh": dict(UNARY), "Gelu": dict(UNARY),
    "MaxPool": {"batch": BATCH, "hw": HW, "c": CH_NO3, "kernel": [2, 3, 3], "stride": [1, 2, 2]},
    "AveragePool": {"batch": BATCH, "hw": HW, "c": CH_NO3, "kernel": [2, 3, 3], "stride": [1, 2, 2]},
    "GlobalAveragePool": {"batch": BATCH, "hw": [1, 7, 7, 14, 28, 56], "c": CH_NO3},
    "ReduceMean": {"mode": ["spatial", "last"], **UNARY},
    "Softmax": {"mode": ["attention", "attention", "logits"], "batch": BATCH, "heads": [1, 3, 4, 6, 8, 12, 16],
                "tokens": TOKENS, "classes": [10, 100, 1000]},
    "LayerNormalization": {"batch": BATCH, "tokens": TOKENS + [1], "dim": DIM},
    "Concat": {"inputs": [2, 2, 3, 4], "batch": BATCH, "hw": HW, "c": CH_NO3},
    "Split": {"outputs": [2, 2, 3, 4], "batch": BATCH, "hw": HW, "c": CH_NO3},
    "Slice": {"axis": [1, 2, 3], "keep": [0.25, 0.5, 0.5, 0.75], "step": [1, 1, 2], "batch": BATCH, "hw": HW,
              "c": CH_NO3},
    "Transpose": {"mode": ["nhwc", "nchw", "shuffle", "heads"], "batch": BATCH, "hw": HW, "c": CH_NO3,
                  "groups": [2, 3, 4, 8], "tokens": TOKENS, "heads": [1, 3, 4, 6, 8, 12, 16], "head_dim": [32, 64]},
    "Reshape": {"mode": ["flatten", "tokens", "shuffle"], "batch": BATCH, "hw": HW, "c": CH_NO3, "groups": [2, 3, 4, 8]},
    "Resize": {"mode": ["nearest", "linear"], "scale": [2, 2, 4], "batch": BATCH, "hw": [7, 14, 28, 56], "c": CH_NO3},
    "Pad": {"mode": ["constant", "constant", "reflect"], "pad": [1, 2, 3], "batch": BATCH, "hw": HW, "c": CH_NO3},
}
# what ORT fuses into a conv on each EP (canonical epilogue: '' plain, 'Relu', 'Add', 'Add_Relu', ...)
EPILOGUES = {"cpu": ["", "", "Relu", "Relu", "Add", "Add_Relu", "Clip", "HardSigmoid", "Sigmoid"], "cuda": [""]}
ACT_PARAMS = {"Clip": [0.0, 6.0], "HardSigmoid": [1 / 6, 0.5], "LeakyRelu": [0.01]}

DEFAULTS = {"device": "auto", "seed": 0, "n_per_type": 8, "only": [], "max_tries": 200, "out": "",
            # grouped convs: `free` draws cin and cout apart; `equal` keeps the width, as ResNeXt and RegNet do
            "conv_grouped_io": "free",
            "limits": {"max_elems": 3.0e7, "max_flops": 1.0e11},
            "epilogues": copy.deepcopy(EPILOGUES),
            "types": {t: {"count": 0, **copy.deepcopy(s)} for t, s in SPACES.items()},
            "adaptive": {"errors_csv": "", "error_col": "ape", "records": [], "top_k": 16, "per_config": 4,
                         "move_p": 0.5}}


class Reject(Exception):
    """This draw cannot be built (groups do not divide channels, tensor too large): draw again."""


# ---- the space: validation and draws ---------------------------------------------------------------

def check_space(ktype: str, space: dict) -> None:
    """Every parameter of a type: a non-empty list of choices or {min, max} with 1 <= min <= max."""
    for name, dom in space.items():
        field = f"types.{ktype}.{name}"
        if name == "count":
            if isinstance(dom, bool) or not isinstance(dom, int) or dom < 0:
                raise HaseError(f"{field} must be a whole number >= 0, got {dom!r}")
            continue
        if name not in SPACES[ktype]:
            raise HaseError(f"{field}: unknown parameter (known: {', '.join(SPACES[ktype])})")
        if isinstance(dom, list):
            if not dom:
                raise HaseError(f"{field}: empty list of choices")
            ref = SPACES[ktype][name]
            if not isinstance(ref, list):
                ref = [ref["min"]]
            nums = [x for x in ref if isinstance(x, (int, float))]
            if nums:
                lo = 0 if min(nums) == 0 else 1e-12   # 0 only where the default space has it (trans_b)
                if any(isinstance(x, bool) or not isinstance(x, (int, float)) or x < lo for x in dom):
                    raise HaseError(f"{field}: choices must be numbers {'>= 0' if lo == 0 else '> 0'}, got {dom}")
            elif any(x not in ref for x in dom):
                raise HaseError(f"{field}: unknown choice in {dom} (known: {', '.join(map(str, ref))})")
        elif isinstance(dom, dict):
            lo, hi = dom.get("min"), dom.get("max")
            if set(dom) - {"min", "max"} or not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
                raise HaseError(f"{field}: a range is {{min: int, max: int}}, got {dom}")
            if lo < 1 or lo > hi:
                raise HaseError(f"{field}: bad range min={lo} max={hi} (need 1 <= min <= max)")
        else:
            raise HaseError(f"{field}: a list of choices or {{min, max}}, got {dom!r}")


def validate(cfg: dict) -> list:
    """The types to sample, in a fixed order; every setting checked before anything is drawn."""
    types = cfg["only"] or list(cfg["types"])
    if not isinstance(types, list):
        raise HaseError(f"only: a list of kernel types, got {types!r}")
    for t in types:
        if t not in SPACES:
            raise HaseError(f"only: unknown kernel type '{t}' (sampler types: {', '.join(SPACES)})")
    for t, space in cfg["types"].items():
        check_space(t, space)
    if cfg["conv_grouped_io"] not in ("free", "equal"):
        raise HaseError(f"conv_grouped_io must be free or equal, got {cfg['conv_grouped_io']!r}")
    for k in ("max_elems", "max_flops"):
        v = cfg["limits"][k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise HaseError(f"limits.{k} must be a number > 0, got {v!r}")
    for k in ("n_per_type", "max_tries", "seed"):
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if k == "max_tries" else 0):
            raise HaseError(f"{k} must be a whole number >= {1 if k == 'max_tries' else 0}, got {v!r}")
    for ep, eps in cfg["epilogues"].items():
        for e in eps:
            if e and any(p not in ("Add", "Relu", *ACT_PARAMS, "Sigmoid", "Tanh") for p in e.split("_")):
                raise HaseError(f"epilogues.{ep}: unknown conv epilogue '{e}'")
    return types


def type_rng(seed: int, ktype: str, stage: str = "") -> np.random.Generator:
    """One stream per (seed, type, stage): reproducible, and independent of the other types."""
    return np.random.default_rng([int(seed), zlib.crc32(f"{ktype}{stage}".encode())])


def draw_value(dom, rng):
    if isinstance(dom, dict):  # log-uniform integer in [min, max]
        lo, hi = math.log(dom["min"]), math.log(dom["max"] + 1)
        return int(min(dom["max"], math.floor(math.exp(rng.uniform(lo, hi)))))
    v = dom[int(rng.integers(len(dom)))]
    return v.item() if hasattr(v, "item") else v


def draw(space: dict, rng) -> dict:
    return {k: draw_value(dom, rng) for k, dom in space.items() if k != "count"}


# ---- kernel dicts ----------------------------------------------------------------------------------

def act(shape):
    return {"shape": [int(d) for d in shape], "dtype": F32, "role": "activation"}


def weight(shape):
    return {"shape": [int(d) for d in shape], "dtype": F32, "role": "weight"}


def const(values, dtype=I64, shape=None):
    vals = [int(v) if dtype == I64 else float(v) for v in values]
    return {"shape": list(shape) if shape is not None else [len(vals)], "dtype": dtype, "role": "const", "value": vals}


def unary_shape(p: dict) -> list:
    if p["layout"] == "tokens":
        return [p["batch"], p["tokens"], p["dim"]]
    return [p["batch"], p["c"], p["hw"], p["hw"]]


def pool_out(hw: int, k: int, s: int, pad: int, d: int = 1) -> int:
    out = (hw + 2 * pad - d * (k - 1) - 1) // s + 1
    if out < 1:
        raise Reject("empty output")
    return out


def gen_conv(p: dict, epilogue: str) -> dict:
    n, hw, cin, cout, k, s, d = p["batch"], p["hw"], p["cin"], p["cout"], p["kernel"], p["stride"], p["dilation"]
    if p["groups"] == "depthwise":
        if cin == 3 or k == 1:
            raise Reject("depthwise stem or 1x1 (a per-channel scale, not a conv real models run)")
        g, cout = cin, cin
    elif p["groups"] == "grouped":
        g = p["group_count"]
        if p.get("grouped_io") == "equal":   # ResNeXt / RegNet: the grouped conv keeps its width (cin = cout)
            cout = cin
        if cin % g or cout % g or cin == g:
            raise Reject("groups do not divide the channels")
    else:
        g = 1
    if k == 1:
        d = 1
    pad = d * (k - 1) // 2
    ho = pool_out(hw, k, s, pad, d)
    attrs = {"auto_pad": "NOTSET", "dilations": [d, d], "group": g, "strides": [s, s], "kernel_shape": [k, k],
             "pads": [pad] * 4}
    inputs = [act([n, cin, hw, hw]), weight([cout, cin // g, k, k]), weight([cout])]
    parts = epilogue.split("_") if epilogue else []
    activation = next((x for x in parts if x != "Add"), None)
    if not parts:
        return {"op_type": "Conv", "domain": "ai.onnx", "attributes": attrs, "inputs": inputs,
                "outputs": [act([n, cout, ho, ho])], "has_sum": False}
    if activation:
        attrs["activation"] = activation
        if activation in ACT_PARAMS:
            attrs["activation_params"] = list(ACT_PARAMS[activation])
    if "Add" in parts:
        inputs.append(act([n, cout, ho, ho]))
    return {"op_type": "FusedConv", "domain": "com.microsoft", "attributes": attrs, "inputs": inputs,
            "outputs": [act([n, cout, ho, ho])], "has_sum": "Add" in parts}


def gen_gemm(p: dict) -> dict:
    m, k, n = p["m"], p["k"], p["n"]
    b = [n, k] if p["trans_b"] else [k, n]
    return {"op_type": "Gemm", "domain": "ai.onnx",
            "attributes": {"transA": 0, "alpha": 1.0, "transB": int(p["trans_b"]), "beta": 1.0},
            "inputs": [act([m, k]), weight(b), weight([n])], "outputs": [act([m, n])]}


def gen_matmul(p: dict) -> dict:
    m, k, n = p["m"], p["k"], p["n"]
    if p["mode"] == "batched":   # attention: activations on both sides
        lead = [p["batch"], p["heads"]]
        return {"op_type": "MatMul", "domain": "ai.onnx", "attributes": {},
                "inputs": [act(lead + [m, k]), act(lead + [k, n])], "outputs": [act(lead + [m, n])]}
    return {"op_type": "MatMul", "domain": "ai.onnx", "attributes": {},
            "inputs": [act([p["batch"], m, k]), weight([k, n])], "outputs": [act([p["batch"], m, n])]}


def gen_binary(op: str):
    def gen(p: dict) -> dict:
        x = unary_shape(p)
        mode = p["mode"]
        if mode == "same":
            other = act(x)
        elif mode == "se":   # squeeze-and-excite: NCHW * NC11 (tokens: BSD * B1D)
            other = act([x[0], x[1], 1, 1] if len(x) == 4 else [x[0], 1, x[2]])
        else:                # per-channel bias / scale, a weight
            other = weight([x[1], 1, 1] if len(x) == 4 else [x[2]])
        return {"op_type": op, "domain": "ai.onnx", "attributes": {}, "inputs": [act(x), other], "outputs": [act(x)]}
    return gen


def gen_unary(op: str):
    def gen(p: dict) -> dict:
        x = unary_shape(p)
        attrs, inputs, domain = {}, [act(x)], "ai.onnx"
        if op == "HardSigmoid":
            attrs = {"alpha": 1 / 6, "beta": 0.5}
        elif op == "Clip":  # ReLU6 (opset >= 11: min/max are inputs)
            inputs += [const([0.0], F32, []), const([6.0], F32, [])]
        elif op == "Gelu":
            domain = "com.microsoft"
        return {"op_type": op, "domain": domain, "attributes": attrs, "inputs": inputs, "outputs": [act(x)]}
    return gen


def gen_pool(op: str):
    def gen(p: dict) -> dict:
        n, c, hw, k, s = p["batch"], p["c"], p["hw"], p["kernel"], p["stride"]
        pad = (k - 1) // 2
        ho = pool_out(hw, k, s, pad)
        attrs = {"auto_pad": "NOTSET", "ceil_mode": 0, "kernel_shape": [k, k], "pads": [pad] * 4, "strides": [s, s]}
        if op == "AveragePool":
            attrs["count_include_pad"] = 0
        else:
            attrs.update({"dilations": [1, 1], "storage_order": 0})
        return {"op_type": op, "domain": "ai.onnx", "attributes": attrs, "inputs": [act([n, c, hw, hw])],
                "outputs": [act([n, c, ho, ho])]}
    return gen


def gen_gap(p: dict) -> dict:
    n, c, hw = p["batch"], p["c"], p["hw"]
    return {"op_type": "GlobalAveragePool", "domain": "ai.onnx", "attributes": {},
            "inputs": [act([n, c, hw, hw])], "outputs": [act([n, c, 1, 1])]}


def gen_reduce_mean(p: dict) -> dict:
    x = unary_shape(p) if p["mode"] == "last" else [p["batch"], p["c"], p["hw"], p["hw"]]
    axes = [-1] if p["mode"] == "last" else [2, 3]
    out = x[:-1] + [1] if p["mode"] == "last" else x[:2] + [1, 1]
    return {"op_type": "ReduceMean", "domain": "ai.onnx", "attributes": {"axes": axes, "keepdims": 1},
            "inputs": [act(x)], "outputs": [act(out)]}


def gen_softmax(p: dict) -> dict:
    if p["mode"] == "attention":
        x = [p["batch"], p["heads"], p["tokens"], p["tokens"]]
    else:
        x = [p["batch"], p["classes"]]
    return {"op_type": "Softmax", "domain": "ai.onnx", "attributes": {"axis": -1}, "inputs": [act(x)],
            "outputs": [act(x)]}


def gen_layernorm(p: dict) -> dict:
    x = [p["batch"], p["tokens"], p["dim"]]
    return {"op_type": "LayerNormalization", "domain": "ai.onnx",
            "attributes": {"axis": -1, "epsilon": 1e-5, "stash_type": 1},
            "inputs": [act(x), weight([p["dim"]]), weight([p["dim"]])], "outputs": [act(x)]}


def gen_concat(p: dict) -> dict:
    n, hw, c, k = p["batch"], p["hw"], p["c"], p["inputs"]
    return {"op_type": "Concat", "domain": "ai.onnx", "attributes": {"axis": 1},
            "inputs": [act([n, c, hw, hw]) for _ in range(k)], "outputs": [act([n, c * k, hw, hw])]}


def gen_split(p: dict) -> dict:
    n, hw, c, k = p["batch"], p["hw"], p["c"], p["outputs"]
    if c % k:
        raise Reject("channels do not split evenly")
    return {"op_type": "Split", "domain": "ai.onnx", "attributes": {"axis": 1},
            "inputs": [act([n, c, hw, hw]), const([c // k] * k)], "outputs": [act([n, c // k, hw, hw]) for _ in range(k)]}


def gen_slice(p: dict) -> dict:
    x = [p["batch"], p["c"], p["hw"], p["hw"]]
    ax, step = p["axis"], p["step"]
    end = max(1, int(round(x[ax] * p["keep"])))
    out = list(x)
    out[ax] = len(range(0, end, step))
    return {"op_type": "Slice", "domain": "ai.onnx", "attributes": {},
            "inputs": [act(x), const([0]), const([end]), const([ax]), const([step])], "outputs": [act(out)]}


def gen_transpose(p: dict) -> dict:
    n, c, hw = p["batch"], p["c"], p["hw"]
    mode = p["mode"]
    if mode == "nhwc":
        x, perm = [n, c, hw, hw], [0, 2, 3, 1]
    elif mode == "nchw":
        x, perm = [n, hw, hw, c], [0, 3, 1, 2]
    elif mode == "shuffle":  # ShuffleNet channel shuffle: N, g, C/g, H, W -> N, C/g, g, H, W
        g = p["groups"]
        if c % g:
            raise Reject("groups do not divide the channels")
        x, perm = [n, g, c // g, hw, hw], [0, 2, 1, 3, 4]
    else:                    # attention heads: B, S, H, D -> B, H, S, D
        x, perm = [n, p["tokens"], p["heads"], p["head_dim"]], [0, 2, 1, 3]
    return {"op_type": "Transpose", "domain": "ai.onnx", "attributes": {"perm": perm}, "inputs": [act(x)],
            "outputs": [act([x[i] for i in perm])]}


def gen_reshape(p: dict) -> dict:
    n, c, hw = p["batch"], p["c"], p["hw"]
    x = [n, c, hw, hw]
    if p["mode"] == "flatten":
        out = [n, c * hw * hw]
    elif p["mode"] == "tokens":
        out = [n, c, hw * hw]
    else:
        g = p["groups"]
        if c % g:
            raise Reject("groups do not divide the channels")
        out = [n, g, c // g, hw, hw]
    return {"op_type": "Reshape", "domain": "ai.onnx", "attributes": {"allowzero": 0},
            "inputs": [act(x), const(out)], "outputs": [act(out)]}


def gen_resize(p: dict) -> dict:
    n, c, hw, s = p["batch"], p["c"], p["hw"], p["scale"]
    attrs = ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
             if p["mode"] == "nearest" else {"mode": "linear", "coordinate_transformation_mode": "half_pixel"})
    return {"op_type": "Resize", "domain": "ai.onnx", "attributes": attrs,
            "inputs": [act([n, c, hw, hw]), None, const([1.0, 1.0, float(s), float(s)], F32)],
            "outputs": [act([n, c, hw * s, hw * s])]}


def gen_pad(p: dict) -> dict:
    n, c, hw, k = p["batch"], p["c"], p["hw"], p["pad"]
    if p["mode"] == "reflect" and k >= hw:
        raise Reject("reflect pad wider than the input")
    return {"op_type": "Pad", "domain": "ai.onnx", "attributes": {"mode": p["mode"]},
            "inputs": [act([n, c, hw, hw]), const([0, 0, k, k, 0, 0, k, k])],
            "outputs": [act([n, c, hw + 2 * k, hw + 2 * k])]}


GENERATORS = {
    "Conv": None,  # needs the EP's epilogue: gen_conv
    "Gemm": gen_gemm, "MatMul": gen_matmul, "Add": gen_binary("Add"), "Mul": gen_binary("Mul"),
    **{op: gen_unary(op) for op in ("Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Clip", "Erf", "Tanh", "Gelu")},
    "MaxPool": gen_pool("MaxPool"), "AveragePool": gen_pool("AveragePool"), "GlobalAveragePool": gen_gap,
    "ReduceMean": gen_reduce_mean, "Softmax": gen_softmax, "LayerNormalization": gen_layernorm,
    "Concat": gen_concat, "Split": gen_split, "Slice": gen_slice, "Transpose": gen_transpose,
    "Reshape": gen_reshape, "Resize": gen_resize, "Pad": gen_pad,
}
assert set(GENERATORS) == set(SPACES)


def finish(node: dict, ep: str, params: dict) -> dict:
    """A generator's node -> a phase 2 record kernel (type from the registry, costs, signature)."""
    op = node["op_type"]
    if not is_known(op):
        raise HaseError(f"sampler emits op '{op}', which is not in utils/kernel_registry.py")
    inputs = [None if e is None else {"name": f"in{i}", **e} for i, e in enumerate(node["inputs"])]
    outputs = [{"name": f"out{j}", **{k: v for k, v in o.items() if k != "role"}} for j, o in enumerate(node["outputs"])]
    ktype = canonical_type(op, node["attributes"], has_sum=node.get("has_sum", False))
    read, written = kernel_bytes(inputs, outputs)
    k = {"id": "", "type": ktype, "category": spec(op).category, "op_type": op, "domain": node["domain"],
         "node_name": "", "ep": "CUDAExecutionProvider" if ep == "cuda" else "CPUExecutionProvider",
         "attributes": node["attributes"], "inputs": inputs, "outputs": outputs,
         "weight_shapes": [e["shape"] for e in inputs if e and e["role"] == "weight"],
         "flops": int(kernel_flops(op, ktype, node["attributes"], inputs, outputs)),
         "bytes_read": read, "bytes_written": written, "source_nodes": [], "inserted_by_ort": False,
         "folded_ops": [], "source": SOURCE, "space": params}
    k["signature"] = signature(k)
    return k


def within(k: dict, limits: dict) -> bool:
    elems = [math.prod(e["shape"]) for e in k["inputs"] + k["outputs"] if e is not None]
    return max(elems) <= limits["max_elems"] and k["flops"] <= limits["max_flops"]


def build(ktype: str, params: dict, ep: str, limits: dict) -> dict:
    """The kernel of one parameter draw; Reject when it cannot be built or is over the limits."""
    if ktype == "Conv":
        node = gen_conv(params, params["epilogue"])
    else:
        node = GENERATORS[ktype](params)
    k = finish(node, ep, params)
    if not within(k, limits):
        raise Reject("over the limits")
    return k


def sample_type(ktype: str, space: dict, n: int, rng, ep: str, cfg: dict, seen: set) -> list:
    """n distinct kernels of one type (distinct = new Kernel_ID); HaseError if the space cannot give them."""
    space = dict(space)
    if ktype == "Conv":
        space["epilogue"] = list(cfg["epilogues"].get(ep, [""])) or [""]
        if cfg["conv_grouped_io"] != "free":   # only then: a default draw consumes the generator as before
            space["grouped_io"] = [cfg["conv_grouped_io"]]
    out, tries = [], 0
    while len(out) < n:
        if tries >= cfg["max_tries"] * n:
            raise HaseError(f"types.{ktype}: {tries} draws gave only {len(out)} of {n} distinct configurations "
                            f"within limits (widen the space or the limits)")
        tries += 1
        try:
            k = build(ktype, draw(space, rng), ep, cfg["limits"])
        except Reject:
            continue
        kid = f"{k['type']}_{k['signature']}"
        if kid not in seen:
            seen.add(kid)
            out.append(k)
    return out


def name_kernels(kernels: list) -> list:
    counts = Counter()
    for k in kernels:
        k["id"] = instance_id(k["type"], counts[k["type"]])
        k["node_name"] = f"{SOURCE}/{k['id']}"
        counts[k["type"]] += 1
    return kernels


def sample(cfg: dict, ep: str) -> list:
    """The first stage: n configurations per type (types.<T>.count, else n_per_type), in type order."""
    types = validate(cfg)
    seen, kernels = set(), []
    for t in types:
        n = cfg["types"][t].get("count") or cfg["n_per_type"]
        kernels += sample_type(t, cfg["types"][t], n, type_rng(cfg["seed"], t), ep, cfg, seen)
    return name_kernels(kernels)


# ---- adaptive second stage -------------------------------------------------------------------------

def neighbour(params: dict, space: dict, rng, move_p: float) -> dict:
    """A draw near `params`: each parameter moves one step in its choice list, or by 0.5-2x in its range."""
    out = dict(params)
    for name, dom in space.items():
        if name == "count" or name not in params or rng.random() >= move_p:
            continue
        if isinstance(dom, dict):
            v = int(round(params[name] * math.exp(rng.uniform(math.log(0.5), math.log(2.0)))))
            out[name] = min(max(v, dom["min"]), dom["max"])
        else:
            uniq = sorted(set(dom), key=dom.index)
            if params[name] in uniq:
                i = uniq.index(params[name]) + int(rng.choice([-1, 1]))
                out[name] = uniq[min(max(i, 0), len(uniq) - 1)]
            else:
                out[name] = draw_value(uniq, rng)
    return out


def worst_configs(errors_csv, error_col: str, top_k: int) -> list:
    import pandas as pd
    from hase.utils.tables import read_csv_checked
    df = read_csv_checked(errors_csv, ("Kernel_ID", error_col), prefix="adaptive.errors_csv: ")
    err = pd.to_numeric(df[error_col], errors="coerce")
    df = df.assign(_err=err.abs()).dropna(subset=["_err"])
    worst = df.groupby("Kernel_ID")["_err"].mean().sort_values(ascending=False)
    return list(worst.index[:int(top_k)])


def adaptive(cfg: dict, ep: str, log=None) -> list:
    """Neighbours of the worst configurations of adaptive.errors_csv (those with a `space`)."""
    a = cfg["adaptive"]
    validate(cfg)
    for k in ("top_k", "per_config"):
        if isinstance(a[k], bool) or not isinstance(a[k], int) or a[k] < 1:
            raise HaseError(f"adaptive.{k} must be a whole number >= 1, got {a[k]!r}")
    if isinstance(a["move_p"], bool) or not isinstance(a["move_p"], (int, float)) or not 0 < a["move_p"] <= 1:
        raise HaseError(f"adaptive.move_p must be in (0, 1], got {a['move_p']!r}")
    if not a["records"]:
        raise HaseError("adaptive.records: the sampled record(s) the errors refer to are needed")
    known = {}
    for rp in paths.expand_globs(a["records"]):
        for k in paths.read_json(rp, "kernel record").get("kernels", []):
            known[f"{k['type']}_{k['signature']}"] = k
    worst = worst_configs(a["errors_csv"], a["error_col"], a["top_k"])
    rng = type_rng(cfg["seed"], "adaptive", "2")
    seen = set(known)
    out, skipped = [], 0
    for kid in worst:
        k = known.get(kid)
        if k is None or not k.get("space"):
            skipped += 1
            continue
        base = k["type"].split("_")[0]
        ktype = base if base in SPACES else None
        if ktype is None:
            skipped += 1
            continue
        space = dict(cfg["types"][ktype])
        if ktype == "Conv":
            space["epilogue"] = list(cfg["epilogues"].get(ep, [""])) or [""]
        got, tries = 0, 0
        while got < a["per_config"] and tries < cfg["max_tries"] * a["per_config"]:
            tries += 1
            try:
                nk = build(ktype, neighbour(k["space"], space, rng, a["move_p"]), ep, cfg["limits"])
            except Reject:
                continue
            nid = f"{nk['type']}_{nk['signature']}"
            if nid in seen:
                continue
            seen.add(nid)
            nk["adaptive_parent"] = kid
            out.append(nk)
            got += 1
    if log and skipped:
        log.warning("adaptive: %d of the %d worst configurations have no sampled space (zoo kernels?); skipped",
                    skipped, len(worst))
    return name_kernels(out)


# ---- record ----------------------------------------------------------------------------------------

def make_record(kernels: list, ep: str, cfg: dict, stage: str) -> dict:
    name = f"kspace_s{cfg['seed']}" + ("_adaptive" if stage == "adaptive" else "")
    return {"model": name, "source": SOURCE, "stage": stage, "device": ep, "graph_optimization_level": "sampled",
            "provenance": provenance(ep), "opsets": dict(OPSETS), "sampler": {"seed": cfg["seed"]},
            "kernel_count": len(kernels), "type_counts": dict(sorted(Counter(k["type"] for k in kernels).items())),
            "kernels": kernels, "edges": []}


def default_out(cfg: dict, ep: str, stage: str) -> Path:
    name = f"kspace_s{cfg['seed']}" + ("_adaptive" if stage == "adaptive" else "")
    return paths.kernel_record_dir() / "sampled" / f"{name}.{ep}.json"


def main() -> int:
    p = base_parser("Sample kernel configurations per type (kernel space) as a phase 2 style record", "kernel_model")
    p.set_defaults(config=CONFIG)
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("kernel_sampler", args.log_level)
    validate(cfg)
    ep = resolve_device(cfg["device"])
    stage = "adaptive" if cfg["adaptive"]["errors_csv"] else "prior"
    kernels = adaptive(cfg, ep, log) if stage == "adaptive" else sample(cfg, ep)
    rec = make_record(kernels, ep, cfg, stage)
    out = Path(cfg["out"]) if cfg["out"] else default_out(cfg, ep, stage)
    paths.atomic_write_text(out, json.dumps(rec, indent=1) + "\n")
    save_resolved(cfg, out.parent, f"{out.stem}.resolved_config.json")
    log.info("%s stage: %d kernels of %d types for %s -> %s", stage, len(kernels), len(rec["type_counts"]), ep, out)
    return 0


if __name__ == "__main__":
    run_main(main)
