"""Phase 5 (tasks 5.1/5.2): train kernel latency regressors on the phase 4 benchmark CSV.

  python training/train_kernel_model.py [--device cuda] [--set data_csv=path/kernels.csv]

Rows with status ok -> named numeric features (training/features.py) -> train/test split by kernel
configuration (Kernel_ID groups, so no configuration is in both) -> XGBoost and RandomForest on
log(latency_ms), globally and per kernel type; the better of (per-type models, global model) on
each type's test rows is kept. A generic model without the type label serves unseen types.

Output, training/models/<device slug>/: manifest.json (feature schema, chosen model per type,
metrics, provenance) and every kept model as ONNX (predicted through onnxruntime CPU, so no
pickles tied to a scikit-learn version); XGBoost models also as native JSON.
training/kernel_predictor.py's load_predictor(dir) gives the KernelPredictor phase 7 uses.
"""
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.training import lookup_table  # noqa: E402
from hase.training.features import (META_TYPE, ROOFLINE_COLS, UNSEEN_CODE, feature_frame,  # noqa: E402
                               feature_names, generic_feature_names, read_peaks, type_vocabulary,
                               with_roofline)
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.metrics import accuracy, fmt  # noqa: E402
# the runtime predictor lives in a library module; these names stay importable from here
from hase.training.kernel_predictor import (FORMAT, LOOKUP, MANIFEST, BeyondTrainingRangeWarning,  # noqa: E402,F401
                                       KernelPredictor, UnknownKernelTypeWarning, load_predictor, onnx_session)

ALGOS = ("xgboost", "random_forest")
DEFAULTS = {
    "device": "auto", "data_csv": "", "extra_csv": [], "device_slug": "", "target": "latency_ms",
    "models": list(ALGOS), "test_fraction": 0.2, "seed": 0, "min_rows_per_type": 30, "min_kernels_per_type": 4,
    "load_fields": {
        "cuda": ["bg_DCGM_FI_DEV_GPU_UTIL", "bg_DCGM_FI_DEV_MEM_COPY_UTIL", "bg_DCGM_FI_DEV_SM_CLOCK",
                 "bg_DCGM_FI_DEV_MEM_CLOCK", "bg_DCGM_FI_DEV_POWER_USAGE", "bg_DCGM_FI_DEV_FB_USED",
                 "bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE", "bg_DCGM_FI_PROF_SM_ACTIVE", "bg_DCGM_FI_PROF_SM_OCCUPANCY",
                 "bg_DCGM_FI_PROF_DRAM_ACTIVE", "bg_DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"],
        "cpu": ["bg_CPU_UTIL_PCT", "bg_CPU_FREQ_MHZ", "bg_MEM_USED_MB", "bg_LOAD_AVG_1M"],
    },
    "xgboost": {"n_estimators": 400, "max_depth": 6, "learning_rate": 0.05, "subsample": 0.9,
                "colsample_bytree": 0.9, "min_child_weight": 1.0},
    "random_forest": {"n_estimators": 200, "max_depth": None, "min_samples_leaf": 2, "max_features": 1.0},
    "n_jobs": 0, "show_rows": 5,
    # learn the ratio to the roofline time (issue 13): peaks_json = benchmark/peak_bench.py's peaks.json of the GPU the
    # data come from ("" = learn the time itself); the peaks are stored in the manifest and used at prediction
    "roofline": {"peaks_json": "", "floor_us": 1.0},
}


# ---- data ------------------------------------------------------------------------------------

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_dataset(csv_path: Path, target: str) -> pd.DataFrame:
    """Phase 4 rows with status ok and a positive, finite target."""
    from hase.utils.tables import read_csv_checked
    csv_path = Path(csv_path)
    if not csv_path.exists():
        raise HaseError("benchmark CSV not found (run phase 4 first, or --set data_csv=...)", csv_path)
    df = read_csv_checked(csv_path, ("Kernel_ID", "OpType", target), low_memory=False)
    if "status" in df.columns:
        df = df[df["status"].astype(str) == "ok"]
    y = pd.to_numeric(df[target], errors="coerce")
    df = df[np.isfinite(y) & (y > 0)].copy()
    if df.empty:
        raise HaseError(f"no rows with status ok and a positive '{target}'", csv_path)
    return df.reset_index(drop=True)


