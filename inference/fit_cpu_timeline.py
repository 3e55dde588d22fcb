"""Phase 7, CPU EP: the whole-model timeline with measured terms, judged against multi-session labels.

  python inference/fit_cpu_timeline.py [--set timeline_dirs=[...]] [--set node_source=lines]

On ORT's CPU EP one thread runs the graph node after node (each node parallel inside over `threads` intra-op
threads), so a session.run is

  latency = c0_us + Σ over nodes (node compute + per_node_us)

Every term is measured, on the training architectures only (benchmark/run_cpu_timeline.sh sessions):
  node compute   node_source=kernel: the phase 5 predictor trained on packed CPU kernel times (multi_kernel_runner
                 --device cpu, target latency_node_ms_median: a kernel's ORT-profiled node time inside a session);
                 node_source=lines (the baseline judged beside it): a line a_us + us_per_gflop*GFLOP + us_per_mb*MB
                 per node class (timeline_model.cpu_key) through the training models' ORT-profiled node times
  c0_us, per_node_us  what a plain session.run costs beyond its nodes: each model's median over sessions of
                 (plain wall - Σ ORT-profiled node times) = c0_us + per_node_us * nodes, by non-negative least
                 squares on relative error over the training models
  spread         quantiles of each session's wall over its model's median (training sessions): p10/p90
  calibration_ref  the training processes' CPU speed (calibration.json beside the sessions: trace_run runs
                 benchmark/host_calibration.py in its process): a target CPU's calibration scales the lines, the
                 per-node term and c0 by it (inference/machine_calibration.cpu_scales; issue 23 item 5)
The thread count is part of the model: every session must have been measured with `threads` (a one-line error
names the table otherwise), and a prediction is for that count unless a calibration taken at another count scales
it (cpu_scales, with the node-size ladder; inference/results/cpu-amd-epyc/transfer/: 44-49% -> 13-16% MAPE
between 1 and 2 threads).
Labels: per model the median over all sessions (every machine), p10/p90 across sessions beside it.
Writes <out>/timeline_model.json (inference/timeline_model.py's format; predict_model_latency.py reads it for this
CPU), <out>/cases.csv, <out>/summary.json, <out>/resolved_config.json.
"""
import json
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.graph_model.dag_critical_path import load_records  # noqa: E402
from hase.inference import machine_calibration as mc  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from hase.inference.fit_measured_timeline import ZOO, gpu_table  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.metrics import accuracy  # noqa: E402
from hase.utils.tables import read_machines  # noqa: E402

SLUG = "cpu-intel-r-xeon-r-processor"   # utils.ort_session.device_slug("cpu") on the H100 machine measured
DEFAULTS = {"timeline_dirs": [f"benchmark/results/{SLUG}/timeline/machine_*"],
            "records": f"ort_analysis/ort_kernel_record/{SLUG}/records.json.xz", "predictor_dir": "",
            "node_source": "lines", "train_archs": ZOO, "threads": 8, "spread_quantiles": [0.1, 0.9],
            "min_nodes": 3, "idle_busy_max": 0.1, "out": f"inference/results/{SLUG}",
            # ORT names the HardSigmoid + Mul it runs for a fused HardSwish only at run time (the record's are
            # unnamed): LeViT-like models lose up to ~6% of their node time to that; more is another export
            "max_unmatched_share": 0.05,
            # sessions whose compute probe (trace_run's 2-thread MatMul just before and after) read below this
            # share of the fast state (the probes' 90th percentile) ran with the intra-op threads sharing a core:
            # dropped (0: keep all; sessions measured before the probe have none and are kept)
            "probe_min_frac": 0.0,
            # ORT's profiler adds a fixed cost to every node's time (a node that does nothing reads 3-4 us on the
            # 2-vCPU EPYC): taken off every node time (floor 0.1 us) before the node compute is learned, so the
            # per-node term is dispatch alone. 'auto': the 5% quantile of the training node times; None: off.
            # node_source trees (inference/node_model.NodeModel on the node times, saved in <out>/node_model)
            # needs it: its host trees carry the per-node term, which must be >= 0
            "profiler_node_us": None}
