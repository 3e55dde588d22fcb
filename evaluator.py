"""Phase 7.2: compare predicted with measured session.run latency.

  python evaluator.py model.onnx|models_dir [--device] [--set levels=[0,0.6]]      live: measure + predict
      [--set 'loads=[{kind: stressor, level: 0}, {kind: corunner, name: cnn_train, knob: 0.3}]']
  python evaluator.py --from-csv benchmark/results/<gpu>/models.csv [--from-csv more.csv] [--records DIR]
                      [--fit]                                                        offline, phase 4 data

--fit fits Hase's whole-model timeline model (inference/timeline_model.py) on the training cases
only: architectures in `train_archs` under the loads in `train_loads` (the plan's stressor); it is
saved to inference/results/<slug>/timeline_model.json, which predict_model_latency.py reads.
Every other case is a test: held-out architectures, and held-out neighbours (co-runners).

Each case: model, bs, res, load, predicted, actual, error %. Estimators in every report:
  hase                 timeline model (host dispatch / GPU stream / copies) + time-slice interference
  hase_ignore_load     the same model at idle load ("ignore the load" baseline of the neighbour issue)
  lookup_table         the same timeline with every kernel time from the phase 4 lookup table
                       (exact, or interpolated over shape; the regressor only for unmeasured types)
  sum_standalone       Σ predicted standalone kernel latencies (nn-Meter style)
  alpha_sum_beta       α·Σ + β fitted on the training cases (seed 000's proposal)
  sum_ort_kernel_time  Σ ORT profiler _kernel_time as measured (host time on CUDA EP; seeds 000/001)
Outputs (evaluation/<slug>/ or --out): cases.csv, summary.json, pred_vs_actual.png, error_cdf.png,
slowdown_heldout.png (predicted vs measured slowdown under held-out neighbours).

The measured label (actual_ms) is, like phase 4's, the median over `label_sessions` fresh sessions
(default 3; live mode measures them, --from-csv reads collector's) of each session's `actual_stat`;
cases.csv keeps its spread across sessions beside it: actual_sessions_p10_ms, actual_sessions_p90_ms
and actual_sessions (empty p10/p90 and 1 session for a models.csv from before label_sessions).
"""
import json
import time
import warnings
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from hase.utils.progress import progress  # noqa: E402

from hase.inference import timeline_model as tm  # noqa: E402
from hase.inference.predict_model_latency import BG, check_ep, load_timeline_model, prepare_record  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.metrics import accuracy, error_pct  # noqa: E402
from hase.utils.ort_session import device_slug, provenance, resolve_device  # noqa: E402
from hase.utils.plots import save_png  # noqa: E402

DEFAULTS = {"device": "auto", "predictor_dir": "", "timeline_model": "", "bandwidth_table": "",
            "levels": [0.0], "stressor_mode": "matmul", "loads": [], "settle_s": 2.0, "bg_sample_s": 0.3, "warmup": 10,
            "budget_ms": 500, "min_loops": 10, "max_loops": 2000,
            "train_archs": [], "train_loads": ["stressor-matmul"], "gpu_floor_frac": 0.2,
            "fit_idle": ["c0_us", "kappa", "overhead_us"], "fit_copy": ["copy_scale"], "fit_load": ["alpha", "beta_us"],
            "pin_dims": {}, "seed": 0,
            # --fit: the idle training cases are the timeline's idle reference (idle_load); their median busy field
            # (bg CPU util / GR engine active, as a fraction) above this is refused (1 = never)
            "idle_busy_max": 0.1,
            "label_sessions": 3,  # live mode: fresh sessions per measured case (>= 1); label = median over them
            "actual_stat": "mean"}  # statistic of the measured session.run times that is predicted: mean | median
ESTIMATORS = ["hase", "hase_ignore_load", "lookup_table", "sum_standalone", "alpha_sum_beta", "sum_ort_kernel_time"]


def shape_of(model: str) -> tuple:
    try:
        rest = model.split("_bs")[1]
        bs, res = rest.split("_")
        return int(bs), res
    except (IndexError, ValueError):
        return None, None


