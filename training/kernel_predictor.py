"""The runtime kernel predictor (phase 5's models at prediction time): a library module, no CLI.

KernelPredictor(dir) reads a phase 5 model folder (training/train_kernel_model.py writes one: manifest.json, one
ONNX tree ensemble per model key, lookup_table.json) or a compact shipped predictor (training/build_predictor.py:
the same manifest, the XGBoost trees as arrays in one `forests.npz.xz`, evaluated with numpy; bit-for-bit the
trees' float32 comparisons, so the same predictions without onnxruntime or xgboost).
Thread-safe: sessions and forests are loaded once under a lock; predictions share no state.
"""
import io
import json
import lzma
import math
import threading
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hase.kernel_model.kernel_builder import kernel_id
from hase.training import lookup_table
from hase.training.features import META_TYPE, ROOFLINE_COLS, TYPE_COL, feature_frame, with_roofline
from hase.utils.errors import HaseError

FORMAT = "hase.kernel_model/1"
LOOKUP = "lookup_table.json"
MANIFEST = "manifest.json"
FORESTS = "forests.npz.xz"   # a compact predictor's trees (training/build_predictor.py)


class UnknownKernelTypeWarning(UserWarning):
    """A kernel type the model never saw: predicted by the generic FLOPs/bytes model."""


class BeyondTrainingRangeWarning(UserWarning):
    """A kernel with more FLOPs or bytes than any the roofline-ratio model was trained on: trained on the smallest
    80% of the H200 kernel space by FLOPs, the ratio missed the largest 20% by 165% (the time itself by 29%)."""


def onnx_session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # tiny models; do not add load to the machine being predicted
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


# ---- compact forests -------------------------------------------------------------------------
def forest_arrays(booster) -> dict:
    """An XGBoost booster (reg:squarederror, numeric splits) as flat arrays: per node left/right child (-1 at a
    leaf, tree-local ids), split feature, split condition (the leaf value at a leaf), default-left; tree offsets;
    the base score. What CompactForest evaluates."""
    model = json.loads(booster.save_raw("json"))
    learner = model["learner"]
    base = learner["learner_model_param"]["base_score"]
    base = float(base.strip("[]").split(",")[0])
    obj = learner["objective"]["name"]
    if obj != "reg:squarederror":
        raise HaseError(f"compact forests support reg:squarederror only, not {obj}")
    trees = learner["gradient_booster"]["model"]["trees"]
    left, right, feat, cond, dleft, ptr = [], [], [], [], [], [0]
    for t in trees:
        if any(int(s) != 0 for s in t.get("split_type", [])):
            raise HaseError("compact forests support numeric splits only")
        left += t["left_children"]
        right += t["right_children"]
        feat += t["split_indices"]
        cond += t["split_conditions"]
        dleft += t["default_left"]
        ptr.append(len(left))
    return {"left": np.array(left, np.int16), "right": np.array(right, np.int16),
            "feat": np.array(feat, np.int16), "cond": np.array(cond, np.float32),
            "dleft": np.array(dleft, np.uint8), "ptr": np.array(ptr, np.int32),
            "base": np.array([base], np.float64)}


def save_forests(forests: dict, path: Path) -> None:
    """{model key: forest_arrays()} -> one xz-compressed npz."""
    buf = io.BytesIO()
    np.savez(buf, **{f"{key}|{name}": arr for key, arrs in forests.items() for name, arr in arrs.items()})
    from hase.utils import paths
    paths.atomic_write_bytes(path, lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))


def load_forests(path: Path) -> dict:
    try:
        data = np.load(io.BytesIO(lzma.decompress(Path(path).read_bytes())))
    except (OSError, lzma.LZMAError, ValueError) as e:
        raise HaseError(f"not a readable compact predictor ({type(e).__name__})", path)
    out = {}
    for name in data.files:
        key, arr = name.rsplit("|", 1)
        out.setdefault(key, {})[arr] = data[name]
    return {k: CompactForest(v) for k, v in out.items()}