NEED_S = ["model", "session", "threads", "e2e_median_ms", "ort_node_sum_us", "n_nodes"]
NEED_N = ["model", "session", "node", "op", "host_us"]
SOURCES = ("kernel", "lines", "trees")
MIN_BAND_MODELS = 5   # held-out models below which a fit keeps the session band alone
CPU_IDLE = {"bg_CPU_UTIL_PCT": 0.0, "bg_CPU_FREQ_MHZ": 0.0, "bg_MEM_USED_MB": 0.0, "bg_LOAD_AVG_1M": 0.0}


def drop_slow_state(s: pd.DataFrame, n: pd.DataFrame, min_frac: float, log) -> tuple:
    """Sessions whose slower probe read < min_frac x the probes' 90th percentile, and their nodes, dropped."""
    cols = ["probe_matmul_gflops_before", "probe_matmul_gflops_after"]
    if min_frac <= 0 or not set(cols) <= set(s.columns):
        return s, n
    p = s[cols].apply(pd.to_numeric, errors="coerce").min(axis=1)
    fast = float(p.quantile(0.9))
    slow = p < min_frac * fast      # NaN (no probe): kept
    if slow.any():
        log.info("compute probe: %d of %d sessions below %.0f%% of the fast state (%.0f GFLOP/s) dropped; "
                 "%d models keep no session", int(slow.sum()), len(s), 100 * min_frac, fast,
                 len(set(s["model"]) - set(s.loc[~slow, "model"])))
    key = ["machine", "model", "session"]
    bad = s.loc[slow, key]
    n = n.merge(bad.assign(_bad=1), on=key, how="left")
    return s[~slow], n[n["_bad"].isna()].drop(columns="_bad")


def read_tables(dirs: list, threads: int, busy_max: float = 0.1) -> tuple:
    """(sessions, nodes) of every machine folder; sessions measured with another thread count -> HaseError;
    sessions whose background CPU load was above busy_max (bg_busy_frac) are dropped with their nodes."""
    dirs = [Path(d) for d in dirs if Path(d).is_dir()]
    if not dirs:
        raise HaseError("no timeline folders matched", "timeline_dirs")
    s = read_machines(dirs, "trace_sessions.csv.gz", NEED_S, "trace_run session")
    n = read_machines(dirs, "trace_nodes.csv.gz", NEED_N, "trace_run node")
    def where(rows: pd.DataFrame) -> Path:   # the machine folder the first offending session came from
        return paths.csv_or_gz(next(d for d in dirs if d.name == rows["machine"].iloc[0]) / "trace_sessions.csv.gz")
    bad = s[pd.to_numeric(s["threads"], errors="coerce") != threads]
    if len(bad):
        raise HaseError(f"column 'threads': {len(bad)} sessions measured with {bad['threads'].iloc[0]} intra-op "
                        f"threads, the model is for {threads} (--set threads=...)", where(bad))
    for col in ("e2e_median_ms", "ort_node_sum_us"):
        v = pd.to_numeric(s[col], errors="coerce")
        ok = np.isfinite(v) & (v > 0)
        if not ok.all():
            raise HaseError(f"column '{col}': not a positive number in every session", where(s[~ok]))
    from hase.benchmark.gpu_metrics import drop_busy_sessions
    return drop_busy_sessions(s, busy_max, "CPU trace_run sessions", get_logger("inference"), nodes=n)


def calibration_profiles(dirs: list) -> list:
    """Every process's calibration profile in the timeline folders (calibration.json: {process: profile})."""
    out = []
    for d in dirs:
        p = Path(d) / "calibration.json"
        if p.exists():
            out += [v for v in paths.read_json(p, "calibration profiles").values() if isinstance(v, dict)]
    return out


def labels(sessions: pd.DataFrame, q: tuple) -> pd.DataFrame:
    """Per model: median session.run over all sessions, p10/p90 across sessions, Σ node time, nodes."""
    g = sessions.groupby("model")
    return pd.DataFrame({"sessions": g.size(), "machines": g["machine"].nunique(), "e2e_ms": g["e2e_median_ms"].median(),
                         "e2e_p10_ms": g["e2e_median_ms"].quantile(q[0]), "e2e_p90_ms": g["e2e_median_ms"].quantile(q[1]),
                         "node_sum_us": g["ort_node_sum_us"].median(), "n_nodes": g["n_nodes"].median()})