def summarize(df: pd.DataFrame, by: str) -> dict:
    out = {}
    for est in ESTIMATORS:
        col = f"{est}_ms"
        if col not in df or df[col].isna().all():
            continue
        for cond, g in [("all", df)] + list(df.groupby(by)):
            m = accuracy(g[col], g["actual_ms"])
            if m["n"]:
                out.setdefault(est, {})[str(cond)] = m
    return out


# ---------- data -> cases ----------
def node_times_beside(csv_path: Path):
    for name in ("node_times.csv", "node_times.csv.gz"):
        if (csv_path.parent / name).exists():
            return pd.read_csv(csv_path.parent / name)
    return None


def find_record(records_dir: Path, model: str, device: str) -> dict:
    """The model's phase 2 record: a folder of <model>.<device>.json[.gz] or one records.json.xz."""
    from hase.graph_model.dag_critical_path import load_records
    if not str(records_dir).endswith(".json.xz") and not any(
            (Path(records_dir) / f"{model}.{device}.{x}").exists() for x in ("json", "json.gz")):
        raise HaseError(f"no kernel record for model {model} (phase 2)", records_dir)
    return load_records(records_dir, [model], device)[model]


def actual_column(cfg: dict, source) -> str:
    if cfg["actual_stat"] not in ("median", "mean"):
        raise HaseError(f"actual_stat must be median or mean, not '{cfg['actual_stat']}'", source)
    return f"latency_e2e_ms_{cfg['actual_stat']}"


def session_spread(df: pd.DataFrame, actual: str) -> pd.DataFrame:
    """actual_sessions_p10_ms / _p90_ms / actual_sessions from a models.csv's session columns (phase 4
    with label_sessions); a CSV from before them: NaN spread, one session."""
    nan = pd.Series(np.nan, index=df.index)
    return df.assign(actual_sessions_p10_ms=df.get(f"{actual}_sessions_p10", nan).astype(float),
                     actual_sessions_p90_ms=df.get(f"{actual}_sessions_p90", nan).astype(float),
                     actual_sessions=df.get("label_sessions", pd.Series(1, index=df.index)).fillna(1).astype(int))


def read_cases(csv_paths: list, records_dir: Path, device: str, cfg: dict) -> tuple:
    """(cases DataFrame with measurements and load columns, {model: record}, node_times DataFrame)."""
    frames, nts = [], []
    for i, path in enumerate(csv_paths):
        if not path.exists():
            raise HaseError("file not found", path)
        df = pd.read_csv(path)
        for col in ("model", "load", "stress_level", actual_column(cfg, path)):
            if col not in df:
                raise HaseError(f"no column '{col}' (not a phase 4 models.csv)", path)
        df = df[df["status"] == "ok"] if "status" in df else df
        df = df.assign(session=i, source=str(path))
        frames.append(df)
        nt = node_times_beside(path)
        if nt is not None:
            nts.append(nt)
    df = pd.concat(frames, ignore_index=True)
    records = {m: find_record(records_dir, m, device) for m in sorted(df["model"].unique())}
    train_archs = set(cfg["train_archs"]) or set(df["model"].map(paths.model_arch))
    idle = (df["stress_level"] == 0) & df["load"].isin(cfg["train_loads"])
    df["arch"] = df["model"].map(paths.model_arch)
    df["bs"], df["res"] = zip(*df["model"].map(shape_of))
    df["condition"] = np.where(idle, "idle", df["load"] + "@" + df["stress_level"].map("{:g}".format))
    df["load_split"] = np.where(idle, "idle", np.where(df["load"].isin(cfg["train_loads"]), "training load",
                                                       "held-out neighbour"))
    df["model_split"] = np.where(df["arch"].isin(train_archs), "training arch", "held-out arch")
    df["is_train"] = df["arch"].isin(train_archs) & df["load"].isin(cfg["train_loads"])
    df["actual_ms"] = df[actual_column(cfg, csv_paths[0])].astype(float)
    df = session_spread(df, actual_column(cfg, csv_paths[0]))
    df["actual_device_ms"] = df.get("latency_device_ms_median", np.nan)
    df["sum_ort_kernel_time_ms"] = df.get("ort_kernel_time_sum_ms", np.nan)
    node_times = pd.concat(nts, ignore_index=True) if nts else None
    return df, records, node_times