class CompactForest:
    """Evaluates forest_arrays() with numpy: all trees of all rows level by level; ORT-session-like run()."""

    def __init__(self, arrs: dict):
        ptr = arrs["ptr"].astype(np.int64)
        off = np.repeat(ptr[:-1], np.diff(ptr))
        self.left = np.where(arrs["left"] >= 0, arrs["left"] + off, -1)
        self.right = np.where(arrs["right"] >= 0, arrs["right"] + off, -1)
        self.feat = arrs["feat"].astype(np.int64)
        self.cond = arrs["cond"].astype(np.float32)
        self.dleft = arrs["dleft"].astype(bool)
        self.roots = ptr[:-1]
        self.base = float(arrs["base"][0])

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, np.float32)
        n = len(X)
        if n == 0:
            return np.zeros(0)
        idx = np.broadcast_to(self.roots, (n, len(self.roots))).copy()
        rows = np.arange(n)[:, None]
        while True:
            lc = self.left[idx]
            inner = lc >= 0
            if not inner.any():
                break
            x = X[rows, np.where(inner, self.feat[idx], 0)]
            go_left = np.where(np.isnan(x), self.dleft[idx], x < self.cond[idx])
            idx = np.where(inner, np.where(go_left, lc, self.right[idx]), idx)
        return self.base + self.cond[idx].astype(np.float64).sum(axis=1)

    def run(self, _outputs, feeds: dict) -> list:
        return [self.predict(feeds["input"])[:, None]]


