"""Kernel -> named numeric features. The same code turns a phase 4 CSV row (training) and a
phase 2 record kernel (prediction) into one feature dict, so both sides see identical columns.

Columns, in order (feature_names()):
  geometry   N C H W Cout Hout Wout kernel_h kernel_w stride_h stride_w groups
  cost       flops bytes_read bytes_written bytes_total arith_intensity in_elems out_elems
  logs       log_flops log_bytes_read log_bytes_written log_bytes_total log_in_elems log_out_elems
  gemm view  dilation_h cin_per_group cout_per_group gemm_m gemm_k log_gemm_m log_gemm_k: a conv as the
             implicit GEMM cuDNN runs per group (M = N*Hout*Wout output pixels, N = Cout/groups, K =
             Cin/groups*kh*kw); trees cannot form these ratios from C, Cout and groups themselves (held-out
             Conv MAPE 15.2 -> 13.9% on the H200 kernel space, grouped convs the hardest)
  fusion     fused_add fused_act        (epilogue ORT fused into the kernel, from the type name)
  op         cat_<category> one-hot over utils.kernel_registry.CATEGORIES, type_code (label of
             the canonical type in the training vocabulary; -1 = unseen)
  load       the bg_ metric columns listed in config (background load sampled while idle)
"""
import json
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from hase.utils.errors import HaseError
from hase.utils.kernel_registry import CATEGORIES, category_of
from hase.utils.paths import read_json

GEOMETRY = ["N", "C", "H", "W", "Cout", "Hout", "Wout", "kernel_h", "kernel_w", "stride_h", "stride_w", "groups"]
COST = ["flops", "bytes_read", "bytes_written", "bytes_total", "arith_intensity", "in_elems", "out_elems"]
LOGS = ["log_flops", "log_bytes_read", "log_bytes_written", "log_bytes_total", "log_in_elems", "log_out_elems"]
GEMM_VIEW = ["dilation_h", "cin_per_group", "cout_per_group", "gemm_m", "gemm_k", "log_gemm_m", "log_gemm_k"]
FUSION = ["fused_add", "fused_act"]
CATEGORY_COLS = [f"cat_{c}" for c in CATEGORIES]
TYPE_COL = "type_code"
META_TYPE = "kernel_type"   # non-feature column carried beside the features: routes rows to per-type models
UNSEEN_CODE = -1


def feature_names(load_fields) -> list:
    return GEOMETRY + COST + LOGS + GEMM_VIEW + FUSION + CATEGORY_COLS + [TYPE_COL] + list(load_fields)


# the roofline's features (phase 5 with `roofline.peaks_json`, training/kernel_space_report.py): the time at the GPU's
# measured peak compute and bandwidth (benchmark/peak_bench.py) and which of the two bounds the kernel
ROOFLINE_COLS = ["log_roofline_us", "log_compute_us", "log_memory_us", "log_compute_over_memory"]


def read_peaks(path) -> tuple:
    """(FLOP/us, bytes/us) of benchmark/peak_bench.py's peaks.json; a missing or unreadable file or a missing
    field is a one-line error naming the file."""
    d = read_json(path, "peaks.json")
    try:
        return float(d["peak_tflops"]) * 1e6, float(d["peak_tb_per_s"]) * 1e6
    except (KeyError, TypeError, ValueError):
        raise HaseError("peaks.json lacks peak_tflops/peak_tb_per_s", path)


def roofline_us(flops, bytes_total, peaks: tuple, floor_us: float) -> np.ndarray:
    """max(FLOPs / peak FLOP/us, bytes / peak bytes/us) + floor_us: the least a kernel can take (floor_us: no
    kernel runs faster than a launch's minimum)."""
    return np.maximum(np.asarray(flops, float) / peaks[0], np.asarray(bytes_total, float) / peaks[1]) + floor_us


def with_roofline(X: pd.DataFrame, peaks: tuple, floor_us: float) -> pd.DataFrame:
    """Feature rows plus ROOFLINE_COLS (X needs the flops and bytes_total columns)."""
    tc, tm = X["flops"].to_numpy(float) / peaks[0], X["bytes_total"].to_numpy(float) / peaks[1]
    return X.assign(log_roofline_us=np.log(roofline_us(X["flops"], X["bytes_total"], peaks, floor_us)),
                    log_compute_us=np.log(tc + 1e-3), log_memory_us=np.log(tm + 1e-3),
                    log_compute_over_memory=np.log((tc + 1e-3) / (tm + 1e-3)))