CPU_UNFITTED = ("kappa", "copy_scale", "beta_us")   # constants a CPU EP fit leaves alone (build_timeline_model)


def check_idle_load(idle_load: dict, n: int, busy_max: float, source) -> None:
    """The fit's idle reference must be idle: the median busy field of its idle cases <= busy_max (a fraction),
    else HaseError naming the field, its value and the threshold (a loaded baseline made the 'idle' prediction 3x
    the loaded one)."""
    from hase.benchmark.gpu_metrics import busy_reading, not_idle
    field, value, frac = busy_reading(idle_load, BG)
    if frac is not None and frac > busy_max and busy_max < 1:
        raise HaseError("the idle cases of the fit were measured under load: bg_" + not_idle(
            field, value, busy_max, "idle_busy_max", f"(median of {n} idle cases)")
            + "; measure stress level 0 again on an idle machine, or raise idle_busy_max", source)


def params_text(p: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in p.items())


def build_timeline_model(df, records, node_times, predictor, bw, cfg, log, label="all training architectures") -> tuple:
    """Fit the timeline model on the training cases; returns (model, preps). label: which fit this is in the log
    (the saved one, or a leave-one-architecture-out refit)."""
    train = df[df["is_train"]]
    if train.empty:
        raise HaseError("no training cases (train_archs under train_loads) to fit on")
    if node_times is None:
        raise HaseError("no node_times.csv beside the training models.csv (phase 4 writes it)")
    lf = predictor.load_fields
    idle_rows = train[train["stress_level"] == 0]
    idle_load = {f: float(idle_rows[f].median()) for f in lf}
    check_idle_load(idle_load, len(idle_rows), float(cfg["idle_busy_max"]), df["source"].iloc[0])
    meta = predictor.manifest.get("metadata", {})
    if "standalone_overhead_us" not in meta:
        raise HaseError("the kernel predictor predates standalone_overhead_us: retrain it (phase 5)")
    clocks = idle_rows[BG + tm.CLOCK] if BG + tm.CLOCK in idle_rows else pd.Series(dtype=float)
    model = {"host_table": tm.host_table(node_times, {m: records[m] for m in train["model"].unique()}),
             "standalone_overhead_us": float(meta["standalone_overhead_us"]),
             "gpu_floor_frac": float(cfg["gpu_floor_frac"]), "bandwidth": bw, "idle_load": idle_load,
             "idle_clock_mhz": float(clocks.median()) if clocks.notna().any() else 0.0,
             "statistic": cfg["actual_stat"]}  # of session.run times the constants were fitted to
    preps = {m: prepare_record(records[m], predictor, model) for m in df["model"].unique()}
    p = dict(tm.DEFAULT_PARAMS, overhead_us=model["standalone_overhead_us"])
    # CPU EP: the ORT-profiled node time (the host table) IS the node's compute, which the kernel times already
    # hold: kappa stays 0 (fitted, it took 0.54 on resnet18 alone and put resnet18's per-op-type node times on
    # mobilenet_v2's 56 nodes: +600% left out); no copies and no launches: copy_scale and beta_us do nothing
    cpu = all(pr["device"] == "cpu" for pr in preps.values())
    fixed = CPU_UNFITTED if cpu else ()
    if cpu:
        p["kappa"] = 0.0

    def cases(rows, col):
        return [(preps[r["model"]], r, float(r[col])) for _, r in rows.iterrows() if np.isfinite(float(r[col]))]

    def free(keys):
        return tuple(k for k in keys if k not in fixed)
    clk = model["idle_clock_mhz"]
    if free(cfg["fit_idle"]):
        p = tm.fit_params(cases(idle_rows, "actual_device_ms"), clk, free(cfg["fit_idle"]), p, copies=False)
    if free(cfg["fit_copy"]):
        p = tm.fit_params(cases(idle_rows, "actual_ms"), clk, free(cfg["fit_copy"]), p)
    loaded = train[train["stress_level"] > 0]
    if free(cfg["fit_load"]) and not loaded.empty:
        p = tm.fit_params(cases(loaded, "actual_ms"), clk, free(cfg["fit_load"]), p)
    model["params"] = p
    fitted = list(dict.fromkeys(free(cfg["fit_idle"]) + free(cfg["fit_copy"])
                                + (free(cfg["fit_load"]) if not loaded.empty else ())))
    model["fitted"], model["at_bounds"] = fitted, tm.at_bounds(p, fitted)
    for b in model["at_bounds"]:
        log.warning("timeline model (%s): %s = %.4g is at its %s bound %g", label, b["param"], b["value"], b["bound"],
                    b["limit"])
    # seed 000's baseline, fitted on the same training cases: session.run = alpha * Σ standalone + beta
    sums = train["model"].map(lambda m: preps[m]["standalone_sum_ms"]).to_numpy()
    w = 1.0 / train["actual_ms"].to_numpy()
    (a, b), *_ = np.linalg.lstsq(np.column_stack([sums, np.ones(len(sums))]) * w[:, None],
                                 train["actual_ms"].to_numpy() * w, rcond=None)
    model["alpha_sum_beta"] = {"alpha": float(a), "beta_ms": float(b)}
    model["fitted_on"] = {"cases": int(len(train)), "models": sorted(train["model"].unique().tolist()),
                          "loads": sorted(train["condition"].unique().tolist())}
    log.info("timeline model (%s): %s", label, params_text(p))
    return model, preps


