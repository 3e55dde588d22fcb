"""The float16 GPU-time term: a float16 node costs what the same node costs in float32, less what half the bytes and
the float16 tensor cores save above a floor.

    gpu_us(float16 node) = f_c + (gpu_us(float32 view) - f_c) * r_c     where gpu_us(float32 view) > f_c, else as is

c is the node's class: `conv` (Conv, ConvTranspose), `gemm` (Gemm, MatMul, FusedMatMul, attention) or `mem` (every
other op). f_c (us) is the time below which a kernel is latency-bound and the dtype does not matter; r_c is the share
of the time above it that float16 keeps (half the bytes, twice the tensor-core rate: 0.5 in the ideal case).

Why a term and not the trees: every corpus record the node models were fitted on is float32, and the trees price a
float16 node from its bytes and FLOPs as a float32 node of half the bytes. On the float16 twins of 7 anchors (H100
machine l, CUPTI per node) that over-predicted the GPU sum by 18.4% (every model over, tensor-core work most). The
term was fitted on the same twins by inference/fit_precision_term.py; its leave-one-architecture-out error is in
inference/results/nvidia-h100/precision/ beside the constants. The float32 view (`float32_view`) is what the trees
know how to price: dtype float32 and twice the bytes.
"""
import json
from pathlib import Path

import numpy as np

CLASSES = {"conv": {"Conv", "ConvTranspose"},
           "gemm": {"Gemm", "MatMul", "FusedMatMul", "Attention", "MultiHeadAttention", "GroupQueryAttention"}}
TERM_FILE = "precision/float16_term.json"          # under inference/results/<gpu>/
MEASURED_ON = "nvidia-h100"                         # the one GPU with float16 twins so far


def node_class(op_type: str) -> str:
    return next((c for c, ops in CLASSES.items() if op_type in ops), "mem")


def is_float16(k: dict) -> bool:
    """The kernel computes in float16 only (a Cast between float16 and float32 is not: it stays as priced)."""
    from hase.inference.node_model import float_dtypes
    return float_dtypes([k]) == {"float16"}


def float32_view(k: dict) -> dict:
    """The same node in float32: activation dtypes float32 and twice the bytes (weights included: a float16 model's
    weights are float16 too)."""
    def f32(e):
        return dict(e, dtype="float32") if e and e.get("dtype") == "float16" else e
    return dict(k, inputs=[f32(e) for e in k.get("inputs") or []], outputs=[f32(e) for e in k.get("outputs") or []],
                bytes_read=2.0 * float(k.get("bytes_read") or 0), bytes_written=2.0 * float(k.get("bytes_written") or 0))


def views(kernels: list):
    """(kernels with every float16 node as its float32 view, mask of those nodes); mask None when there are none."""
    mask = np.array([is_float16(k) for k in kernels], bool)
    if not mask.any():
        return kernels, None
    return [float32_view(k) if m else k for k, m in zip(kernels, mask)], mask


def apply(kernels: list, gpu_us_f32, mask, term: dict) -> np.ndarray:
    """GPU us per kernel: the float16 nodes (mask) priced from their float32 views' times by the term."""
    g = np.asarray(gpu_us_f32, float).copy()
    for i in np.flatnonzero(mask):
        c = term["classes"][node_class(kernels[i].get("op_type") or kernels[i].get("type", ""))]
        f, r = float(c["floor_us"]), float(c["ratio"])
        if g[i] > f:
            g[i] = f + (g[i] - f) * r
    return g


def term_path(gpu_slug: str = "", root: Path = None) -> Path:
    """The GPU's own term where one was measured, else the H100's (the same Hopper SMs as the H200)."""
    from hase.utils import paths
    res = Path(root) if root else paths.REPO / "inference" / "results"   # committed, whatever HASE_HOME says
    own = res / gpu_slug / TERM_FILE if gpu_slug else None
    return own if own is not None and own.exists() else res / MEASURED_ON / TERM_FILE


def load_term(path: Path):
    """The fitted term, or None when the file is missing (the float16 nodes then stay priced by the trees). A file
    that is there but is not a term (not JSON, a class or its floor_us/ratio missing, not a finite number, outside
    floor >= 0 and ratio > 0) is one line naming the field, here rather than a KeyError in the middle of a
    prediction."""
    from hase.utils.errors import HaseError
    path = Path(path)
    if not path.exists():
        return None
    try:
        t = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise HaseError(f"not a float16 term (JSON): {e}", path)
    classes = t.get("classes") if isinstance(t, dict) else None
    if not isinstance(classes, dict):
        raise HaseError("classes missing (an object {conv, gemm, mem})", path)
    for c in ("conv", "gemm", "mem"):
        if c not in classes:
            raise HaseError(f"classes.{c} missing", path)
    for c in ("conv", "gemm", "mem"):
        for k in ("floor_us", "ratio"):
            v = classes[c].get(k) if isinstance(classes[c], dict) else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise HaseError(f"classes.{c}.{k} must be a finite number, not {json.dumps(v)}", path)
        if classes[c]["floor_us"] < 0 or classes[c]["ratio"] <= 0:
            raise HaseError(f"classes.{c}: floor_us must be >= 0 and ratio > 0 (got {classes[c]['floor_us']}, "
                            f"{classes[c]['ratio']})", path)
    from hase.utils import paths
    t["path"] = paths.in_repo(path)   # in a warning: the committed file as the repository names it
    return t
