"""Session-to-session and machine-to-machine variance of whole-model latency (issue 12, item 2).

  python benchmark/variance_report.py [--set 'sources=[benchmark/results/nvidia-h200/timeline/machine_*]']
                                      [--set out=benchmark/results/nvidia-h200/variance]

Reads each machine folder's trace_sessions.csv.gz (benchmark/trace_run.py, imported by
benchmark/import_trace.py; one row per fresh InferenceSession) and, where present, trace_nodes.csv.gz and
trace_config_*.json (provenance). Writes to `out`:
  summary.json  provenance, machines, sessions per model, per cudnn_conv_algo_search: pairwise |diff| between
                sessions (within a machine) and between per-machine medians, share of models over `threshold_pct`,
                per-model label table (median of all sessions, p10, p90); attribution (kernel signatures, CV of
                the terms, correlation of e2e with them, clocks); HEURISTIC/DEFAULT vs EXHAUSTIVE; recommendation
  report.md     the per-model table and the findings in numbers
  spread.png    session latency / model median per model coloured by machine; CV of host vs GPU sums
Pairwise |diff| of two values a, b is |a - b| / min(a, b) in percent (how much slower the slower one is).
"""
import itertools
import json
import math
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.plots import save_png  # noqa: E402
from hase.utils.tables import read_machine_csv  # noqa: E402

DEFAULTS = {
    "sources": ["benchmark/results/nvidia-h200/timeline/machine_*"],  # machine folders (globs, repo-relative ok)
    "out": "benchmark/results/nvidia-h200/variance",
    "label": "e2e_median_ms",          # the latency a user measures with session.run and numpy in/out
    "threshold_pct": 10.0,             # "sessions differ by more than this"
    "baseline_algo": "EXHAUSTIVE",     # ORT's default cudnn_conv_algo_search
    # fallback provenance (the run of 2026-11-23) where a folder has no trace_config_*.json
    "provenance": {"gpu_name": "NVIDIA H200", "gpu_driver": "580.159.04", "ort_version": "1.31.1",
                   "date_utc": "2026-11-23"},
}
SESSIONS_FILE = "trace_sessions.csv.gz"
NODES_FILE = "trace_nodes.csv.gz"
REQUIRED = ("model", "cudnn_conv_algo_search", "session", "e2e_median_ms", "device_median_ms", "host_sum_us",
            "gpu_sum_us", "h2d_gpu_us", "d2h_gpu_us", "before_us", "after_us", "kernel_signature",
            "e2e_sm_clock_mhz", "first_run_s")
# terms of one run (us) whose session-to-session change can move the label
TERMS = {"host_sum": "host_sum_us", "gpu_sum": "gpu_sum_us", "h2d": "h2d_gpu_us", "d2h": "d2h_gpu_us",
         "fixed": "fixed_us"}


# ---------------------------------------------------------------- reading
def read_sessions(folder: Path) -> pd.DataFrame:
    """One machine's sessions with a `machine` column (the folder name); bad file -> one-line HaseError."""
    df = read_machine_csv(folder, SESSIONS_FILE, REQUIRED, "trace_run session")
    path = Path(folder) / SESSIONS_FILE
    bad = df[pd.to_numeric(df["e2e_median_ms"], errors="coerce").fillna(0) <= 0]
    if len(bad):
        raise HaseError(f"e2e_median_ms not a positive number for {bad['model'].iloc[0]}", path)
    df = df.copy()
    df["order"] = range(len(df))        # trace_run appends rows in the order it measures them
    df["fixed_us"] = df["before_us"] + df["after_us"]
    return df


def read_provenance(folders, fallback: dict) -> dict:
    """Provenance per machine from trace_config_*.json where present, else the configured fallback."""
    out = {}
    for f in folders:
        cfgs = sorted(Path(f).glob("trace_config_*.json"))
        prov = paths.read_json(cfgs[0], "trace config").get("provenance", {}) if cfgs else {}
        keys = ("gpu_name", "gpu_driver", "ort_version", "date_utc", "cpu", "cpu_count")
        out[Path(f).name] = {k: prov.get(k, fallback.get(k)) for k in keys if k in prov or k in fallback}
        out[Path(f).name]["from"] = cfgs[0].name if cfgs else "config provenance (no trace_config_*.json)"
    return out