def lookup_preps(records: dict, predictor, model: dict) -> dict:
    """Timeline inputs with kernel times from the lookup table (seed 003's baseline)."""
    if predictor.lookup is None:
        return {}
    out = {}
    for m, rec in records.items():
        got = predictor.lookup.predict_kernels(rec["kernels"], model["idle_load"])
        if any(np.isnan(ms) for ms, _ in got.values()):   # a type the table never saw: the regressor
            fallback = predictor.predict_kernels(rec["kernels"], model["idle_load"])
            got = {k: (fallback[k], how) if np.isnan(ms) else (ms, how) for k, (ms, how) in got.items()}
        out[m] = tm.prepared(rec, {k: ms for k, (ms, _) in got.items()}, model)
    return out


def alpha_sum_beta(sum_ms, model: dict):
    c = model.get("alpha_sum_beta")
    return c["alpha"] * np.asarray(sum_ms, float) + c["beta_ms"] if c else np.full(len(sum_ms), np.nan)


def predict_cases(df: pd.DataFrame, preps: dict, model: dict, lpreps=None) -> pd.DataFrame:
    p, clk = model["params"], model["idle_clock_mhz"]
    idle = model["idle_load"]
    df = df.copy()
    if lpreps:
        df["lookup_table_ms"] = [tm.predict_ms(lpreps[m], p, r, clk) for m, (_, r) in zip(df["model"], df.iterrows())]
    df["hase_ms"] = [tm.predict_ms(preps[m], p, r, clk) for m, (_, r) in zip(df["model"], df.iterrows())]
    df["hase_ignore_load_ms"] = [tm.predict_ms(preps[m], p, idle, clk) for m in df["model"]]
    df["sum_standalone_ms"] = [preps[m]["standalone_sum_ms"] for m in df["model"]]
    df["alpha_sum_beta_ms"] = alpha_sum_beta(df["sum_standalone_ms"], model)
    df["error_pct"] = error_pct(df["hase_ms"], df["actual_ms"])
    return df