def device_kind(df: pd.DataFrame, cfg_device: str) -> str:
    """cpu or cuda: the CSV's own device column first, then the config, then the metric names."""
    if "device" in df.columns:
        vals = df["device"].dropna().astype(str)
        if not vals.empty and vals.mode()[0] in ("cpu", "cuda"):
            return vals.mode()[0]
    if cfg_device in ("cpu", "cuda"):
        return cfg_device
    return "cuda" if any(c.startswith("bg_DCGM") for c in df.columns) else "cpu"


def usable_load_fields(df: pd.DataFrame, wanted: list, log) -> tuple:
    """(fields, rows): drop listed fields the CSV lacks or never filled, then rows missing a field."""
    fields = []
    for f in wanted:
        if f not in df.columns or pd.to_numeric(df[f], errors="coerce").notna().sum() == 0:
            log.warning("load field %s is not in the data (or always empty); not used", f)
        else:
            fields.append(f)
    if not fields:
        log.warning("no load fields: the model will not see background load")
    keep = np.ones(len(df), dtype=bool)
    for f in fields:
        df[f] = pd.to_numeric(df[f], errors="coerce")
        keep &= np.isfinite(df[f].to_numpy(dtype=float))
    if (~keep).sum():
        log.warning("dropping %d rows with an empty load field", int((~keep).sum()))
    return fields, df[keep].reset_index(drop=True)


def group_split(groups, test_fraction: float, seed: int) -> tuple:
    """Train/test row indices with every Kernel_ID entirely on one side."""
    from sklearn.model_selection import GroupShuffleSplit
    groups = np.asarray(groups)
    if len(set(groups)) < 2:
        raise HaseError("need at least 2 kernel configurations (Kernel_ID) to split train/test")
    gss = GroupShuffleSplit(n_splits=1, test_size=test_fraction, random_state=seed)
    train_idx, test_idx = next(gss.split(np.zeros(len(groups)), groups=groups))
    return train_idx, test_idx


# ---- metrics ---------------------------------------------------------------------------------

# ---- models ----------------------------------------------------------------------------------

def make_model(algo: str, cfg: dict):
    n_jobs = cfg["n_jobs"] or -1
    if algo == "xgboost":
        import xgboost as xgb
        return xgb.XGBRegressor(objective="reg:squarederror", random_state=cfg["seed"], n_jobs=n_jobs,
                                **cfg["xgboost"])
    if algo == "random_forest":
        from sklearn.ensemble import RandomForestRegressor
        return RandomForestRegressor(random_state=cfg["seed"], n_jobs=n_jobs, **cfg["random_forest"])
    raise HaseError(f"unknown model '{algo}' (choose from {', '.join(ALGOS)})")


def fit(algo: str, X: pd.DataFrame, y_log: np.ndarray, cfg: dict):
    # float32 numpy: what both libraries and the ONNX tree ensembles compare thresholds in
    return make_model(algo, cfg).fit(X.to_numpy(np.float32), y_log)


def predict_log(model, X: pd.DataFrame) -> np.ndarray:
    return np.asarray(model.predict(X.to_numpy(np.float32)), dtype=float).ravel()


def to_onnx(model, algo: str, n_features: int):
    if algo == "xgboost":
        from onnxmltools import convert_xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType
        return convert_xgboost(model, initial_types=[("input", FloatTensorType([None, n_features]))],
                               target_opset=15)
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    return convert_sklearn(model, initial_types=[("input", FloatTensorType([None, n_features]))],
                           target_opset={"": 17, "ai.onnx.ml": 3})


def save_model(model, algo: str, name: str, feats: list, out_dir: Path, X_check: pd.DataFrame) -> dict:
    """Write <name>.<algo>.onnx (+ .json for XGBoost) and check ONNX reproduces the native model."""
    stem = f"{name}.{algo}"
    entry = {"algo": algo, "features": feats}
    if algo == "xgboost":
        model.get_booster().save_model(str(out_dir / f"{stem}.json"))
        entry["native"] = f"{stem}.json"
    onx = to_onnx(model, algo, len(feats))
    paths.atomic_write_bytes(out_dir / f"{stem}.onnx", onx.SerializeToString())
    entry["onnx"] = f"{stem}.onnx"
    sess = onnx_session(out_dir / f"{stem}.onnx")
    got = sess.run(None, {"input": X_check[feats].to_numpy(np.float32)})[0].ravel()
    diff = float(np.max(np.abs(got - predict_log(model, X_check[feats])))) if len(X_check) else 0.0
    entry["onnx_max_abs_diff_log"] = diff
    if diff > 1e-3:
        raise HaseError(f"ONNX export of {stem} disagrees with the native model (max |Δlog| {diff:.2e})")
    return entry