def generic_feature_names(load_fields) -> list:
    """Features of the fallback model for unseen types: everything but the type label."""
    return [f for f in feature_names(load_fields) if f != TYPE_COL]


def type_vocabulary(types) -> dict:
    return {t: i for i, t in enumerate(sorted(set(types)))}


# ---- shapes and attributes -------------------------------------------------------------------

def nchw(shape) -> tuple:
    """Any rank -> (N, C, H, W): [N,C] -> H=W=1, [N,C,L] -> H=L, rank>4 folds the middle dims into H."""
    s = [int(d) for d in (shape or [])]
    if not s:
        return 1, 1, 1, 1
    if len(s) == 1:
        return 1, s[0], 1, 1
    if len(s) == 2:
        return s[0], s[1], 1, 1
    if len(s) == 3:
        return s[0], s[1], s[2], 1
    return s[0], s[1], int(np.prod(s[2:-1])), s[-1]


def _hw(values, default: int = 1) -> tuple:
    v = [int(x) for x in (values or [])]
    if not v:
        return default, default
    return (v[-2], v[-1]) if len(v) >= 2 else (v[0], 1)


def _parse_json(text, default):
    if text is None or (isinstance(text, float) and math.isnan(text)) or text == "":
        return default
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise HaseError(f"bad JSON in kernel row ({e.msg}): {text[:80]}")


def _shape_of(item):
    """A shape list, or an input/output entry {'shape': [...]} -> list (None stays None)."""
    if isinstance(item, Mapping):
        return item.get("shape")
    return item