def slowdowns(df: pd.DataFrame) -> pd.DataFrame:
    """Measured and predicted slowdown of each loaded case against the same session's idle case."""
    cols = ["model", "condition", "load_split", "model_split", "measured", "predicted", "error_pct"]
    idle = df[df["condition"] == "idle"].set_index(["session", "model"])
    rows = df[df["condition"] != "idle"]
    if rows.empty or idle.empty:  # idle-only runs (the live default, levels [0]) have no slowdown to report
        return pd.DataFrame(columns=cols)
    keys = list(zip(rows["session"], rows["model"]))
    ok = [k in idle.index for k in keys]
    rows = rows[ok]
    ii = idle.loc[[k for k, o in zip(keys, ok) if o]]
    out = rows[["model", "condition", "load_split", "model_split"]].copy()
    out["measured"] = rows["actual_ms"].to_numpy() / ii["actual_ms"].to_numpy()
    out["predicted"] = rows["hase_ms"].to_numpy() / ii["hase_ms"].to_numpy()
    out["error_pct"] = error_pct(out["predicted"], out["measured"])
    return out


def leave_one_arch_out(df, records, node_times, predictor, bw, cfg, log) -> dict:
    """Refit the timeline model without one training architecture and predict it (kernel regressors
    are not retrained: see the report)."""
    out = {}
    for arch in sorted(df.loc[df["is_train"], "arch"].unique()):
        sub = df.assign(is_train=df["is_train"] & (df["arch"] != arch))
        if not sub["is_train"].any():
            continue
        model, preps = build_timeline_model(sub, records, node_times, predictor, bw, cfg, log,
                                            f"leave-one-architecture-out refit without {arch}, not saved")
        test = predict_cases(sub[sub["arch"] == arch], preps, model)
        refit_on = sorted(sub.loc[sub["is_train"], "arch"].unique().tolist())
        out[arch] = {**accuracy(test["hase_ms"], test["actual_ms"]), "refit_on": refit_on,
                     "at_bounds": model["at_bounds"]}
    return out


def loao_line(arch: str, m: dict) -> str:
    """One leave-one-architecture-out result, with what it was refitted on: with one architecture left the fixed
    cost and the per-node terms are one equation, so its error says little about unseen architectures. A constant
    the refit left on its bound is named (the log's warning says the same)."""
    on = m.get("refit_on", [])
    line = (f"  leave-one-architecture-out {arch:20s} MAPE {m['mape_pct']:6.1f}%  ±10% {m['within_10pct']:5.1f}%  "
            f"(constants refitted on {len(on)} other architecture{'s' if len(on) != 1 else ''}: {', '.join(on)}")
    if len(on) < 2:
        line += "; one architecture cannot tell the fixed cost from the per-node terms: indicative only"
    for b in m.get("at_bounds") or []:   # the refit pushed a constant out of its physical range
        line += f"; {b['param']} ended at its {b['bound']} bound {b['limit']:g}: that term is not what the data show"
    return line + ")"


# ---------- live ----------
def live_loads(cfg: dict) -> list:
    """Collector-style loads: `loads` if given (stressor levels and co-runners), else `levels`."""
    from hase.benchmark.collector import parse_loads
    return parse_loads({"loads": cfg["loads"], "stress_levels": cfg["levels"], "stressor_mode": cfg["stressor_mode"]})


