"""How much of a dispatch-bound model's clean latency a count of its launches explains, against the installed
corpus fit's host trees (compare only: nothing here is on the prediction path).

For every traced H200 corpus model whose GPU idles >= 60% of its span (dispatch-bound), on every machine that gave it
a clean label: y = the clean label (median of the label sessions) brought to the reference host speed (divided by
the label process's calib_host_index_us / 7.42, elasticity 1), and x = the model's node count per op type (nodes
that launch nothing counted as one type, "nolaunch") plus its CUDA kernel launches (trace_nodes' first session).
A linear model y = c0 + sum_op b_op * n_op + b_L * launches, least squares on relative error with a ridge (LAMBDA) on
everything but c0, is scored leave-one-family-out (every model of a family held out at once; the family from the
model name). The installed fit's out-of-fold predictions (`../corpus/train_cv_cases.csv`, 5 folds by architecture,
against the median label over machines) are read for the same models.
  python inference/results/nvidia-h200/compare_host_launch_linear/run.py   (~2 min on 2 cores)
Writes cases.csv.xz and summary.json here.
"""
import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).parent
ROOT = OUT.parents[3]
REF_HOST_US, IDLE_FRAC, MIN_MODELS = 7.42, 0.6, 20


def family(m: str) -> str:
    return m.split("-")[0].split("_bs")[0]


def labels(p: Path) -> pd.DataFrame:
    """Per model of one machine folder: GPU idle and span (trace medians), clean label and its calibration."""
    t = pd.read_csv(p / "trace_sessions.csv.xz").groupby("model").agg(idle_us=("gpu_idle_us", "median"),
                                                                      span_us=("span_us", "median"))
    c = pd.read_csv(p / "clean_sessions.csv.xz").groupby("model").agg(
        clean_ms=("e2e_clean_median_ms", "median"), host_index_us=("clean_calib_host_index_us", "median"))
    return t.join(c, how="inner")


def first_session_nodes(p: Path, cols: list) -> pd.DataFrame:
    """trace_nodes' rows of each model's first traced session."""
    nd = pd.read_csv(p / "trace_nodes.csv.xz", usecols=["model", "session"] + cols)
    return nd[nd["session"] == nd.groupby("model")["session"].transform("min")]


def machine_rows(p: Path) -> pd.DataFrame:
    """One row per model of one machine folder: idle fraction, clean label, calibration, op counts, launches."""
    nd = first_session_nodes(p, ["op", "launches"])
    op = np.where(nd["launches"] == 0, "nolaunch", nd["op"])
    counts = nd.assign(op=op).groupby(["model", "op"]).size().unstack(fill_value=0)
    counts["launches"] = nd.groupby("model")["launches"].sum()
    out = labels(p).join(counts, how="inner").reset_index()
    out["machine"] = p.name
    return out


def fit(X, y, lam):
    """Weights minimising sum((X w / y - 1)^2) + lam |w[:-1]|^2 (the last column is the constant)."""
    W = X / y[:, None]
    A = W.T @ W + lam * np.eye(X.shape[1])
    A[-1, -1] -= lam
    return np.linalg.solve(A, W.T @ np.ones(len(y)))


def stats(e) -> dict:
    e = np.asarray(e, float)
    return {"n": int(len(e)), "mape_pct": float(np.mean(np.abs(e))), "within_10pct": float(np.mean(np.abs(e) <= 10) * 100),
            "median_signed_pct": float(np.median(e))}


def main():
    dirs = sorted(Path(x) for x in glob.glob(str(ROOT / "benchmark/results/nvidia-h200/corpus/machine_*"))
                  if (Path(x) / "clean_sessions.csv.xz").exists() and (Path(x) / "trace_nodes.csv.xz").exists())
    d = pd.concat([machine_rows(p) for p in dirs], ignore_index=True).fillna(0)
    d = d[d["idle_us"] / d["span_us"] >= IDLE_FRAC].reset_index(drop=True)
    d["family"] = d["model"].map(family)
    y = d["clean_ms"].to_numpy() * 1e3 / (d["host_index_us"].to_numpy() / REF_HOST_US)
    meta = {"model", "machine", "family", "idle_us", "span_us", "clean_ms", "host_index_us", "launches"}
    ops = sorted(c for c in d.columns if c not in meta and (d[c] > 0).sum() >= MIN_MODELS)
    cols = ops + ["launches"]
    X = np.c_[d[cols].to_numpy(float), np.ones(len(d))]
    cv = pd.read_csv(OUT.parent / "corpus/train_cv_cases.csv")[["model", "batch", "pred_ms", "e2e_ms"]]
    summary = {"what": __doc__.split("\n")[0], "machines": [p.name for p in dirs], "models": int(len(d)),
               "families": int(d["family"].nunique()), "features": cols, "variants": {}}
    for lam in (0.1, 1.0, 10.0):
        pred = np.zeros(len(d))
        for f in d["family"].unique():
            m = (d["family"] == f).to_numpy()
            pred[m] = X[m] @ fit(X[~m], y[~m], lam)
        d[f"linear_lam{lam:g}"] = pred / y * d["clean_ms"]   # back on the label's own scale (ms)
        w = fit(X, y, lam)
        summary["variants"][f"lam{lam:g}"] = {
            "leave_family_out": stats((pred / y - 1) * 100),
            "all_data_us": {"c0": float(w[-1]), "per_launch": float(w[-2]),
                            **{o: float(v) for o, v in zip(ops, w[:-2]) if abs(v) >= 0.5}}}
    # the same models against the installed fit's out-of-fold (one row per model: its first machine)
    m = d.drop_duplicates("model").merge(cv, on="model")
    lin = m["linear_lam1"] / m["clean_ms"] * m["e2e_ms"]   # the linear model's own relative error, on the cv label
    e_t, e_l = (m["pred_ms"] / m["e2e_ms"] - 1) * 100, (lin / m["e2e_ms"] - 1) * 100
    e_mean = ((m["pred_ms"] + lin) / 2 / m["e2e_ms"] - 1) * 100
    summary["same_models"] = {"trees_oof_by_arch": stats(e_t), "linear_leave_family_out": stats(e_l),
                              "mean_of_both": stats(e_mean),
                              "corr_log_errors": float(np.corrcoef(np.log1p(e_t / 100), np.log1p(e_l / 100))[0, 1]),
                              "by_batch": {str(b): {"trees": stats(e_t[g.index]), "linear": stats(e_l[g.index]),
                                                    "mean": stats(e_mean[g.index])}
                                           for b, g in m.groupby(pd.cut(m["batch"], [0, 1, 4, 16, 10**9],
                                                                        labels=["1", "2-4", "8-16", ">16"]),
                                                                 observed=True)}}
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    d.drop(columns=ops).to_csv(OUT / "cases.csv.xz", index=False, float_format="%.5g")
    s = summary["same_models"]
    print(f"{len(d)} dispatch-bound model-machine rows, {d['family'].nunique()} families; same {len(m)} models: "
          f"trees {s['trees_oof_by_arch']['mape_pct']:.1f}%, linear {s['linear_leave_family_out']['mape_pct']:.1f}%, "
          f"mean {s['mean_of_both']['mape_pct']:.1f}%, corr {s['corr_log_errors']:.2f}")


if __name__ == "__main__":
    main()