def _num(x, default: float = 0.0) -> float:
    if x is None:
        return default
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def _parse_shape_str(text) -> list:
    """'1x64x56x56' -> [1, 64, 56, 56]; 'scalar' / '' -> []."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    parts = [p for p in str(text).split("x") if p.strip()]
    try:
        return [int(p) for p in parts]
    except ValueError:
        return []


def describe(kernel) -> dict:
    """Normalise a record kernel dict or a phase 4 CSV row to the fields features need."""
    if isinstance(kernel, pd.Series):
        kernel = kernel.to_dict()
    if isinstance(kernel.get("inputs"), list):          # phase 2 record kernel / phase 3 index entry
        acts = [e for e in kernel["inputs"] if e and e.get("role") == "activation"]
        in_shape = acts[0]["shape"] if acts else []
        outs = kernel.get("outputs") or []
        weights = kernel.get("weight_shapes")
        if weights is None:
            weights = [e["shape"] for e in kernel["inputs"] if e and e.get("role") == "weight"]
        ktype = kernel["type"]
        attrs = kernel.get("attributes") or {}
        out_shape = _shape_of(outs[0]) if outs else None
    else:                                               # phase 4 CSV row
        ktype = kernel.get("OpType") or kernel.get("type")
        if not isinstance(ktype, str) or not ktype:
            raise HaseError("kernel row has no OpType")
        in_shape = _parse_shape_str(kernel.get("Input_Shape"))
        outs = _parse_json(kernel.get("output_shapes"), [])
        out_shape = _shape_of(outs[0]) if outs else None
        if out_shape is None and "Cout" in kernel:      # no shapes column: use phase 4's numbers
            out_shape = [int(_num(kernel.get("N"), 1)), int(_num(kernel.get("Cout"), 1)),
                         int(_num(kernel.get("Hout"), 1)), int(_num(kernel.get("Wout"), 1))]
        weights = _parse_json(kernel.get("weight_shapes"), [])
        attrs = _parse_json(kernel.get("attributes"), {})
    category = kernel.get("category")
    if not isinstance(category, str) or category not in CATEGORIES:
        category = category_of(ktype)
    return {"type": ktype, "category": category, "in_shape": in_shape or [], "out_shape": out_shape or [],
            "weight_shapes": [_shape_of(w) for w in (weights or []) if _shape_of(w)],
            "attributes": attrs or {}, "flops": _num(kernel.get("flops")),
            "bytes_read": _num(kernel.get("bytes_read")), "bytes_written": _num(kernel.get("bytes_written"))}


# ---- features --------------------------------------------------------------------------------

def op_features(d: dict) -> dict:
    n, c, h, w = nchw(d["in_shape"])
    _, cout, hout, wout = nchw(d["out_shape"])
    attrs = d["attributes"]
    ks = attrs.get("kernel_shape")
    if not ks and d["category"] == "conv" and d["weight_shapes"] and len(d["weight_shapes"][0]) > 2:
        ks = d["weight_shapes"][0][2:]   # conv without kernel_shape attribute: from the weight
    kh, kw = _hw(ks)
    sh, sw = _hw(attrs.get("strides"))
    groups = int(_num(attrs.get("group"), 1)) or 1
    in_elems = float(np.prod(d["in_shape"])) if d["in_shape"] else 1.0
    out_elems = float(np.prod(d["out_shape"])) if d["out_shape"] else 1.0
    flops, br, bw = d["flops"], d["bytes_read"], d["bytes_written"]
    total = br + bw
    epilogue = d["type"].split("_")[1:]
    dil, _ = _hw(attrs.get("dilations"))
    gemm_m, gemm_k = float(n * hout * wout), float(c / groups * kh * kw)
    f = {"N": n, "C": c, "H": h, "W": w, "Cout": cout, "Hout": hout, "Wout": wout,
         "kernel_h": kh, "kernel_w": kw, "stride_h": sh, "stride_w": sw, "groups": groups,
         "flops": flops, "bytes_read": br, "bytes_written": bw, "bytes_total": total,
         # FLOPs per byte moved: places the kernel on the roofline (compute- vs memory-bound)
         "arith_intensity": flops / max(total, 1.0), "in_elems": in_elems, "out_elems": out_elems,
         "log_flops": math.log1p(flops), "log_bytes_read": math.log1p(br), "log_bytes_written": math.log1p(bw),
         "log_bytes_total": math.log1p(total), "log_in_elems": math.log1p(in_elems),
         "log_out_elems": math.log1p(out_elems),
         "dilation_h": dil, "cin_per_group": c / groups, "cout_per_group": cout / groups, "gemm_m": gemm_m,
         "gemm_k": gemm_k, "log_gemm_m": math.log1p(gemm_m), "log_gemm_k": math.log1p(gemm_k),
         "fused_add": float("Add" in epilogue),
         "fused_act": float(any(p != "Add" for p in epilogue))}
    for c_name in CATEGORIES:
        f[f"cat_{c_name}"] = float(d["category"] == c_name)
    return f


def load_values(source, load_fields) -> dict:
    """Load features from a CSV row or a live load dict. A dict may name a field with or without
    the 'bg_' prefix (Prometheus reports DCGM_FI_DEV_GPU_UTIL, the CSV column is bg_DCGM_...)."""
    out = {}
    for field in load_fields:
        bare = field[3:] if field.startswith("bg_") else field
        if field in source:
            v = source[field]
        elif bare in source:
            v = source[bare]
        else:
            raise HaseError(f"load field '{field}' missing (the kernel model was trained with it; "
                            f"give '{field}' or '{bare}')")
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise HaseError(f"load field '{field}' is not a number: {v!r}")
        if not math.isfinite(v):
            raise HaseError(f"load field '{field}' is not a finite number: {v}")
        out[field] = v
    return out


def _features(kernel, load_fields, type_codes: dict, load) -> tuple:
    src = kernel.to_dict() if isinstance(kernel, pd.Series) else kernel
    d = describe(src)
    f = op_features(d)
    f[TYPE_COL] = float(type_codes.get(d["type"], UNSEEN_CODE))
    f.update(load_values(src if load is None else load, load_fields))
    return {name: float(f[name]) for name in feature_names(load_fields)}, d["type"]


def kernel_features(kernel, load_fields, type_codes: dict, load=None) -> dict:
    """Ordered feature dict of one kernel. load=None: read the load from the kernel row itself
    (training CSV); otherwise from the given dict (prediction)."""
    return _features(kernel, load_fields, type_codes, load)[0]


def feature_frame(kernels, load_fields, type_codes: dict, load=None) -> pd.DataFrame:
    """Feature rows (named columns, float) plus the 'kernel_type' column used for routing.
    kernels: a list of record kernels / row dicts, or a DataFrame of phase 4 rows."""
    items = kernels.to_dict("records") if isinstance(kernels, pd.DataFrame) else list(kernels)
    rows, types = [], []
    for k in items:
        f, ktype = _features(k, load_fields, type_codes, load)
        rows.append(f)
        types.append(ktype)
    frame = pd.DataFrame(rows, columns=feature_names(load_fields), dtype=float)
    frame[META_TYPE] = types
    if isinstance(kernels, pd.DataFrame):
        frame.index = kernels.index
    return frame