def cases_live(targets: list, device: str, cfg: dict, predictor, model) -> pd.DataFrame:
    """Measure each target under each load the way phase 4 measures models (collector.measure_item:
    session, background sample while it is idle, warm-up, timed loop), then predict it."""
    from hase.benchmark.collector import check_label_sessions, make_load, measure_item
    from hase.benchmark.gpu_metrics import make_source
    from hase.benchmark.ort_kernel_runner import profile_node_times
    from hase.inference.predict_model_latency import analyse
    actual = actual_column(cfg, "evaluator config")  # a bad statistic fails before any measurement
    n_sessions = check_label_sessions(cfg["label_sessions"])
    fields = [f[len(BG):] for f in predictor.load_fields]
    item_cfg = {"runner": {k: cfg[k] for k in ("warmup", "budget_ms", "min_loops", "max_loops")},
                "modes": ["e2e"], "threads": 0, "device_id": 0, "bg_sample_ms": cfg["bg_sample_s"] * 1e3}
    loads = live_loads(cfg)
    records = {t: analyse(t, device, cfg) for t in progress(targets, desc="analyse", unit="model")}
    preps = {t.stem: prepare_record(records[t], predictor, model) for t in targets}
    rows = []
    for ld in loads:
        idle = ld["level"] == 0
        with make_load(ld, device, {"stressor": {"period_ms": 20, "size": 0}, "device_id": 0}):
            time.sleep(0 if idle else cfg["settle_s"])
            src = make_source({"source": "auto", "fields": fields}, device)
            src.start()
            try:
                for t in progress(targets, desc=f"{ld['name']}@{ld['level']:g}", unit="model"):
                    m = measure_item(t, device, "all", item_cfg, src, fields, sessions=n_sessions)
                    if m["status"] != "ok":
                        raise HaseError(f"cannot measure it under {ld['name']}@{ld['level']:g}: {m['error']}", t)
                    nt = profile_node_times(t, device, runs=5, feed=m["_feed"])
                    bs, res = shape_of(t.stem)
                    split = "idle" if idle else ("training load" if ld["name"] in cfg["train_loads"]
                                                 else "held-out neighbour")
                    rows.append({"model": t.stem, "arch": paths.model_arch(t.stem), "bs": bs, "res": res, "session": 0,
                                 "condition": "idle" if idle else f"{ld['name']}@{ld['level']:g}",
                                 "load": ld["name"], "stress_level": ld["level"], "load_split": split,
                                 "model_split": "live", "is_train": False, "actual_ms": m[actual],
                                 "actual_sessions_p10_ms": m[f"{actual}_sessions_p10"],
                                 "actual_sessions_p90_ms": m[f"{actual}_sessions_p90"],
                                 "actual_sessions": m["label_sessions"],
                                 "sum_ort_kernel_time_ms": nt["kernel_time_sum_us"] / 1e3,
                                 **{BG + f: m[BG + f] for f in fields}})
            finally:
                src.stop()
    return predict_cases(pd.DataFrame(rows), preps, model)  # the bg_ columns are each row's load


# ---------- report ----------
def draw_pred_vs_actual(ax, df: pd.DataFrame) -> None:
    """Predicted vs measured ms: the ±10% band, the baselines faint underneath, Hase on top."""
    lo, hi = df["actual_ms"].min() * 0.8, df["actual_ms"].max() * 1.2
    xs = np.geomspace(lo, hi, 50)
    ax.fill_between(xs, xs * 0.9, xs * 1.1, color="0.85", zorder=0, label="±10%")
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, zorder=1)
    baselines = [e for e in ESTIMATORS if e != "hase"]
    colors = dict(zip(baselines, ["C0", "C1", "C2", "C4", "C5", "C6"]), hase="C3")  # C3 (red) is Hase's alone
    for est in baselines + ["hase"]:  # Hase drawn last: on top of the baselines
        if f"{est}_ms" in df and df[f"{est}_ms"].notna().any():
            mine = est == "hase"
            ax.scatter(df["actual_ms"], df[f"{est}_ms"], s=18 if mine else 8, alpha=1.0 if mine else 0.35,
                       color=colors[est], edgecolors="k" if mine else "none", linewidths=0.4,
                       zorder=3 if mine else 2, label=est)
    ax.set(xscale="log", yscale="log", xlabel="measured ms", ylabel="predicted ms", title="predicted vs measured")
    ax.legend(fontsize=7)