# ---------------------------------------------------------------- pure statistics
def pair_diffs_pct(values) -> list:
    """|a - b| / min(a, b) * 100 for every pair of values."""
    v = [float(x) for x in values]
    return [abs(a - b) / min(a, b) * 100.0 for a, b in itertools.combinations(v, 2)]


def label_stats(values) -> dict:
    """The label (median of all sessions), p10, p90 (linear interpolation) and spread (p90-p10)/median in %."""
    v = np.asarray(values, dtype=float)
    med, p10, p90 = (float(np.percentile(v, q)) for q in (50, 10, 90))
    return {"median": med, "p10": p10, "p90": p90, "spread_pct": (p90 - p10) / med * 100.0, "n": int(v.size)}


def cv(values) -> float:
    v = np.asarray(values, dtype=float)
    return float(v.std() / v.mean()) if v.size > 1 and v.mean() > 0 else math.nan


def corr(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.corrcoef(a, b)[0, 1]) if a.size > 2 and a.std() > 0 and b.std() > 0 else math.nan


def _med(xs) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.median(xs)) if xs else math.nan


def model_variance(g: pd.DataFrame, col: str, threshold: float) -> dict:
    """One model's sessions (one algo, all machines): label, within-machine and between-machine |diff|."""
    within = [d for _, m in g.groupby("machine") for d in pair_diffs_pct(m[col])]
    per_machine = g.groupby("machine")[col].median()
    between = pair_diffs_pct(per_machine.values)
    return {**label_stats(g[col]), "machines": int(per_machine.size),
            "within_median_pct": _med(within), "within_max_pct": max(within) if within else math.nan,
            "between_median_pct": _med(between), "between_max_pct": max(between) if between else math.nan,
            "all_max_pct": (g[col].max() / g[col].min() - 1) * 100.0,
            "over_threshold_within": bool(within and max(within) > threshold),
            "within_pairs": len(within), "within_pairs_over_threshold": sum(d > threshold for d in within),
            "signatures": int(g["kernel_signature"].nunique())}


def dominant_term(g: pd.DataFrame) -> tuple:
    """The term whose session-to-session std (us, within each machine, pooled) is largest, and the stds."""
    stds = {}
    for name, col in TERMS.items():
        dev = g[col] - g.groupby("machine")[col].transform("mean")
        stds[name] = float(np.sqrt((dev ** 2).mean()))
    return max(stds, key=stds.get), stds


def algo_section(df: pd.DataFrame, col: str, threshold: float) -> dict:
    """Variance numbers of one cudnn_conv_algo_search over all its models."""
    rows = {}
    for model, g in df.groupby("model"):
        r = model_variance(g, col, threshold)
        r["dominant_term"], stds = dominant_term(g)
        r["term_std_us"] = {k: round(v, 1) for k, v in stds.items()}
        rows[model] = r
    t = pd.DataFrame(rows).T
    multi = t[t["machines"] > 1]
    return {"models": len(t), "sessions": int(len(df)),
            "within_machine_median_abs_diff_pct": _med(t["within_median_pct"].astype(float)),
            "between_machine_median_abs_diff_pct": _med(multi["between_median_pct"].astype(float)),
            "share_models_within_machine_over_threshold": float(t["over_threshold_within"].mean()),
            "share_session_pairs_within_machine_over_threshold": float(t["within_pairs_over_threshold"].sum()
                                                                       / max(1, t["within_pairs"].sum())),
            "share_models_any_sessions_over_threshold": float((t["all_max_pct"].astype(float) > threshold).mean()),
            "share_models_between_machine_over_threshold": (float((multi["between_max_pct"].astype(float)
                                                                   > threshold).mean()) if len(multi) else None),
            "per_model": rows}