def overhead_terms(lab: pd.DataFrame) -> dict:
    """c0_us and per_node_us: (plain wall - Σ ORT-profiled node times) = c0 + per_node * nodes, least squares on
    relative error over the given models' medians, c0 >= 0. per_node_us may be negative, and is on the H100
    machine's CPU: ORT's profiler adds its own cost inside every node's window (the profiled Σ node time of
    shufflenet_v2_x0_5 bs1, 172 nodes, exceeds its plain wall by 1.0 ms), more than a node's dispatch costs
    without it; the phase 5 kernel times are ORT-profiled node times too, so the same term applies to them."""
    y = lab["e2e_ms"].to_numpy() * 1e3 - lab["node_sum_us"].to_numpy()
    n = lab["n_nodes"].to_numpy(float)
    w = 1.0 / (lab["e2e_ms"].to_numpy() * 1e3)
    (c0, per_node), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(n), n]) * w[:, None], y * w, rcond=None)
    if c0 < 0:   # no negative fixed cost: the per-node term alone
        c0, per_node = 0.0, float(np.sum(w * w * n * y) / np.sum(w * w * n * n))
    return {"c0_us": float(c0), "per_node_us": float(per_node), "models": int(len(lab)),
            "rest_us_median": float(np.median(y)), "rest_share_median": float(np.median(y * w))}


def spread(sessions: pd.DataFrame, q: tuple) -> list:
    r = sessions["e2e_median_ms"] / sessions.groupby("model")["e2e_median_ms"].transform("median")
    lo, hi = (float(x) for x in r.quantile(list(q)))
    return [min(lo, 1.0), max(hi, 1.0)]


def read_records(where, models: list) -> dict:
    """{model: its CPU record}: a folder of <model>.cpu.json.gz or one records.json.xz
    (dag_critical_path.load_records: 44 records are 147 KB as one xz, 580 KB as single gz files)."""
    return load_records(where, models, ep="cpu")


def unmatched_share(records: dict, per_node: pd.DataFrame, where, log, max_share: float = 0.05) -> dict:
    """Per model: the share of its measured node time in nodes its record does not name (ORT ran a record's
    HardSwish as HardSigmoid + Mul: 2 of 112 nodes, 0.5% of the time). Above max_share the record is of another
    export: HaseError naming it."""
    out = {}
    for m, r in records.items():
        have = {k["node_name"] for k in r["kernels"]}
        d = per_node[per_node["model"] == m]
        miss = ~d["node"].isin(have)
        out[m] = float(d.loc[miss, "gpu_us"].sum() / max(d["gpu_us"].sum(), 1e-9))
        if out[m] > max_share:
            raise HaseError(f"{m}: {int(miss.sum())} measured nodes ({out[m]:.0%} of the node time, e.g. "
                            f"'{d.loc[miss, 'node'].iloc[0]}') are not in its CPU record (records of another export?)", where)
        if miss.any():
            log.warning("%s: %d measured nodes (%.1f%% of the node time) not in its record: %s", m, int(miss.sum()),
                        100 * out[m], " ".join(d.loc[miss, "node"].head(3)))
    return out


def node_medians(nodes: pd.DataFrame) -> pd.DataFrame:
    """Per model and node: the median ORT-profiled time over sessions, as the compute (gpu_table reads gpu_us)."""
    return nodes.groupby(["model", "node", "op"], as_index=False)["host_us"].median() \
        .rename(columns={"host_us": "gpu_us"})


def take_profiler_cost(per_node: pd.DataFrame, lab: pd.DataFrame, train: list, value, log) -> float:
    """ORT's profiler cost per node (us; 'auto': the 5% quantile of the training models' node times, None or 0:
    none) taken off every node time in place (floor 0.1 us), and each model's node sum in `lab` with it."""
    if value == "auto":
        value = float(per_node.loc[per_node["model"].isin(train), "gpu_us"].quantile(0.05))
    delta = float(value or 0.0)
    if delta > 0:
        per_node["gpu_us"] = np.maximum(per_node["gpu_us"] - delta, 0.1)
        lab["node_sum_us"] = per_node.groupby("model")["gpu_us"].sum().reindex(lab.index)
        log.info("ORT's profiler cost per node taken off every node time: %.2f us", delta)
    return delta


