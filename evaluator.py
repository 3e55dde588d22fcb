"""Phase 7.2: compare predicted with measured session.run latency.

  python evaluator.py model.onnx|models_dir [--device] [--set levels=[0,0.6]]     live: measure + predict
  python evaluator.py --from-csv benchmark/results/<gpu>/models.csv --records DIR  offline, from phase 4 data
  ... --fit-calibration                                                          fit a, b, c (seed 000's α·Σ+β)

Each case: model, bs, res, load, predicted, actual, error %. Baselines beside Hase's estimate:
  sum_ort_kernel_time  Σ ORT profiler _kernel_time (host time on CUDA EP; seeds 000/001)
  sum_standalone       Σ predicted standalone kernel latencies (nn-Meter style; the predictor's target)
  hase                 a·Σ + b + c·n_kernels·busy + d·MB copied, calibrated on measured models
Outputs (evaluation/<device slug>/ or --out): cases.csv, summary.json, pred_vs_actual.png, error_cdf.png.
"""
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from tqdm import tqdm  # noqa: E402

from inference.predict_model_latency import BG, load_calibration, predict_record, whole_model_ms  # noqa: E402
from utils import paths  # noqa: E402
from utils.config import base_parser, resolve, save_resolved  # noqa: E402
from utils.errors import HaseError, run_main  # noqa: E402
from utils.logger import get_logger  # noqa: E402
from utils.ort_session import device_slug, provenance, resolve_device  # noqa: E402

DEFAULTS = {"device": "auto", "predictor_dir": "", "calibration": "", "levels": [0.0], "stressor_mode": "matmul",
            "settle_s": 2.0, "bg_sample_s": 0.3, "warmup": 10, "budget_ms": 500, "min_loops": 10, "max_loops": 2000,
            "calibration_models": [], "pin_dims": {}, "seed": 0}
ESTIMATORS = ["hase", "sum_standalone", "sum_ort_kernel_time"]


def arch_of(model: str) -> str:
    return model.split("_bs")[0]


def shape_of(model: str) -> tuple:
    try:
        rest = model.split("_bs")[1]
        bs, res = rest.split("_")
        return int(bs), res
    except (IndexError, ValueError):
        return None, None


def error_pct(pred, actual):
    return (np.asarray(pred, float) - np.asarray(actual, float)) / np.asarray(actual, float) * 100.0


def summarize(df: pd.DataFrame, by: str = "condition") -> dict:
    out = {}
    for est in ESTIMATORS:
        col = f"{est}_ms"
        if col not in df or df[col].isna().all():
            continue
        for cond, g in [("all", df)] + list(df.groupby(by)):
            e = np.abs(error_pct(g[col], g["actual_ms"]))
            e = e[np.isfinite(e)]
            if len(e) == 0:
                continue
            out.setdefault(est, {})[str(cond)] = {
                "n": int(len(e)), "MAPE_pct": float(np.mean(e)),
                "RMSPE_pct": float(np.sqrt(np.mean(e ** 2))),
                "within_5pct": float(np.mean(e <= 5)), "within_10pct": float(np.mean(e <= 10)),
                "within_15pct": float(np.mean(e <= 15))}
    return out


def fit_calibration(df: pd.DataFrame) -> dict:
    """Least squares of actual = a·Σ + b + c·n_kernels·busy + d·MB over measured cases."""
    X = np.column_stack([df["sum_standalone_ms"], np.ones(len(df)), df["n_kernels"] * df["busy"], df["io_mb"]])
    # relative least squares: every case counts by its percentage error, not its milliseconds
    w = 1.0 / df["actual_ms"].to_numpy()
    coef, *_ = np.linalg.lstsq(X * w[:, None], df["actual_ms"].to_numpy() * w, rcond=None)
    return {"coef": {"a": float(coef[0]), "b": float(coef[1]), "c": float(coef[2]), "d": float(coef[3])},
            "n_cases": int(len(df)),
            "models": sorted(df["model"].unique().tolist())}


def apply_calibration(df: pd.DataFrame, calib) -> pd.Series:
    return pd.Series([whole_model_ms(s, n, b, calib, mb) for s, n, b, mb in
                      zip(df["sum_standalone_ms"], df["n_kernels"], df["busy"], df["io_mb"])], index=df.index)


def leave_one_arch_out(df: pd.DataFrame) -> dict:
    out = {}
    for arch in sorted(df["arch"].unique()):
        train, test = df[df["arch"] != arch], df[df["arch"] == arch]
        if train["arch"].nunique() < 1 or len(train) < 3:
            continue
        pred = apply_calibration(test, fit_calibration(train))
        e = np.abs(error_pct(pred, test["actual_ms"]))
        out[arch] = {"n": int(len(test)), "MAPE_pct": float(np.mean(e)), "within_10pct": float(np.mean(e <= 10))}
    return out