def attribution(df: pd.DataFrame, label: str) -> dict:
    """What moves the label between sessions of one model: signatures, CVs, correlations, clocks, drift."""
    groups = list(df.groupby(["model", "machine"]))
    out = {"share_models_multiple_signatures": float((df.groupby("model")["kernel_signature"].nunique() > 1).mean()),
           "share_model_machines_multiple_signatures": float(
               np.mean([g["kernel_signature"].nunique() > 1 for _, g in groups]))}
    out["median_cv_pct"] = {name: _med([cv(g[c]) * 100 for _, g in groups])
                            for name, c in {"label": label, "device_median": "device_median_ms", **TERMS}.items()}
    out["median_corr_with_label"] = {name: _med([corr(g[label], g[c]) for _, g in groups])
                                     for name, c in {"device_median": "device_median_ms", **TERMS}.items()}
    norm = df.copy()
    for c in [label, *TERMS.values()]:
        norm[c] = norm[c] / norm.groupby(["model", "machine"])[c].transform("median") - 1
    out["pooled_corr_of_relative_deviation"] = {name: corr(norm[label], norm[c]) for name, c in TERMS.items()}
    clk = df["e2e_sm_clock_mhz"].astype(float)
    out["sm_clock_mhz"] = {"min": float(clk.min()), "max": float(clk.max())}
    # persistence: is a slow session followed by a slow one (drift) or independent (per-session state)?
    s = df.sort_values(["machine", "order"]).copy()
    s["res"] = np.log(s[label] / s.groupby(["model", "machine"])[label].transform("median"))
    s["prev"] = s.groupby(["machine", "model"])["res"].shift(1)
    ok = s.dropna(subset=["prev"])
    out["lag1_corr_consecutive_sessions"] = corr(ok["res"], ok["prev"])
    # machine level: per-machine median over models of (machine median / all-machine median)
    ratios = {}
    for name, c in {"label": label, **TERMS}.items():
        mm = df.groupby(["model", "machine"])[c].median().unstack()
        ratios[name] = {m: round(float(v), 3) for m, v in mm.div(mm.median(axis=1), axis=0).median().items()}
    out["machine_median_ratio"] = ratios
    return out


def node_uniformity(nodes: pd.DataFrame, sessions: pd.DataFrame, slow_pct: float) -> dict:
    """For sessions whose host_sum is > slow_pct above their model's median on that machine: are all nodes
    slower by about the same factor (the whole dispatch thread ran slower) or only a few?"""
    s = sessions.copy()
    s["host_ratio"] = s["host_sum_us"] / s.groupby(["model", "machine"])["host_sum_us"].transform("median")
    slow = s[s["host_ratio"] > 1 + slow_pct / 100.0]
    per = []
    for (model, machine, algo), g in nodes.groupby(["model", "machine", "cudnn_conv_algo_search"]):
        p = g.pivot_table(index="node", columns="session", values="host_us", aggfunc="sum")
        p = p[p.median(axis=1) > 5.0]            # nodes with a measurable dispatch
        r = p.div(p.median(axis=1), axis=0)
        for _, row in slow[(slow.model == model) & (slow.machine == machine)
                           & (slow.cudnn_conv_algo_search == algo)].iterrows():
            if row["session"] in r.columns:
                col = r[row["session"]].dropna()
                per.append({"session_ratio": row["host_ratio"], "node_ratio_median": float(col.median()),
                            "share_nodes_slower_10pct": float((col > 1.1).mean())})
    if not per:
        return {"slow_sessions": 0}
    t = pd.DataFrame(per)
    return {"slow_sessions": len(t), "median_session_host_ratio": float(t["session_ratio"].median()),
            "median_node_host_ratio": float(t["node_ratio_median"].median()),
            "median_share_nodes_slower_10pct": float(t["share_nodes_slower_10pct"].median())}


def algo_comparison(df: pd.DataFrame, algo: str, base: str, label: str) -> dict:
    """`algo` vs `base` on the machines that ran both: label/device/GPU ratios, signature changes, spread."""
    machines = set(df[df.cudnn_conv_algo_search == algo].machine) & set(df[df.cudnn_conv_algo_search == base].machine)
    d = df[df.machine.isin(machines)]
    agg = d.groupby(["model", "machine", "cudnn_conv_algo_search"]).agg(
        label=(label, "median"), device=("device_median_ms", "median"), gpu=("gpu_sum_us", "median"),
        host=("host_sum_us", "median"), sig=("kernel_signature", "first"), first_run_s=("first_run_s", "median"))
    a = agg.xs(algo, level=2)
    b = agg.xs(base, level=2).reindex(a.index)
    gpu_ratio = a["gpu"] / b["gpu"]
    changed = gpu_ratio[(gpu_ratio - 1).abs() > 0.02].sort_values()
    within = {}
    for name in (algo, base):
        x = d[d.cudnn_conv_algo_search == name]
        x = x[x.model.isin(a.index.get_level_values(0))]
        within[name] = _med([_med(pair_diffs_pct(g[label])) for _, g in x.groupby(["model", "machine"])])
    return {"machines": sorted(machines), "models": int(len(a)),
            "sessions_per_model": int(d[d.cudnn_conv_algo_search == algo].groupby(["model", "machine"]).size().min()),
            "median_ratio": {"label": _med(a["label"] / b["label"]), "device_median": _med(a["device"] / b["device"]),
                             "gpu_sum": _med(gpu_ratio), "host_sum": _med(a["host"] / b["host"])},
            "share_signature_differs": float((a["sig"] != b["sig"]).mean()),
            "gpu_sum_changed_over_2pct": {f"{m}@{mc}": round(float(v), 3) for (m, mc), v in changed.items()},
            "label_ratio_per_model": {f"{m}@{mc}": round(float(v), 3)
                                      for (m, mc), v in (a["label"] / b["label"]).sort_values().items()},
            "within_machine_median_abs_diff_pct": within,
            "median_first_run_s": {algo: _med(a["first_run_s"]), base: _med(b["first_run_s"])}}