def node_rows(records: dict, per_node: pd.DataFrame, models: list) -> tuple:
    """(kernels, measured us) of every record kernel whose node ORT timed (names match)."""
    ks, us = [], []
    for m in models:
        g = per_node[per_node["model"] == m].set_index("node")["gpu_us"]
        for k in records[m]["kernels"]:
            if k["node_name"] in g.index:
                ks.append(k)
                us.append(float(g[k["node_name"]]))
    return ks, np.array(us, float)


def node_compute_us(records: dict, source: str, table: dict, predictor) -> dict:
    """Predicted compute per kernel (us) of each model, in record order."""
    if source == "lines":
        return {m: tm.gpu_table_us(r, table) for m, r in records.items()}
    if source == "trees":
        return {m: predictor.predict(r["kernels"])[0] for m, r in records.items()}
    out = {}
    for m, r in records.items():
        ms = predictor.predict_kernels(r["kernels"], {f: 0.0 for f in predictor.load_fields})
        out[m] = tm.standalone_us(r, ms)
    return out


def model_json(terms: dict, spread_: list, cfg: dict, train: list, table: dict, source: str, pdir) -> dict:
    """The CPU timeline in timeline_model's format: host_us = per_node_us (every node), the node compute from the
    lines (gpu_table, key cpu) or the kernel predictor (standalone_us, overhead 0), c0, the session spread."""
    m = {"host_table": {"by_op_us": {}, "by_category_us": {}, "default_us": terms["per_node_us"],
                        "source": "per-node overhead: (plain wall - Σ ORT node times) over nodes"},
         "gpu_floor_frac": 0.0, "gpu_floor_us": 0.0, "standalone_overhead_us": 0.0, "bandwidth": None,
         "idle_load": dict(CPU_IDLE), "idle_clock_mhz": 0.0, "statistic": "median",
         "spread": {"session_us": spread_}, "spread_quantiles": list(cfg["spread_quantiles"]),
         "params": dict(tm.DEFAULT_PARAMS, c0_us=terms["c0_us"], kappa=1.0, overhead_us=0.0, copy_scale=0.0),
         "threads": int(cfg["threads"]), "node_source": source, "predictor_dir": paths.portable(pdir) if pdir else "",
         "measured": {**terms, "spread_session": spread_, "train_models": train},
         "load_params": "not measured on CPU EP here: alpha 0 (idle only)", "fitted": [], "at_bounds": [],
         "calibration_ref": cfg.get("_calibration_ref") or {}}
    if source == "lines":
        m["gpu_table"] = table
    elif source == "trees":   # not the node compute: what splits each node's time into host, FLOPs and bytes when a
        m["scale_lines"] = table   # calibration carries the trees to another CPU (machine_calibration.cpu_node_ratios)
    return m