def plots(df: pd.DataFrame, slow: pd.DataFrame, out_dir: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 5))
    draw_pred_vs_actual(ax, df)
    fig.tight_layout()
    save_png(fig, out_dir / "pred_vs_actual.png")
    fig, ax = plt.subplots(figsize=(5, 4))
    for est in ESTIMATORS:
        if f"{est}_ms" in df and df[f"{est}_ms"].notna().any():
            e = np.sort(np.abs(error_pct(df[f"{est}_ms"], df["actual_ms"])))
            ax.plot(e, np.arange(1, len(e) + 1) / len(e), label=est)
    ax.axvline(10, color="grey", ls=":")
    ax.set(xscale="log", xlabel="|error| %", ylabel="fraction of cases", title="error CDF")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, out_dir / "error_cdf.png")
    held = slow[slow["load_split"] == "held-out neighbour"]
    if len(held):
        fig, ax = plt.subplots(figsize=(5.5, 5))
        for cond, g in held.groupby("condition"):
            ax.scatter(g["measured"], g["predicted"], s=14, label=cond)
        hi = max(held["measured"].max(), held["predicted"].max()) * 1.05
        ax.plot([0.8, hi], [0.8, hi], "k--", lw=1)
        ax.plot([0.8, hi], [0.8 * 1.1, hi * 1.1], color="grey", ls=":", lw=1)
        ax.plot([0.8, hi], [0.8 * 0.9, hi * 0.9], color="grey", ls=":", lw=1)
        ax.set(xlabel="measured slowdown (loaded / idle)", ylabel="predicted slowdown",
               title="held-out neighbours: slowdown")
        ax.legend(fontsize=7)
        fig.tight_layout()
        save_png(fig, out_dir / "slowdown_heldout.png")


def print_table(df: pd.DataFrame, summary: dict, group: str) -> None:
    print(f"{'model':32s} {'bs':>4s} {'res':>8s} {'condition':>30s} {'predicted':>10s} {'actual':>10s} {'error%':>8s}")
    for _, r in df.iterrows():
        print(f"{r['model'][:32]:32s} {str(r['bs']):>4s} {str(r['res']):>8s} {str(r['condition'])[:30]:>30s} "
              f"{r['hase_ms']:10.3f} {r['actual_ms']:10.3f} {r['error_pct']:8.1f}")
    print(f"summary by {group}:")
    for est, conds in summary.items():
        for cond, m in conds.items():
            print(f"  {est:20s} {cond:40s} n={m['n']:3d}  MAPE {m['mape_pct']:6.1f}%  ±10% {m['within_10pct']:5.1f}%")