def file_name(text: str) -> str:
    """Kernel type -> safe file name part (registry types already are; unknown ops may not be)."""
    return re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-") or "type"


# ---- training --------------------------------------------------------------------------------

def best_of(cands: dict) -> str:
    """Candidate with the lowest test MAPE (ties: first listed); candidates without test rows lose."""
    scored = [(m.get("mape_pct", math.inf), i, k) for i, (k, m) in enumerate(cands.items())]
    return min(scored)[2]


def roofline_of(cfg: dict):
    """{peaks: (FLOP/us, bytes/us), floor_us, source} from `roofline.peaks_json`, or None when it is ""."""
    rc = cfg.get("roofline") or {}
    path = rc.get("peaks_json") or ""
    if not path:
        return None
    peaks = read_peaks(Path(path))
    floor = rc.get("floor_us", 1.0)
    if not all(math.isfinite(v) and v > 0 for v in peaks) or isinstance(floor, bool) \
            or not isinstance(floor, (int, float)) or floor < 0:
        raise HaseError("roofline: peaks must be > 0 and floor_us >= 0", path)
    return {"peaks": peaks, "floor_us": float(floor), "source": paths.portable(Path(path))}


def train(df: pd.DataFrame, cfg: dict, load_fields: list, out_dir: Path, log) -> tuple:
    """Fit, compare and save into a staging folder; returns (manifest without metadata, staging)."""
    target = cfg["target"]
    algos = list(cfg["models"])
    for a in algos:
        if a not in ALGOS:
            raise HaseError(f"unknown model '{a}' in models (choose from {', '.join(ALGOS)})")
    if not algos:
        raise HaseError("models is empty")
    codes = type_vocabulary(df["OpType"])
    X = feature_frame(df, load_fields, codes)
    feats, gfeats = feature_names(load_fields), generic_feature_names(load_fields)
    roof = roofline_of(cfg)
    if roof:   # the trees learn log(time / roofline time); predictions add the roofline back (`off`)
        X = with_roofline(X, roof["peaks"], roof["floor_us"])
        feats, gfeats = feats + ROOFLINE_COLS, gfeats + ROOFLINE_COLS
        off = X["log_roofline_us"].to_numpy() - math.log(1e3)
    else:
        off = np.zeros(len(X))
    y_ms = df[target].to_numpy(float)
    y_log = np.log(y_ms)
    types = X[META_TYPE].to_numpy()

    with pd.option_context("display.width", 200, "display.max_columns", 60):
        print(f"processed features ({len(X)} rows x {len(feats)} features, all numeric: "
              f"{all(pd.api.types.is_float_dtype(X[c]) for c in feats)}):")
        print(X[feats].head(cfg["show_rows"]).to_string())

    tr, te = group_split(df["Kernel_ID"].to_numpy(), cfg["test_fraction"], cfg["seed"])
    log.info("split by Kernel_ID: %d train rows (%d kernels), %d test rows (%d kernels)", len(tr),
             df["Kernel_ID"].iloc[tr].nunique(), len(te), df["Kernel_ID"].iloc[te].nunique())
    Xtr, Xte, ytr = X.iloc[tr], X.iloc[te], y_log[tr] - off[tr]
    off_te = off[te]

    staging = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    models, candidates, per_type = {}, {}, {}
    pred_test_log = {}   # model key -> log predictions on all test rows

    # global models (all features) and the generic model (no type label) for unseen types
    for key, cols in (("global", feats), ("generic", gfeats)):
        fitted, cands = {}, {}
        for a in algos:
            fitted[a] = fit(a, Xtr[cols], ytr, cfg)
            p = predict_log(fitted[a], Xte[cols]) + off_te
            cands[a] = accuracy(np.exp(p), y_ms[te])
            pred_test_log[(key, a)] = p
        best = best_of(cands)
        candidates[key] = cands
        models[key] = save_model(fitted[best], best, key, cols, staging, Xte)
        models[key]["test"] = cands[best]
        pred_test_log[key] = pred_test_log[(key, best)]
        log.info("%s: %s", key, " | ".join(f"{a}: {fmt(m)}" for a, m in cands.items()))

    # per-type models where a type has enough rows; keep whichever of them or global is better
    te_types = types[te]
    for t in sorted(codes):
        rows_tr = np.where(types[tr] == t)[0]
        rows_te = np.where(te_types == t)[0]
        n_kernels = df["Kernel_ID"].iloc[tr].iloc[rows_tr].nunique() if len(rows_tr) else 0
        if len(rows_tr) < cfg["min_rows_per_type"] or n_kernels < cfg["min_kernels_per_type"]:
            per_type[t] = "global"
            continue
        if not len(rows_te):
            log.info("type %s: no test rows, cannot compare; keeping the global model", t)
            per_type[t] = "global"
            continue
        cands = {"global": accuracy(np.exp(pred_test_log["global"][rows_te]), y_ms[te][rows_te])}
        fitted = {}
        for a in algos:
            fitted[a] = fit(a, Xtr.iloc[rows_tr][feats], ytr[rows_tr], cfg)
            cands[a] = accuracy(np.exp(predict_log(fitted[a], Xte.iloc[rows_te][feats]) + off_te[rows_te]),
                                y_ms[te][rows_te])
        candidates[f"type/{t}"] = cands
        best = best_of(cands)
        if best == "global":
            per_type[t] = "global"
        else:
            key = f"type/{t}"
            models[key] = save_model(fitted[best], best, f"type.{file_name(t)}", feats, staging,
                                     Xte.iloc[rows_te])
            models[key]["test"] = cands[best]
            per_type[t] = key
        log.info("type %s -> %s (%s)", t, per_type[t], " | ".join(f"{k}: MAPE {m.get('mape_pct', math.nan):.2f}%"
                                                                   for k, m in cands.items()))

    # the composed predictor on the test split: what phase 7 will get
    final_log = pred_test_log["global"].copy()
    for t, key in per_type.items():
        if key != "global":
            rows = np.where(te_types == t)[0]
            if len(rows):
                sess = onnx_session(staging / models[key]["onnx"])
                final_log[rows] = (sess.run(None, {"input": Xte.iloc[rows][feats].to_numpy(np.float32)})[0].ravel()
                                   + off_te[rows])
    final_ms = np.exp(final_log)
    overall = accuracy(final_ms, y_ms[te])
    by_type = {t: accuracy(final_ms[te_types == t], y_ms[te][te_types == t]) for t in sorted(set(te_types))}
    print(f"test split (composed predictor): {fmt(overall)}  [plan bar: MAPE < 15%]")
    for t, m in by_type.items():
        print(f"  {t:<28} via {per_type.get(t, 'global'):<28} {fmt(m)}")
    by_level = {}
    if "stress_level" in df.columns:   # a neighbour's time slice dominates tiny kernels at high load
        levels = df["stress_level"].iloc[te].to_numpy()
        for lv in sorted(set(levels)):
            by_level[f"{lv:g}"] = accuracy(final_ms[levels == lv], y_ms[te][levels == lv])
            print(f"  stress level {lv:<5g} {fmt(by_level[f'{lv:g}'])}")

    # baseline: the lookup table of the training kernels, interpolating over shape for the test ones
    lt_pred, hows = lookup_table.evaluate(lookup_table.build(df.iloc[tr], target), df.iloc[te], target)
    found = np.isfinite(lt_pred)
    lookup_metrics = {**accuracy(lt_pred[found], y_ms[te][found]), "missing_types": int((~found).sum()),
                      "how": {h: hows.count(h) for h in sorted(set(hows))}}
    print(f"test split (lookup table baseline, shape-interpolated): {fmt(lookup_metrics)}"
          f"  {lookup_metrics['how']}")
    lookup_table.save(lookup_table.build(df, target), staging / LOOKUP)

    manifest = {
        "format": FORMAT, "target": target,
        "target_transform": "log_ratio_to_roofline" if roof else "log",
        "roofline": {"peak_flop_per_us": roof["peaks"][0], "peak_bytes_per_us": roof["peaks"][1],
                     "floor_us": roof["floor_us"], "peaks_json": roof["source"],
                     # the most compute and the most memory traffic trained on (as time at the peaks): beyond
                     # either the ratio extrapolates poorly (a warning says so)
                     "train_max_compute_us": float(np.exp(X["log_compute_us"].iloc[tr].max())),
                     "train_max_memory_us": float(np.exp(X["log_memory_us"].iloc[tr].max()))} if roof else None,
        "features": feats, "generic_features": gfeats, "load_fields": load_fields,
        "type_codes": codes, "unseen_type_code": UNSEEN_CODE,
        "models": models, "per_type": per_type, "fallback_unknown_type": "generic",
        "candidates": candidates,
        "metrics": {"test": overall, "test_by_type": by_type, "test_by_stress_level": by_level,
                    "lookup_table_test": lookup_metrics},
        "lookup_table": LOOKUP,
        # models are picked on the same test split the metrics come from: slightly optimistic
        "selection": "per model key, lowest MAPE on the test split",
        "split": {"by": "Kernel_ID", "test_fraction": cfg["test_fraction"], "seed": cfg["seed"],
                  "train_rows": int(len(tr)), "test_rows": int(len(te)),
                  "train_kernels": int(df["Kernel_ID"].iloc[tr].nunique()),
                  "test_kernels": sorted(df["Kernel_ID"].iloc[te].unique().tolist())},
    }
    return manifest, staging