def plots(df: pd.DataFrame, out_dir: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 5))
    for est in ESTIMATORS:
        if f"{est}_ms" in df and df[f"{est}_ms"].notna().any():
            ax.scatter(df["actual_ms"], df[f"{est}_ms"], s=12, label=est)
    lim = [df["actual_ms"].min() * 0.8, df["actual_ms"].max() * 1.2]
    ax.plot(lim, lim, "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured ms", ylabel="predicted ms", title="predicted vs measured")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "pred_vs_actual.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 4))
    for est in ESTIMATORS:
        if f"{est}_ms" in df and df[f"{est}_ms"].notna().any():
            e = np.sort(np.abs(error_pct(df[f"{est}_ms"], df["actual_ms"])))
            ax.plot(e, np.arange(1, len(e) + 1) / len(e), label=est)
    ax.axvline(10, color="grey", ls=":")
    ax.set(xscale="log", xlabel="|error| %", ylabel="fraction of cases", title="error CDF")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "error_cdf.png", dpi=110)
    plt.close(fig)


def print_table(df: pd.DataFrame, summary: dict) -> None:
    print(f"{'model':28s} {'bs':>4s} {'res':>8s} {'load':>18s} {'predicted':>10s} {'actual':>10s} {'error%':>8s}")
    for _, r in df.iterrows():
        print(f"{r['model'][:28]:28s} {str(r['bs']):>4s} {str(r['res']):>8s} {str(r['condition'])[:18]:>18s} "
              f"{r['hase_ms']:10.3f} {r['actual_ms']:10.3f} {error_pct(r['hase_ms'], r['actual_ms']):8.1f}")
    for est, conds in summary.items():
        for cond, m in conds.items():
            print(f"  {est:20s} {cond:22s} n={m['n']:3d}  MAPE {m['MAPE_pct']:6.1f}%  "
                  f"±10% {100 * m['within_10pct']:5.1f}%")


# ---------- case building ----------
def predict_case(record: dict, predictor, load: dict, calib) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = predict_record(record, predictor, load, calib)
    return {"sum_standalone_ms": r["kernel_sum_ms"], "n_kernels": r["n_kernels"], "busy": r["busy"],
            "io_mb": r["io_mb"]}


def cases_from_csv(csv_path: Path, records_dir: Path, device: str, predictor, calib) -> pd.DataFrame:
    if not csv_path.exists():
        raise HaseError("file not found", csv_path)
    df = pd.read_csv(csv_path)
    if "status" in df:
        df = df[df["status"] == "ok"]
    rows = []
    for _, r in tqdm(df.iterrows(), total=len(df), desc="predict", unit="case"):
        rp = records_dir / f"{r['model']}.{device}.json"
        if not rp.exists():
            raise HaseError(f"no kernel record for model {r['model']}", rp)
        rec = json.loads(rp.read_text())
        load = {f: float(r[f]) for f in predictor.load_fields if f in r}
        missing = [f for f in predictor.load_fields if f not in r]
        if missing:
            raise HaseError(f"load field '{missing[0]}' missing from the data", csv_path)
        bs, res = shape_of(r["model"])
        rows.append({"model": r["model"], "arch": arch_of(r["model"]), "bs": bs, "res": res,
                     "condition": r.get("load", f"stress {r.get('stress_level')}"),
                     "stress_level": r.get("stress_level"), "actual_ms": float(r["latency_e2e_ms_median"]),
                     "sum_ort_kernel_time_ms": float(r["ort_kernel_time_sum_ms"]) if "ort_kernel_time_sum_ms" in r
                     and pd.notna(r["ort_kernel_time_sum_ms"]) else np.nan,
                     **predict_case(rec, predictor, load, calib)})
    return pd.DataFrame(rows)