def main() -> int:
    p = base_parser("Phase 7.2: evaluate predicted against measured latency", "inference")
    p.add_argument("target", nargs="?", type=Path, help="model .onnx or a folder of models (live mode)")
    p.add_argument("--from-csv", type=Path, action="append", help="phase 4 models.csv (repeatable; offline mode)")
    p.add_argument("--records", type=Path, help="kernel records folder (default phase 2 folder)")
    p.add_argument("--fit", action="store_true", help="fit the timeline model on the training cases and save it")
    p.add_argument("--out", type=Path, help="output folder (default evaluation/<device slug>/)")
    # evaluator keys live under this script's own defaults: inference/config.yaml is not read, a --config given is
    # (and one that does not exist is an error, as in every script)
    p.set_defaults(config=None)
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("evaluator", args.log_level)
    from hase.benchmark.collector import check_label_sessions
    check_label_sessions(cfg["label_sessions"])
    if args.from_csv:
        for path in args.from_csv:  # inputs first: the predictor folder is named after the data's
            if not path.exists():
                raise HaseError("file not found", path)
        device = args.device if args.device in ("cpu", "cuda") else None  # None: the predictor's EP
        slug = args.from_csv[0].parent.name
    else:
        device = resolve_device(cfg["device"])
        slug = device_slug(device)
    from hase.training.train_kernel_model import load_predictor
    pdir = Path(cfg["predictor_dir"]) if cfg["predictor_dir"] else paths.train_models_dir() / slug
    predictor = load_predictor(pdir)
    device = device or predictor.device or "cuda"
    check_ep(predictor, device, pdir)
    out_dir = args.out or (paths.evaluation_dir() / slug)
    extra = {}
    if args.from_csv:
        df, records, node_times = read_cases(args.from_csv, args.records or paths.kernel_record_dir(), device, cfg)
        bw = None
        bw_path = Path(cfg["bandwidth_table"]) if cfg["bandwidth_table"] else \
            paths.bench_results_dir() / slug / "bandwidth_table.json"
        if bw_path.exists():
            from hase.benchmark.bandwidth import load_table
            bw = load_table(bw_path)
        else:
            log.warning("no bandwidth table at %s: input/output copies are left to the fitted constant", bw_path)
        if args.fit:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, preps = build_timeline_model(df, records, node_times, predictor, bw, cfg, log)
                extra["leave_one_architecture_out"] = leave_one_arch_out(df, records, node_times, predictor, bw,
                                                                         cfg, log)
            model["provenance"] = provenance(device)
            mpath = paths.inference_results_dir() / slug / "timeline_model.json"
            tm.save(model, mpath)
            log.info("timeline model saved (all training architectures): %s", params_text(model["params"]))
            log.info("timeline model written to %s", mpath)
        else:
            model, mpath = load_timeline_model(cfg, slug)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                preps = {m: prepare_record(records[m], predictor, model) for m in records}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lpreps = lookup_preps(records, predictor, model)
        df = predict_cases(df, preps, model, lpreps)
        t0 = time.perf_counter()
        reps = 0
        while time.perf_counter() - t0 < 1.0:  # batch scoring speed from cached records (schedulers)
            for (_, r), m in zip(df.iterrows(), df["model"]):
                tm.predict_ms(preps[m], model["params"], r, model["idle_clock_mhz"])
                reps += 1
        extra["batch_scoring_cases_per_s"] = reps / (time.perf_counter() - t0)
    elif args.target:
        if not args.target.exists():
            raise HaseError("file not found", args.target)
        targets = sorted(q for q in args.target.glob("*.onnx") if ".opt." not in q.name) \
            if args.target.is_dir() else [args.target]
        if not targets:
            raise HaseError("no .onnx models in folder", args.target)
        model, mpath = load_timeline_model(cfg, slug)
        if model is None:
            raise HaseError("live evaluation needs the fitted timeline model (evaluator.py --from-csv ... --fit)",
                            mpath)
        live_loads(cfg)  # a bad load entry fails before any measurement
        df = cases_live(targets, device, cfg, predictor, model)
    else:
        raise HaseError("give a model/folder, or --from-csv")
    if df.empty:
        raise HaseError("no cases to evaluate")
    out_dir.mkdir(parents=True, exist_ok=True)
    slow = slowdowns(df)
    group = df["load_split"] + " / " + df["model_split"]
    summary = {"by_split": summarize(df.assign(group=group), "group"), "by_condition": summarize(df, "condition"),
               "slowdown": {k: accuracy(g["predicted"], g["measured"]) for k, g in
                            [("all", slow)] + list(slow.groupby("load_split")) + list(slow.groupby("condition"))
                            if len(g)},
               "timeline_model": str(mpath), "params": model["params"],
               "params_at_bounds": model.get("at_bounds"),  # None: a timeline model saved before bounds were reported
               "cases": int(len(df)), **extra}
    keep = [c for c in df.columns if not c.startswith("DCGM") and not c.startswith("CPU_")]
    df[keep].to_csv(out_dir / "cases.csv", index=False, float_format="%.5g")   # 5 digits: a label's noise is %s
    slow.to_csv(out_dir / "slowdowns.csv", index=False)
    paths.atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=1, default=str) + "\n")
    plots(df, slow, out_dir)
    save_resolved(cfg, out_dir)
    print_table(df, summary["by_split"], "split")
    for arch, m in extra.get("leave_one_architecture_out", {}).items():
        print(loao_line(arch, m))
    if "batch_scoring_cases_per_s" in extra:
        print(f"batch scoring from cached records: {extra['batch_scoring_cases_per_s']:.0f} cases/s")
    print(f"wrote {out_dir}/cases.csv, slowdowns.csv, summary.json, pred_vs_actual.png, error_cdf.png")
    return 0


if __name__ == "__main__":
    run_main(main)