# ---------------------------------------------------------------- outputs
def recommendation(s: dict, base: str) -> list:
    ex, at = s["algos"][base], s["attribution"]
    rec = [{"setting": "cudnn_conv_algo_search",
            "advice": f"keep {base} (ORT's default) for a stable label; HEURISTIC only to save session-creation "
                      "time; never DEFAULT",
            "measured": f"{base}: one kernel signature per model across all sessions and machines "
                        f"(share with >1: {at['share_models_multiple_signatures']:.0%}); gpu_sum CV "
                        f"{at['median_cv_pct']['gpu_sum']:.2f}%", "status": "measured"}]
    for algo, c in s.get("vs_baseline", {}).items():
        rec[0]["measured"] += (f"; {algo}: GPU sum x{c['median_ratio']['gpu_sum']:.3f} median, up to "
                               f"x{max(c['gpu_sum_changed_over_2pct'].values(), default=1.0):.2f}, label "
                               f"x{c['median_ratio']['label']:.3f} median")
    rec.append({"setting": "IOBinding (inputs/outputs already on the GPU)",
                "advice": "bind inputs and outputs on the GPU where the application allows; then the label is "
                          "device_median_ms and it is far steadier",
                "measured": f"within-machine median |diff| {s['device']['within_machine_median_abs_diff_pct']:.2f}% "
                            f"(device) vs {ex['within_machine_median_abs_diff_pct']:.2f}% (e2e); between machines "
                            f"{s['device']['between_machine_median_abs_diff_pct']:.2f}% vs "
                            f"{ex['between_machine_median_abs_diff_pct']:.2f}%", "status": "measured"})
    pin = s.get("pinning")
    if pin:  # benchmark/run_gpu_pinning.sh: pinned vs unpinned fresh sessions of dispatch-bound models
        rec.append({"setting": "pin the whole process to one CPU core (taskset -c)",
                    "advice": "do not: it did not narrow the spread and made sessions slower",
                    "measured": f"p10-p90 spread across sessions {pin['median_spread_pct']['pinned']:.0f}% pinned vs "
                                f"{pin['median_spread_pct']['unpinned']:.0f}% unpinned (median of 5 batch-1 models, "
                                f"8 sessions each); latency x{pin['median_latency_ratio_pinned_over_unpinned']:.2f}",
                    "status": "measured"})
    rec.append({"setting": "page-locked (pinned) input buffers, a dedicated set of cores for the dispatch thread",
                "advice": "suggested, not measured: the varying terms are host-side (dispatch, pageable H2D copy)",
                "measured": f"host_sum CV {at['median_cv_pct']['host_sum']:.1f}% and h2d CV "
                            f"{at['median_cv_pct']['h2d']:.1f}% vs gpu_sum CV {at['median_cv_pct']['gpu_sum']:.2f}%",
                "status": "suggested"})
    rec.append({"setting": "how to measure a label",
                "advice": "take the median over several fresh sessions (>= 5), not one session's median",
                "measured": f"one session differs from another on the same machine by "
                            f"{ex['within_machine_median_abs_diff_pct']:.1f}% (median), >"
                            f"{s['config']['threshold_pct']:g}% for "
                            f"{ex['share_models_within_machine_over_threshold']:.0%} of models at least once",
                "status": "measured"})
    return rec