def cases_live(targets: list, device: str, cfg: dict, predictor, calib, log) -> pd.DataFrame:
    from benchmark.gpu_metrics import make_source, snapshot
    from benchmark.ort_kernel_runner import measure, profile_node_times
    from benchmark.stressor import Stressor
    from inference.predict_model_latency import analyse
    from utils.onnx_io import dummy_feed
    from utils.ort_session import make_session
    fields = [f[len(BG):] for f in predictor.load_fields]
    rows = []
    records = {t: analyse(t, device, cfg) for t in tqdm(targets, desc="analyse", unit="model")}
    for level in cfg["levels"]:
        with Stressor(float(level), cfg["stressor_mode"], device):
            time.sleep(cfg["settle_s"] if level > 0 else 0)
            src = make_source({"source": "auto", "fields": fields}, device)
            src.start()
            try:
                for t in tqdm(targets, desc=f"level {level}", unit="model"):
                    sess = make_session(t, device, "all")
                    feed = dummy_feed(sess, seed=cfg["seed"])
                    load = {BG + k: v for k, v in snapshot(src, cfg["bg_sample_s"]).items()}  # model idle
                    m = measure(sess, feed, "e2e", warmup=cfg["warmup"], budget_ms=cfg["budget_ms"],
                                min_loops=cfg["min_loops"], max_loops=cfg["max_loops"])
                    nt = profile_node_times(t, device, runs=5)
                    bs, res = shape_of(t.stem)
                    rows.append({"model": t.stem, "arch": arch_of(t.stem), "bs": bs, "res": res,
                                 "condition": f"stressor {level}", "stress_level": level,
                                 "actual_ms": m["median_ms"],
                                 "sum_ort_kernel_time_ms": nt["kernel_time_sum_us"] / 1e3,
                                 **predict_case(records[t], predictor, load, calib)})
            finally:
                src.stop()
    return pd.DataFrame(rows)


def main() -> int:
    p = base_parser("Phase 7.2: evaluate predicted against measured latency", "inference")
    p.add_argument("target", nargs="?", type=Path, help="model .onnx or a folder of models (live mode)")
    p.add_argument("--from-csv", type=Path, help="phase 4 models.csv with measured latencies (offline mode)")
    p.add_argument("--records", type=Path, help="kernel records folder for --from-csv (default phase 2 folder)")
    p.add_argument("--fit-calibration", action="store_true", help="fit a, b, c on these cases and save them")
    p.add_argument("--out", type=Path, help="output folder (default evaluation/<device slug>/)")
    args = p.parse_args()
    # evaluator keys live under this script's own defaults; inference/config.yaml is not read here
    cfg = resolve(DEFAULTS, None, args.overrides, args.device)
    log = get_logger("evaluator", args.log_level)
    device = resolve_device(cfg["device"]) if not args.from_csv else (args.device if args.device in ("cpu", "cuda")
                                                                      else "cuda")
    slug = args.from_csv.parent.name if args.from_csv else device_slug(device)
    from training.train_kernel_model import load_predictor
    predictor = load_predictor(Path(cfg["predictor_dir"]) if cfg["predictor_dir"] else paths.train_models_dir() / slug)
    calib, cpath = load_calibration(cfg, slug)
    if args.from_csv:
        df = cases_from_csv(args.from_csv, args.records or paths.kernel_record_dir(), device, predictor, calib)
    elif args.target:
        if not args.target.exists():
            raise HaseError("file not found", args.target)
        targets = sorted(q for q in args.target.glob("*.onnx") if ".opt." not in q.name) \
            if args.target.is_dir() else [args.target]
        if not targets:
            raise HaseError("no .onnx models in folder", args.target)
        df = cases_live(targets, device, cfg, predictor, calib, log)
    else:
        raise HaseError("give a model/folder, or --from-csv")
    if df.empty:
        raise HaseError("no cases to evaluate")
    out_dir = args.out or (paths.evaluation_dir() / slug)
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = {}
    if args.fit_calibration:
        fit_df = df[df["arch"].isin(cfg["calibration_models"])] if cfg["calibration_models"] else df
        calib = fit_calibration(fit_df)
        calib.update({"fitted_on": str(args.from_csv or args.target), "provenance": provenance(device)})
        cpath = paths.inference_results_dir() / slug / "calibration.json"
        paths.atomic_write_text(cpath, json.dumps(calib, indent=1) + "\n")
        log.info("calibration %s written to %s", calib["coef"], cpath)
        extra["leave_one_architecture_out"] = leave_one_arch_out(df)
    df["sum_standalone_ms"] = df["sum_standalone_ms"].astype(float)
    df["hase_ms"] = apply_calibration(df, calib) if calib else df["sum_standalone_ms"]
    df["error_pct"] = error_pct(df["hase_ms"], df["actual_ms"])
    summary = {"by_condition": summarize(df), "calibration": calib, "calibration_file": str(cpath) if calib else None,
               "cases": int(len(df)), **extra}
    df.to_csv(out_dir / "cases.csv", index=False)
    paths.atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=1, default=str) + "\n")
    plots(df, out_dir)
    save_resolved(cfg, out_dir)
    print_table(df, summary["by_condition"])
    if "leave_one_architecture_out" in extra:
        for arch, m in extra["leave_one_architecture_out"].items():
            print(f"  leave-one-architecture-out {arch:20s} MAPE {m['MAPE_pct']:6.1f}%  ±10% {100 * m['within_10pct']:5.1f}%")
    print(f"wrote {out_dir}/cases.csv, summary.json, pred_vs_actual.png, error_cdf.png")
    return 0


if __name__ == "__main__":
    run_main(main)