def metadata(df: pd.DataFrame, csv_path: Path, kind: str, slug: str, extra_csv=()) -> dict:
    import onnxruntime
    import sklearn
    import xgboost

    def mode(col):
        if col not in df.columns:
            return None
        vals = df[col].dropna().astype(str)
        return vals.mode()[0] if not vals.empty else None
    try:
        commit = subprocess.run(["git", "-C", str(paths.REPO), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"device": kind, "device_slug": slug, "gpu_name": mode("gpu_name"), "gpu_driver": mode("gpu_driver"),
            "ort_version": mode("ort_version"), "data_csv": str(csv_path), "data_sha256": sha256_file(csv_path),
            "extra_csv": {str(p): sha256_file(p) for p in extra_csv},
            "data_rows": int(len(df)), "stress_levels": sorted(df["stress_level"].dropna().unique().tolist())
            if "stress_level" in df.columns else [],
            "train_date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": {"xgboost": xgboost.__version__, "scikit-learn": sklearn.__version__,
                         "onnxruntime": onnxruntime.__version__, "python": sys.version.split()[0]},
            "hase_commit": commit}


def resolve_paths(cfg: dict) -> tuple:
    """(data csv, device slug); the local device is only probed when neither is given."""
    if cfg["data_csv"]:
        csv_path = Path(cfg["data_csv"])
        slug = cfg["device_slug"] or paths.slug(csv_path.resolve().parent.name)
        return csv_path, slug
    slug = cfg["device_slug"]
    if not slug:
        from hase.utils.ort_session import device_slug, gpu_info, resolve_device
        if cfg["device"] == "cuda" and not gpu_info():   # training needs no GPU, only its name
            raise HaseError("no GPU here to name the data folder: --set device_slug=<slug, e.g. nvidia-h200> "
                            "or --set data_csv=benchmark/results/<slug>/kernels.csv")
        slug = device_slug("cuda" if cfg["device"] == "cuda" else resolve_device(cfg["device"]))
    return paths.csv_or_gz(paths.bench_results_dir() / slug / "kernels.csv"), slug


def main() -> int:
    p = base_parser("Phase 5: train kernel latency models on the benchmark CSV", "training")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("training", args.log_level)
    roofline_of(cfg)   # a bad peaks.json fails here, before the data are read
    csv_path, slug = resolve_paths(cfg)
    df = load_dataset(csv_path, cfg["target"])
    for extra in cfg["extra_csv"]:   # more phase 4 kernel CSVs of the same device (later collections)
        df = pd.concat([df, load_dataset(extra, cfg["target"])], ignore_index=True)
    kind = device_kind(df, cfg["device"])
    if kind not in cfg["load_fields"]:
        raise HaseError(f"load_fields has no list for device '{kind}'")
    load_fields, df = usable_load_fields(df, list(cfg["load_fields"][kind]), log)
    if df.empty:
        raise HaseError("no rows left after dropping rows with empty load fields", csv_path)
    log.info("%s: %d rows, %d kernel configurations, %d types, load fields %s", csv_path, len(df),
             df["Kernel_ID"].nunique(), df["OpType"].nunique(), load_fields)
    out_dir = paths.train_models_dir() / slug
    manifest, staging = train(df, cfg, load_fields, out_dir, log)
    manifest["metadata"] = metadata(df, csv_path, kind, slug, cfg["extra_csv"])
    # what a standalone run of a kernel that does nothing costs (session + IOBinding overhead): the
    # whole-model timeline subtracts it from each predicted kernel time (inference/timeline_model.py)
    idle = df[df["stress_level"] == 0] if "stress_level" in df else df
    manifest["metadata"]["standalone_overhead_us"] = float(np.percentile(idle[cfg["target"]], 5) * 1e3)
    paths.atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    save_resolved(cfg, staging)
    shutil.rmtree(out_dir, ignore_errors=True)   # replace the whole folder: no stale model files
    os.replace(staging, out_dir)
    log.info("models and manifest in %s", out_dir)
    return 0


if __name__ == "__main__":
    run_main(main)
