"""The predictor that ships with Hase, per GPU: phase 5 on ALL of the GPU's kernel-space data, stored compactly.

  python training/build_predictor.py --set gpu=nvidia-h200        (or: hase build-predictor --gpu nvidia-h200)

Same data, labels, features and trees as training/kernel_space_report.py's phase 5 (the GPU's kernel-space tables
combined, kernels re-measured in several sessions labelled by their median; XGBoost with the report's deeper
trees), XGBoost only (the report's phase 5 also tries random forests: 78-93 MB of ONNX per predictor):
  1. selection on phase 5's split (20% of the Kernel_IDs held out): global, generic and per-type models fitted on
     the other 80%; a type keeps its own model when that beats the global one on its held-out rows. The composed
     predictor's held-out metrics go into the manifest (`metrics.test`): the accuracy to expect on unseen kernels.
  2. the kept models fitted again on every kernel (held-out ones and the ten outside architectures' included:
     the default predictor; the `-kspace-noheldout` predictors are judging artifacts of the report).
  3. written as training/predictors/<gpu>/: manifest.json (phase 5's format; models point into the compact
     file), forests.npz.xz (the trees as arrays, evaluated with numpy by training/kernel_predictor.py) and
     lookup_table.json.xz. A few MB; committed, so a fresh clone predicts without building anything.
Progress: one log line per fitted model.
"""
import datetime
import json
import math
import shutil
import tempfile
import time
from pathlib import Path


import numpy as np  # noqa: E402

from hase.training import lookup_table  # noqa: E402
from hase.training.features import (META_TYPE, UNSEEN_CODE, feature_frame, feature_names,  # noqa: E402
                               generic_feature_names, type_vocabulary)
from hase.training.kernel_predictor import FORESTS, FORMAT, MANIFEST, forest_arrays, save_forests  # noqa: E402
from hase.training.kernel_space_report import DEFAULTS as REPORT, combine  # noqa: E402
from hase.training.train_kernel_model import best_of, group_split, load_dataset, sha256_file  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.metrics import accuracy, fmt  # noqa: E402

DEFAULTS = {"gpu": "nvidia-h200", "gpus": REPORT["gpus"], "target": REPORT["target"], "label": REPORT["label"],
            "test_fraction": REPORT["test_fraction"], "seed": REPORT["seed"],
            "min_rows_per_type": 30, "min_kernels_per_type": 4,
            "xgboost": dict(REPORT["xgboost"]), "n_jobs": 0,
            # leave these architectures' own kernels out (the judging variant, as the report's noheldout_archs):
            # [] for the shipped predictor
            "exclude_archs": [],
            "out": ""}   # "" = training/predictors/<gpu> in the repository


def out_dir(cfg: dict) -> Path:
    return Path(cfg["out"]) if cfg["out"] else paths.REPO / "training" / "predictors" / cfg["gpu"]


def _fit(X, y, cfg: dict):
    import xgboost as xgb
    return xgb.XGBRegressor(objective="reg:squarederror", random_state=cfg["seed"], n_jobs=cfg["n_jobs"] or -1,
                            **cfg["xgboost"]).fit(X.to_numpy(np.float32), y)


def _pred(model, X) -> np.ndarray:
    return np.asarray(model.predict(X.to_numpy(np.float32)), float).ravel()