def main() -> int:
    p = base_parser("Phase 7, CPU EP: timeline model with measured terms, judged on multi-session labels", "inference",
                    "cpu_timeline.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    if cfg["node_source"] not in SOURCES:
        raise HaseError(f"config node_source must be one of {', '.join(SOURCES)}, not '{cfg['node_source']}'")
    if isinstance(cfg["threads"], bool) or not isinstance(cfg["threads"], int) or cfg["threads"] < 1:
        raise HaseError(f"config threads must be the intra-op thread count the sessions ran with, not '{cfg['threads']}'")
    q = tuple(float(x) for x in cfg["spread_quantiles"])
    sessions, nodes = read_tables(paths.expand_globs(cfg["timeline_dirs"]), cfg["threads"], float(cfg["idle_busy_max"]))
    sessions, nodes = drop_slow_state(sessions, nodes, float(cfg["probe_min_frac"]), log)
    models = sorted(sessions["model"].unique())
    cfg["_calibration_ref"] = mc.cpu_reference(calibration_profiles(paths.expand_globs(cfg["timeline_dirs"])),
                                               cfg["threads"])
    if not cfg["_calibration_ref"]:
        log.warning("no calibration profile at %d threads beside the sessions: the model cannot be scaled to "
                    "another CPU", cfg["threads"])
    records = read_records(cfg["records"], models)
    train = [m for m in models if paths.model_arch(m) in set(cfg["train_archs"])]
    if not train:
        raise HaseError("no training architecture among the measured models", "train_archs")
    per_node = node_medians(nodes)
    unmatched = unmatched_share(records, per_node, Path(cfg["records"]), log, float(cfg["max_unmatched_share"]))
    lab = labels(sessions, q)
    lab["kernels"] = [len(records[m]["kernels"]) for m in lab.index]
    delta = take_profiler_cost(per_node, lab, train, cfg["profiler_node_us"], log)
    if delta <= 0 and cfg["node_source"] == "trees":
        raise HaseError("node_source trees needs profiler_node_us (auto or us): without it the per-node term is "
                        "negative and host trees cannot carry it", "profiler_node_us")

    # ---- measured terms, training architectures only
    terms = overhead_terms(lab.loc[train])
    terms["profiler_node_us"] = delta
    spr = spread(sessions[sessions["model"].isin(train)], q)
    table = gpu_table(per_node, {m: records[m] for m in train}, int(cfg["min_nodes"]), key="cpu")
    table["source"] = "ORT-profiled CPU node times of the training models"
    predictor, pdir = None, None
    default_dir = paths.train_models_dir() / SLUG
    if cfg["node_source"] == "trees":   # the GPU corpus's per-node model on the CPU node times; host: the per-node term
        from hase.inference.node_model import NodeModel
        if terms["per_node_us"] < 0:
            raise HaseError(f"per-node term {terms['per_node_us']:.2f} us < 0 after the profiler cost: node_source "
                            "trees cannot carry it (raise profiler_node_us)", "profiler_node_us")
        ks, us = node_rows(records, per_node, train)
        predictor = NodeModel(manifest={"format": "hase.node_model/1", "metadata": {"device": "cpu"}}).fit(
            ks, us, np.full(len(us), terms["per_node_us"]), target="roofline_ratio")
        predictor.manifest["host_per_node_us"] = terms["per_node_us"]   # not per recurrent step, not a tree
        pdir = Path(cfg["out"]) / "node_model"
        predictor.save(pdir)
        log.info("node trees: %d nodes of %d training models -> %s", len(ks), len(train), pdir)
    elif cfg["node_source"] == "kernel" or cfg["predictor_dir"] or (default_dir / "manifest.json").exists():
        # the packed-kernel predictor is the model or, where it was trained here, the baseline judged beside it
        from hase.training.train_kernel_model import load_predictor
        pdir = Path(cfg["predictor_dir"]) if cfg["predictor_dir"] else default_dir
        predictor = load_predictor(pdir)
    sources = [cfg["node_source"]] + [s for s in SOURCES if s != cfg["node_source"]
                                      and (s == "lines" or (s == "kernel" and predictor is not None
                                                            and cfg["node_source"] != "trees"))]
    comp = {s: node_compute_us(records, s, table, predictor) for s in sources}
    models_json = {s: model_json(terms, spr, cfg, train, table, s, pdir if s in ("kernel", "trees") else None)
                   for s in sources}
    log.info("measured terms: c0 %.1f us, %.2f us per node (%d training models; wall - Σnodes median %.0f us), "
             "session spread %s, %d node classes", terms["c0_us"], terms["per_node_us"], terms["models"],
             terms["rest_us_median"], spr, len(table["by_key"]))

    # ---- predict every model with each node source through timeline_model; judge
    rows = []
    for m in models:
        r = {"model": m, "arch": paths.model_arch(m), "split": "training arch" if m in train else "held-out arch",
             **lab.loc[m].to_dict(), "unmatched_node_share": unmatched[m]}
        for s in sources:
            mj = models_json[s]
            prep = {"h": np.full(len(comp[s][m]), terms["per_node_us"]), "dev": comp[s][m], "floor": 0.0,
                    "floor_us": 0.0, "device": "cpu", "n": len(comp[s][m]), "h2d_us": 0.0, "d2h_us": 0.0}
            out = tm.with_spread(prep, mj["params"], {"u": 0.0, "clock_ratio": 1.0, "wait_us": 0.0}, mj["spread"])
            tag = "" if s == cfg["node_source"] else f"{s}_"
            r.update({f"pred_{tag}e2e_ms": out["central"] / 1e3, f"pred_{tag}e2e_p10_ms": out["p10"] / 1e3,
                      f"pred_{tag}e2e_p90_ms": out["p90"] / 1e3, f"pred_{tag}node_sum_us": float(np.sum(comp[s][m]))})
        if predictor is not None:
            r["unseen_types"] = " ".join(predictor.unseen_types(records[m]["kernels"]))
        r["line_fallback_share"] = float(np.sum(comp["lines"][m][tm.gpu_table_fallbacks(records[m], table)])
                                         / max(np.sum(comp["lines"][m]), 1e-9))
        rows.append(r)
    cases = pd.DataFrame(rows)
    held = cases[cases["split"] == "held-out arch"]
    if len(held) >= MIN_BAND_MODELS:   # the band holds the model's own error on architectures it did not see, as the
        for s in sources:              # GPU fits' (split-conformal quantiles); cases.csv's p10/p90 are the sessions' alone
            tag = "" if s == cfg["node_source"] else f"{s}_"
            r = np.log(held["e2e_ms"] / held[f"pred_{tag}e2e_ms"])
            models_json[s]["spread"].update(
                residual_log_q=[float(r.quantile(q[0])), float(r.quantile(q[1]))],
                residual_source=f"held-out architectures of this fit: {len(held)} models, "
                                f"{held['arch'].nunique()} architectures, this machine")
    main_src = cfg["node_source"]
    other = [s for s in sources if s != main_src]

    def block(d):
        out = {"models": int(len(d)), "architectures": int(d["arch"].nunique()), "node_source": main_src,
               "e2e": accuracy(d["pred_e2e_ms"], d["e2e_ms"]),
               "node_sum": accuracy(d["pred_node_sum_us"], d["node_sum_us"]),
               "label_in_p10_p90_pct": float(((d["e2e_ms"] >= d["pred_e2e_p10_ms"])
                                              & (d["e2e_ms"] <= d["pred_e2e_p90_ms"])).mean() * 100)}
        for s in other:
            out[f"baseline_{s}"] = {"e2e": accuracy(d[f"pred_{s}_e2e_ms"], d["e2e_ms"]),
                                    "node_sum": accuracy(d[f"pred_{s}_node_sum_us"], d["node_sum_us"])}
        out["sum_of_measured_nodes_plus_overhead"] = accuracy(
            terms["c0_us"] / 1e3 + (d["node_sum_us"] + terms["per_node_us"] * d["kernels"]) / 1e3, d["e2e_ms"])
        out["line_fallback_share_max"] = float(d["line_fallback_share"].max())
        for b in (1, 8):
            dd = d[d["model"].str.contains(f"_bs{b}_")]
            if len(dd):
                out[f"e2e_bs{b}"] = accuracy(dd["pred_e2e_ms"], dd["e2e_ms"])
        return out
    n_s, n_m = int(cases["sessions"].median()), int(cases["machines"].max())
    splits = {f"idle / {s} (CPU EP, {cfg['threads']} threads, median of {n_s} sessions, {n_m} machine"
              f"{'s' if n_m > 1 else ''})": block(cases[cases["split"] == s]) for s in ("held-out arch", "training arch")}
    summary = {"labels": "median over every fresh session (session.run, numpy in/out, ORT profiler off); "
                         "p10/p90 across sessions in cases.csv",
               "ep": "CPUExecutionProvider", "threads": int(cfg["threads"]), "node_source": main_src,
               "baselines": other, "timeline_dirs": [str(d) for d in paths.expand_globs(cfg["timeline_dirs"])],
               "by_split": splits, "measured_terms": models_json[main_src]["measured"],
               "node_classes_with_lines": len(table["by_key"])}
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    tm.save(models_json[main_src], out / "timeline_model.json")
    for s in other:
        tm.save(models_json[s], out / f"timeline_model_{s}.json")
    paths.atomic_write_text(out / "cases.csv", cases.to_csv(index=False, float_format="%.5g"))
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
    save_resolved({k: v for k, v in cfg.items() if not k.startswith("_")}, out)
    for k, v in splits.items():
        if not v["models"]:   # every measured architecture is a training one: nothing held out to report
            log.info("%s: no model", k)
            continue
        log.info("%s: e2e MAPE %.1f%% (±10%%: %.0f%%), Σnode MAPE %.1f%%, label in p10-p90 %.0f%%; %s", k,
                 v["e2e"]["mape_pct"], v["e2e"]["within_10pct"], v["node_sum"]["mape_pct"], v["label_in_p10_p90_pct"],
                 ", ".join(f"{s}: e2e {v[f'baseline_{s}']['e2e']['mape_pct']:.1f}% Σnode "
                           f"{v[f'baseline_{s}']['node_sum']['mape_pct']:.1f}%" for s in other))
    return 0


if __name__ == "__main__":
    run_main(main)