# ---- prediction (phase 7) --------------------------------------------------------------------
class KernelPredictor:
    """Predicts kernel latency (ms) from feature rows, routing each row to its type's model."""

    def __init__(self, model_dir):
        self.dir = Path(model_dir)
        mpath = self.dir / MANIFEST
        if not mpath.exists():
            raise HaseError("no manifest.json (train phase 5 first)", self.dir)
        try:
            self.manifest = json.loads(mpath.read_text())
        except json.JSONDecodeError as e:
            raise HaseError(f"manifest is not valid JSON ({e.msg})", mpath)
        if self.manifest.get("format") != FORMAT:
            raise HaseError(f"manifest format {self.manifest.get('format')!r}, expected {FORMAT!r}", mpath)
        self.features = self.manifest["features"]
        self.load_fields = self.manifest["load_fields"]
        self.type_codes = self.manifest["type_codes"]
        self.per_type = self.manifest["per_type"]
        self._sessions = {}
        self._lock = threading.Lock()
        self._forests = None
        self.device = self.manifest.get("metadata", {}).get("device")  # the EP it was trained on: cpu | cuda
        lp = self.dir / self.manifest.get("lookup_table", LOOKUP)
        self.lookup = lookup_table.LookupTable.load(lp) if lp.exists() else None
        self.fast_path = True    # exactly measured kernels come from the lookup table
        self.roofline = self.manifest.get("roofline")   # the trees predict log(time / roofline time)

    def _session(self, key: str):
        s = self._sessions.get(key)
        if s is not None:
            return s
        with self._lock:
            if key not in self._sessions:
                entry = self.manifest["models"][key]
                if "compact" in entry:   # a shipped predictor: numpy forests, no ONNX file
                    if self._forests is None:
                        self._forests = load_forests(self.dir / entry["compact"])
                    if key not in self._forests:
                        raise HaseError(f"model '{key}' missing from the compact predictor", self.dir / entry["compact"])
                    self._sessions[key] = self._forests[key]
                else:
                    path = self.dir / entry["onnx"]
                    if not path.exists():
                        raise HaseError("model file missing", path)
                    self._sessions[key] = onnx_session(path)
            return self._sessions[key]

    def feature_rows(self, kernels, load: dict) -> pd.DataFrame:
        """Feature rows of record kernels (or row dicts) under the given load."""
        return self._with_roofline(feature_frame(kernels, self.load_fields, self.type_codes, load=load))

    def _with_roofline(self, rows: pd.DataFrame) -> pd.DataFrame:
        if not self.roofline or all(c in rows.columns for c in ROOFLINE_COLS):
            return rows
        r = self.roofline
        return with_roofline(rows, (r["peak_flop_per_us"], r["peak_bytes_per_us"]), r["floor_us"])

    def route(self, kernel_type: str) -> str:
        return self.per_type.get(kernel_type, "generic")

    def unseen_types(self, kernels) -> list:
        """Types of these kernels that the training data lacked (the generic model predicts them).
        A function of the kernels only: a predictor kept loaded across models reports each on its own."""
        return sorted({str(k["type"]) for k in kernels if str(k["type"]) not in self.per_type})

    def predict(self, kernel_feature_rows: pd.DataFrame) -> np.ndarray:
        """Latency in ms per row. Rows: feature_rows()/feature_frame() output (the 'kernel_type'
        column routes rows; without it the type_code column does)."""
        rows = kernel_feature_rows
        if self.roofline and all(c in rows.columns for c in ("flops", "bytes_total")):
            rows = self._with_roofline(rows)
        for f in self.features:
            if f not in rows.columns:
                what = "load field" if f in self.load_fields else "feature column"
                raise HaseError(f"{what} '{f}' missing from the rows to predict")
        if META_TYPE in rows.columns:
            types = rows[META_TYPE].astype(str).to_numpy()
        else:
            names = {float(c): t for t, c in self.type_codes.items()}
            types = np.array([names.get(float(c), f"<type_code {c}>") for c in rows[TYPE_COL]])
        keys = np.array([self.route(t) for t in types])
        for t in sorted(set(types[keys == "generic"])):  # once per type and call, never remembered
            warnings.warn(f"kernel type '{t}' was not in the training data; predicted by the "
                          f"generic FLOPs/bytes model", UnknownKernelTypeWarning, stacklevel=3)
        out_log = np.full(len(rows), np.nan)
        for key in sorted(set(keys)):
            idx = np.where(keys == key)[0]
            cols = self.manifest["models"][key]["features"]
            X = rows.iloc[idx][cols].to_numpy(np.float32)
            out_log[idx] = self._session(key).run(None, {"input": X})[0].ravel()
        if self.roofline:   # the trees' log ratio + the roofline time (us -> ms)
            over = np.zeros(len(rows), bool)
            for col, key in (("log_compute_us", "train_max_compute_us"), ("log_memory_us", "train_max_memory_us")):
                top = self.roofline.get(key)
                if top:
                    over |= rows[col].to_numpy(float) > math.log(top)
            if over.any():
                warnings.warn(f"{int(over.sum())} kernel(s) with more FLOPs or bytes than any trained: the roofline-ratio "
                              f"model extrapolates poorly there (train with roofline.peaks_json=\"\" to learn the time "
                              f"itself)", BeyondTrainingRangeWarning, stacklevel=3)
            out_log += rows["log_roofline_us"].to_numpy(float) - math.log(1e3)
        return np.exp(out_log)

    def predict_kernels(self, record_kernels, load: dict) -> dict:
        """{kernel id: predicted ms} for phase 2 record kernels under one load snapshot."""
        kernels = list(record_kernels)
        if not kernels:
            return {}
        ms = self.predict(self.feature_rows(kernels, load))
        out = {k.get("id", str(i)): float(v) for i, (k, v) in enumerate(zip(kernels, ms))}
        if self.lookup is not None and self.fast_path:
            for k in kernels:   # measured exactly (same type, shapes and attributes): the table wins
                ms = self.lookup.measured(kernel_id(k), load) if "id" in k and "signature" in k else None
                if ms is not None:
                    out[k["id"]] = ms
        return out


def load_predictor(model_dir):
    """The predictor in a folder: a kernel predictor (phase 5) or a corpus node model (inference/node_model.py)."""
    from hase.inference.node_model import NodeModel, is_node_model
    if is_node_model(model_dir):
        return NodeModel.load(model_dir)
    return KernelPredictor(model_dir)