def fmt(v, nd=1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def report_md(s: dict, base: str) -> str:
    ex, at, dv = s["algos"][base], s["attribution"], s["device"]
    thr = s["config"]["threshold_pct"]
    prov = next(iter(s["provenance"].values()), {})
    lines = [f"# Session-to-session variance of whole-model latency ({prov.get('gpu_name')}, driver "
             f"{prov.get('gpu_driver')}, onnxruntime {prov.get('ort_version')})", "",
             f"Machines: {s['machines']['count']} ({', '.join(s['machines']['names'])}), fresh InferenceSessions "
             f"per model: {s['sessions_per_model']['min']}-{s['sessions_per_model']['max']} (median "
             f"{s['sessions_per_model']['median']:g}) per machine; label = `{s['config']['label']}` (session.run, "
             f"numpy in/out). Made by `benchmark/variance_report.py`; numbers in `summary.json`, plot `spread.png`.",
             "", "## Findings", ""]
    ub = at["node_uniformity"]
    lines += [
        f"- Sessions on one machine differ by a median {ex['within_machine_median_abs_diff_pct']:.1f}% (pairwise "
        f"|diff|, median over {ex['models']} models, {base}); per-machine medians differ by "
        f"{ex['between_machine_median_abs_diff_pct']:.1f}%. {ex['share_models_within_machine_over_threshold']:.0%} "
        f"of models have two sessions on one machine more than {thr:g}% apart "
        f"({ex['share_session_pairs_within_machine_over_threshold']:.0%} of all such session pairs); "
        f"{ex['share_models_any_sessions_over_threshold']:.0%} counting all machines.",
        f"- Not the GPU: one kernel signature per model across all sessions and machines "
        f"({at['share_models_multiple_signatures']:.0%} of models with >1), gpu_sum CV "
        f"{at['median_cv_pct']['gpu_sum']:.2f}% (median), SM clock {at['sm_clock_mhz']['min']:g}-"
        f"{at['sm_clock_mhz']['max']:g} MHz in every session.",
        f"- The host: CV of host_sum {at['median_cv_pct']['host_sum']:.1f}%, h2d (pageable copy) "
        f"{at['median_cv_pct']['h2d']:.1f}%, before+after {at['median_cv_pct']['fixed']:.1f}%; within a model "
        f"the label correlates with host_sum (median r {at['median_corr_with_label']['host_sum']:.2f}), fixed "
        f"({at['median_corr_with_label']['fixed']:.2f}) and h2d ({at['median_corr_with_label']['h2d']:.2f}), "
        f"not with gpu_sum ({at['median_corr_with_label']['gpu_sum']:.2f}). In sessions whose host_sum is >20% "
        f"above the model's median ({ub.get('slow_sessions', 0)}), the median node is "
        f"x{fmt(ub.get('median_node_host_ratio'), 2)} slower (session x{fmt(ub.get('median_session_host_ratio'), 2)}), "
        f"{fmt(100 * ub.get('median_share_nodes_slower_10pct', math.nan), 0)}% of nodes >10% slower: the whole "
        f"dispatch thread runs slower, not a few operators.",
        f"- Not fixed per process: all sessions of a machine ran in one process, one after another, and the "
        f"slowdown mostly does not carry over to the next session (lag-1 correlation of consecutive sessions' "
        f"deviations {at['lag1_corr_consecutive_sessions']:.2f}); some slow episodes span several sessions "
        f"(tens of seconds), others are shorter than a session (a slow label with a normal host_sum measured "
        f"a moment later). Between machines the host differs too: host_sum median "
        f"ratio to the all-machine median " + ", ".join(f"{m} x{v:.2f}" for m, v in
                                                         at["machine_median_ratio"]["host_sum"].items()) + ". "
        f"A time-varying CPU state (which core/NUMA node the thread and the pageable buffers land on, vCPU "
        f"scheduling on the 16-vCPU VM, core clocks) fits the data; this run did not record core or CPU "
        f"clock, so it is the likely cause, not a proven one.",
        f"- IOBinding (device_median_ms) is steadier: within-machine {dv['within_machine_median_abs_diff_pct']:.1f}%, "
        f"between machines {dv['between_machine_median_abs_diff_pct']:.1f}%."]
    for algo, c in s.get("vs_baseline", {}).items():
        w = c["within_machine_median_abs_diff_pct"]
        lines.append(
            f"- {algo} vs {base} ({', '.join(c['machines'])}, {c['sessions_per_model']} sessions): kernel signature "
            f"differs for {c['share_signature_differs']:.0%} of {c['models']} models; GPU sum median "
            f"x{c['median_ratio']['gpu_sum']:.3f}, >2% GPU change for "
            + (", ".join(f"{k.split('@')[0]} x{v:.2f}" for k, v in c["gpu_sum_changed_over_2pct"].items()) or "none")
            + f". Label median x{c['median_ratio']['label']:.3f} (per model x{min(c['label_ratio_per_model'].values()):.2f}"
            f"-x{max(c['label_ratio_per_model'].values()):.2f}), device x{c['median_ratio']['device_median']:.3f}; "
            f"within-machine |diff| {fmt(w[algo])}% vs {fmt(w[base])}%; first run (includes the search) "
            f"{c['median_first_run_s'][algo]:.2f} s vs {c['median_first_run_s'][base]:.2f} s."
            + (f" ORT printed \"Conv running in Fallback mode. May be extremely slow\" for these sessions (the lines "
               "are filtered from the committed log.txt by import_trace.py)." if algo == "DEFAULT" else ""))
    lines += ["", "Recommendation (measured = in this data; suggested = not tested):", ""]
    lines += [f"- **{r['setting']}** ({r['status']}): {r['advice']}. {r['measured']}." for r in s["recommendation"]]
    lines += ["", f"## Per model ({base}, label `{s['config']['label']}` in ms)", "",
              "| model | label median | p10-p90 (all sessions) | within-machine |diff| % | between-machine |diff| % "
              "| signatures | dominant varying term (std us) |", "|---|---|---|---|---|---|---|"]
    for m, r in sorted(ex["per_model"].items()):
        lines.append(f"| {m} | {r['median']:.3f} | {r['p10']:.3f}-{r['p90']:.3f} | {fmt(r['within_median_pct'])} "
                     f"| {fmt(r['between_median_pct'])} | {r['signatures']} | {r['dominant_term']} "
                     f"({r['term_std_us'][r['dominant_term']]:.0f}) |")
    return "\n".join(lines) + "\n"


def plot(df: pd.DataFrame, label: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    d = df.copy()
    d["rel"] = d[label] / d.groupby("model")[label].transform("median")
    order = d.groupby("model")["rel"].agg(lambda s: s.max() - s.min()).sort_values().index
    pos = {m: i for i, m in enumerate(order)}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(16, 7), gridspec_kw={"width_ratios": [2.2, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (mach, g) in enumerate(d.groupby("machine")):
        x = g["model"].map(pos) + (i - 1) * 0.2
        a1.scatter(x, g["rel"], s=14, color=colors[i % len(colors)], label=mach, alpha=0.8)
    a1.axhline(1.0, color="gray", lw=0.8)
    a1.set_xticks(range(len(order)), [m.replace("_224x224", "") for m in order], rotation=90, fontsize=7)
    a1.set_ylabel(f"{label} / model median (all sessions)")
    a1.set_title("per session, sorted by range")
    a1.legend(title="machine")
    cvs = df.groupby(["model", "machine"]).agg(host=("host_sum_us", cv), gpu=("gpu_sum_us", cv),
                                              h2d=("h2d_gpu_us", cv)) * 100
    a2.scatter(cvs["gpu"], cvs["host"], s=14, label="host_sum")
    a2.scatter(cvs["gpu"], cvs["h2d"], s=14, marker="x", label="h2d")
    lim = [min(0.01, cvs.min().min()), max(100, cvs.max().max())]
    a2.plot(lim, lim, color="gray", lw=0.8)
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel("CV of gpu_sum across sessions (%)")
    a2.set_ylabel("CV across sessions (%)")
    a2.set_title("per model and machine")
    a2.legend()
    fig.tight_layout()
    save_png(fig, path)


def resolve_folders(patterns) -> list:
    out = []
    for pat in patterns:
        p = Path(pat)
        pat = str(p if p.is_absolute() else paths.REPO / p)
        out.extend(h for h in paths.expand_globs([pat]) if h.is_dir())
    if not out:
        raise HaseError("no machine folders", ",".join(map(str, patterns)))
    return out


def build(folders, cfg: dict) -> tuple:
    """(summary dict, all sessions) from the machine folders."""
    label, base, thr = cfg["label"], cfg["baseline_algo"], float(cfg["threshold_pct"])
    frames = [read_sessions(f) for f in folders]
    df = pd.concat(frames, ignore_index=True)
    if label not in df.columns:
        raise HaseError(f"label column '{label}' not in the sessions tables", folders[0])
    if base not in set(df["cudnn_conv_algo_search"]):
        raise HaseError(f"no {base} sessions", folders[0])
    nodes = [pd.read_csv(paths.csv_or_gz(Path(f) / NODES_FILE)).assign(machine=Path(f).name)
             for f in folders if paths.csv_or_gz(Path(f) / NODES_FILE).exists()]
    per = df.groupby(["cudnn_conv_algo_search", "model", "machine"]).size()
    ex = df[df.cudnn_conv_algo_search == base]
    s = {"provenance": read_provenance(folders, cfg["provenance"]),
         "sources": [str(Path(f).resolve().relative_to(paths.REPO)) if Path(f).resolve().is_relative_to(paths.REPO)
                     else str(f) for f in folders],
         "config": {k: cfg[k] for k in ("label", "threshold_pct", "baseline_algo")},
         "definitions": {"pairwise_abs_diff_pct": "|a-b|/min(a,b)*100 over pairs of sessions (within a machine) "
                                                  "or of per-machine medians (between machines); median per model, "
                                                  "then median over models",
                         "label": "median of the label over all sessions of a model (all machines); p10/p90 "
                                  "linear interpolation; spread_pct = (p90-p10)/median*100",
                         "cv": "std (ddof=0)/mean over the sessions of one model on one machine"},
         "machines": {"count": len(folders), "names": [Path(f).name for f in folders]},
         "sessions_per_model": {"min": int(per.loc[base].min()), "median": float(per.loc[base].median()),
                                "max": int(per.loc[base].max()),
                                "per_algo": {a: {"models": int(df[df.cudnn_conv_algo_search == a].model.nunique()),
                                                 "sessions_per_model_machine": float(per.loc[a].median()),
                                                 "machines": sorted(df[df.cudnn_conv_algo_search == a].machine.unique())}
                                             for a in sorted(df.cudnn_conv_algo_search.unique())}},
         "algos": {a: algo_section(df[df.cudnn_conv_algo_search == a], label, thr)
                   for a in sorted(df.cudnn_conv_algo_search.unique())}}
    dev = algo_section(ex, "device_median_ms", thr)
    s["device"] = {k: v for k, v in dev.items() if k != "per_model"}
    s["attribution"] = attribution(ex, label)
    s["attribution"]["node_uniformity"] = (node_uniformity(pd.concat(nodes, ignore_index=True), ex, 20.0)
                                           if nodes else {"slow_sessions": 0})
    s["vs_baseline"] = {a: algo_comparison(df, a, base, label) for a in sorted(df.cudnn_conv_algo_search.unique())
                        if a != base}
    s["recommendation"] = recommendation(s, base)
    return s, df


def _clean(o):
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (np.floating, float)):
        return None if math.isnan(float(o)) else round(float(o), 4)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return o


def main() -> int:
    p = base_parser("Session-to-session and machine-to-machine variance of the H200 timelines", "benchmark")
    p.set_defaults(config=None)        # no config file: the defaults above, then --set
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("variance_report", args.log_level)
    folders = resolve_folders(cfg["sources"])
    s, df = build(folders, cfg)
    out = Path(cfg["out"])
    out = out if out.is_absolute() else paths.REPO / out
    if (out / "pinning" / "summary.json").exists():  # the pinning experiment, when it was run
        s["pinning"] = json.loads((out / "pinning" / "summary.json").read_text())
        s["recommendation"] = recommendation(s, cfg["baseline_algo"])
    paths.atomic_write_text(out / "summary.json", json.dumps(_clean(s), indent=1) + "\n")
    paths.atomic_write_text(out / "report.md", report_md(s, cfg["baseline_algo"]))
    plot(df[df.cudnn_conv_algo_search == cfg["baseline_algo"]], cfg["label"], out / "spread.png")
    ex = s["algos"][cfg["baseline_algo"]]
    log.info("%d machines, %d models: within-machine median |diff| %.2f%%, between %.2f%%; wrote %s",
             len(folders), ex["models"], ex["within_machine_median_abs_diff_pct"],
             ex["between_machine_median_abs_diff_pct"], out)
    return 0


if __name__ == "__main__":
    run_main(main)