def build(cfg: dict, log) -> dict:
    gpu = cfg["gpu"]
    if gpu not in cfg["gpus"]:
        raise HaseError(f"no kernel-space tables for GPU '{gpu}' (have: {', '.join(sorted(cfg['gpus']))})", "gpu")
    srcs = [paths.REPO / s if not Path(s).is_absolute() else Path(s) for s in cfg["gpus"][gpu]]
    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="hase_build_"))
    try:
        csv = combine([str(s) for s in srcs], tmp / f"{gpu}.csv", cfg["label"], cfg["target"])
        df = load_dataset(csv, cfg["target"])
        if cfg["exclude_archs"]:
            held = df["source"].astype(str).str.match("|".join(f"{a}_bs" for a in cfg["exclude_archs"]))
            log.info("leaving out %d kernels of %d architectures", int(held.sum()), len(cfg["exclude_archs"]))
            df = df[~held].reset_index(drop=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    target = cfg["target"]
    codes = type_vocabulary(df["OpType"])
    X = feature_frame(df, [], codes)
    feats, gfeats = feature_names([]), generic_feature_names([])
    y_ms = df[target].to_numpy(float)
    y = np.log(y_ms)
    types = X[META_TYPE].to_numpy()
    tr, te = group_split(df["Kernel_ID"].to_numpy(), cfg["test_fraction"], cfg["seed"])
    log.info("%s: %d kernels, %d types; selection split %d / %d rows", gpu, len(df), len(codes), len(tr), len(te))
    cand_types = []
    for t in sorted(codes):
        rows_tr = np.where(types[tr] == t)[0]
        n_k = df["Kernel_ID"].iloc[tr].iloc[rows_tr].nunique() if len(rows_tr) else 0
        if len(rows_tr) >= cfg["min_rows_per_type"] and n_k >= cfg["min_kernels_per_type"] \
                and (types[te] == t).any():
            cand_types.append(t)
    n_fits, done = 2 + len(cand_types), 0

    def step(what):
        nonlocal done
        done += 1
        log.info("[%d/%d fits, %.0f s] %s", done, n_fits, time.perf_counter() - t_start, what)

    # 1. selection on the split
    Xtr, Xte = X.iloc[tr], X.iloc[te]
    sel = {}
    for key, cols in (("global", feats), ("generic", gfeats)):
        sel[key] = _pred(_fit(Xtr[cols], y[tr], cfg), Xte[cols])
        step(f"selection: {key}")
    final = sel["global"].copy()
    per_type, candidates = {t: "global" for t in codes}, {}
    for t in cand_types:
        r_tr, r_te = np.where(types[tr] == t)[0], np.where(types[te] == t)[0]
        p = _pred(_fit(Xtr.iloc[r_tr][feats], y[tr][r_tr], cfg), Xte.iloc[r_te][feats])
        cands = {"global": accuracy(np.exp(sel["global"][r_te]), y_ms[te][r_te]), "xgboost": accuracy(np.exp(p), y_ms[te][r_te])}
        candidates[f"type/{t}"] = cands
        if best_of(cands) == "xgboost":
            per_type[t] = f"type/{t}"
            final[r_te] = p
        step(f"selection: type {t} -> {per_type[t]}")
    overall = accuracy(np.exp(final), y_ms[te])
    by_type = {t: accuracy(np.exp(final[types[te] == t]), y_ms[te][types[te] == t]) for t in sorted(set(types[te]))}
    log.info("held-out configurations (composed, fitted on 80%%): %s", fmt(overall))

    # 2. the kept models on every kernel
    keys = ["global", "generic"] + sorted({k for k in per_type.values() if k != "global"})
    n_fits, done = n_fits + len(keys), done
    forests, models = {}, {}
    for key in keys:
        cols = gfeats if key == "generic" else feats
        rows = np.arange(len(df)) if not key.startswith("type/") else np.where(types == key[5:])[0]
        booster = _fit(X.iloc[rows][cols], y[rows], cfg).get_booster()
        forests[key] = forest_arrays(booster)
        models[key] = {"algo": "xgboost", "features": cols, "compact": FORESTS, "train_rows": int(len(rows)),
                       "trees": int(len(forests[key]["ptr"]) - 1)}
        step(f"all data: {key} ({len(rows)} rows)")

    out = out_dir(cfg)
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_forests(forests, staging / FORESTS)
    lt = staging / "lookup_table.json"
    lookup_table.save(lookup_table.build(df, target), lt)
    paths.atomic_write_bytes(staging / "lookup_table.json.xz", __import__("lzma").compress(lt.read_bytes(), preset=9))
    lt.unlink()

    def mode(col):
        vals = df[col].dropna().astype(str) if col in df.columns else []
        return vals.mode()[0] if len(vals) else None
    manifest = {
        "format": FORMAT, "target": target, "target_transform": "log", "roofline": None,
        "features": feats, "generic_features": gfeats, "load_fields": [], "type_codes": codes,
        "unseen_type_code": UNSEEN_CODE, "models": models, "per_type": per_type, "fallback_unknown_type": "generic",
        "candidates": candidates,
        "metrics": {"test": overall, "test_by_type": by_type,
                    "note": "models selected and judged on phase 5's split (80% of Kernel_IDs); then refitted on all"},
        "lookup_table": "lookup_table.json.xz",
        "selection": "per type: its own XGBoost or the global one, lowest MAPE on the held-out split",
        "split": {"by": "Kernel_ID", "test_fraction": cfg["test_fraction"], "seed": cfg["seed"],
                  "train_rows": int(len(tr)), "test_rows": int(len(te))},
        "trained_on": ("all rows (the held-out split and every architecture included)" if not cfg["exclude_archs"]
                       else f"all rows but the kernels of {len(cfg['exclude_archs'])} architectures (a judging variant)"),
        "excluded_archs": list(cfg["exclude_archs"]),
        "metadata": {"device": "cuda", "device_slug": gpu, "gpu_name": mode("gpu_name"),
                     "gpu_driver": mode("gpu_driver"), "ort_version": mode("ort_version"),
                     "data": {paths.portable(s): sha256_file(s) for s in srcs}, "label": cfg["label"],
                     "data_rows": int(len(df)), "xgboost": cfg["xgboost"],
                     "standalone_overhead_us": float(np.percentile(y_ms, 5) * 1e3),
                     "built_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "build_s": round(time.perf_counter() - t_start, 1)},
    }
    paths.atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    size = sum(f.stat().st_size for f in out.iterdir())
    log.info("%s: %s (%.1f MB) in %.0f s", gpu, out, size / 1e6, time.perf_counter() - t_start)
    return {"dir": str(out), "bytes": size, "test": overall}


def main() -> int:
    p = base_parser("Build the shipped (compact, all-data) kernel predictor of a GPU", "training",
                    "build_predictor.yaml")
    p.add_argument("--gpu", help="the GPU (a key of `gpus`); same as --set gpu=...")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    if args.gpu:
        cfg["gpu"] = args.gpu
    log = get_logger("training", args.log_level)
    res = build(cfg, log)
    print(f"{cfg['gpu']}: {res['dir']} ({res['bytes'] / 1e6:.1f} MB); held-out configurations MAPE "
          f"{res['test']['mape_pct']:.1f}%")
    return 0 if math.isfinite(res["test"]["mape_pct"]) else 1


if __name__ == "__main__":
    run_main(main)
