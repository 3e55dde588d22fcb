"""Phase 7: the timeline model whose terms are learned on the corpus's training architectures (issue 22).

  python inference/fit_corpus_timeline.py [--set timeline_dirs=[...]] [--set out=...]

One place per physical term, each learned on the training split of model_zoo/corpus_split.yaml only (the exam
architectures are refused here, before anything is read about them):
  GPU time per node    inference/node_model.py: trees on the CUPTI time of every training node, in the model
  host dispatch        the same, on each node's launch interval less CUPTI's cost per launch
  copies, fixed cost   fit_measured_timeline.copy_terms: the input copy's rate by the wait before it, a per-node
                       run cost, the output copy; intercepts = session.run's fixed cost
  spread               the per-session quantiles of host and copy terms over each model's median, widened to the
                       out-of-fold residual quantiles (split-conformal: the model's own error on unseen architectures)
  label                `clean` (default): whole-model labels from benchmark/clean_labels.py, a process that never
                       loads CUPTI (trace_run's own plain timing reads 1.0-1.7x slower at batch 1: CUPTI stays
                       attached); CUPTI's cost per launch is then what separates trace_run's CUPTI wall from it.
                       `trace`: the old labels. The two are never mixed.
  join_exams           split files whose exam was scored and read: its architectures join the training split
  calibration_ref      the training processes' host speed (inference/machine_calibration.py); with
                       `host_relative_to_calibration`, every session's node dispatch is first brought to that speed
                       ((reference / the session's calibration) ^ elasticity), so machines and host states measured
                       slow or fast do not teach the trees their offset (issue 23 item 2)
The timeline itself (launches, an idle stream, overlap) is inference/timeline_model.py's, unchanged.

Before the final fit, the node model is judged out of fold on the training split, grouped by architecture
(`cv_folds`): whole-model MAPE per family of architectures the trees did not see. That is the development
signal; the exam (inference/score_exam.py) is scored once, on the final model.
Writes <out>/timeline_model.json, <out>/node_model/ (manifest + two xgboost models), <out>/train_cv.json and
<out>/train_cv_cases.csv (per model, out of fold).
"""
import json
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.graph_model.dag_critical_path import available_records, io_bytes  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from hase.inference.fit_measured_timeline import (IDLE_BUSY_MAX, clean_labels, copy_terms, cupti_launch_us, labels,  # noqa: E402
                                             measured_host_table, node_medians, read_clean, read_machines,
                                             spread_factors)
from hase.inference import machine_calibration as mc  # noqa: E402
from hase.inference.node_model import NodeModel, kernel_ms, per_group_candidate, with_context  # noqa: E402
from hase.model_zoo.corpus import joined_exam_archs, load_split  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.metrics import accuracy  # noqa: E402

DEFAULTS = {"timeline_dirs": ["benchmark/results/nvidia-h200/corpus/machine_*"],
            "records": "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz",
            "load_params_from": "inference/results/nvidia-h200/interference/timeline_model.json",
            "algo": "EXHAUSTIVE", "dispatch_bound_idle_frac": 0.5, "spread_quantiles": [0.1, 0.9],
            "cv_folds": 5, "xgboost": {}, "host_relative_to_calibration": True, "label": "clean",
            "idle_busy_max": IDLE_BUSY_MAX, "host_from_clean": True, "host_from_clean_range": [0.25, 4.0],
            # split files whose exam has been scored and read: its architectures join the training split (their
            # traces teach the terms; a later exam, frozen before this fit, judges it)
            "join_exams": [],
            # c0 (the run's fixed cost) and kappa (clean over learned dispatch) fitted on the out-of-fold runs of the
            # training split against their labels, instead of c0 = the traced processes' intercept and kappa = 1:
            # the trees learn log1p(us), so a sum of nodes sits below the measured sum, and a traced process's fixed
            # cost is not a clean one's (docs/method.md, session 25). Needs cv_folds > 1.
            "fit_c0_kappa": True,
            # each clean label pins the host terms at the host speed it was taken at: the timeline that must match it
            # (host_from_clean, fit_c0_kappa, the out-of-fold runs) has its host terms scaled by the label's machines'
            # calibration (machine_calibration.host_scale with the fit's own calibration_ref), so a slow machine's
            # labels do not teach slow dispatch (exam v17's machine ac: x1.08 on the anchors). Off: a compare run
            # (inference/results/nvidia-h200/compare_labels_at_reference/) decides
            "labels_at_reference": False,
            # another GPU of the same architecture whose traces the GPU-time trees also learn from (NodeModel.fit
            # gpu_pool; the host trees never see them): {timeline_dirs: [...], records: ...}; {} = none. Its rows of
            # an architecture the out-of-fold judgement holds out are held out with it.
            "gpu_pool": {},
            # what the GPU-time trees learn (node_model.GPU_TARGETS): log_time, or roofline_ratio (a node's time over
            # its nominal roofline time, so a node larger than any trained one is priced in proportion to its size)
            "gpu_target": "log_time",
            "out": "inference/results/nvidia-h200/corpus"}


def training_archs(split, join_exams) -> list:
    """The training split's architectures, then those of each scored exam in `join_exams` (split files) that are not
    there yet; their families are added to split.family. An exam not listed stays out."""
    return list(split.train) + joined_exam_archs(join_exams, split.train, split.family)


def split_sessions(timeline_dirs, algo: str, archs, busy_max: float = IDLE_BUSY_MAX) -> tuple:
    """(sessions, nodes, models, dirs, clean) of the measured corpus restricted to the given architectures (one
    split), every other model dropped before any statistic is taken. Folders with clean labels only (no trace
    tables) add to `clean` alone."""
    every = [d for d in paths.expand_globs(timeline_dirs) if Path(d).is_dir()]
    dirs = [d for d in every if paths.csv_or_gz(Path(d) / "trace_sessions.csv").exists()]
    if dirs or not every:
        sessions, nodes = read_machines(dirs, busy_max)
    else:  # only LABELS_ONLY machines (an exam on a GPU without traces): their clean labels are the data
        cols = ["machine", "model", "session", "cudnn_conv_algo_search"]
        sessions, nodes = pd.DataFrame(columns=cols), pd.DataFrame(columns=cols)
    archs = set(archs)
    models = sorted(m for m in sessions["model"].unique() if paths.model_arch(m) in archs)
    keep_s = (sessions["cudnn_conv_algo_search"] == algo) & sessions["model"].isin(models)
    keep_n = (nodes["cudnn_conv_algo_search"] == algo) & nodes["model"].isin(models)
    clean = read_clean(every, busy_max=busy_max)
    clean = clean[[paths.model_arch(m) in archs for m in clean["model"]]]
    return sessions[keep_s], nodes[keep_n], models, dirs, clean


def training_data(cfg: dict, train_archs, log) -> tuple:
    """(sessions, nodes, models, dirs, clean, records) of the training split (split_sessions with the config's
    timeline_dirs, algo and idle_busy_max), the models without a CUDA record left out everywhere and named: the
    data the fit and refresh_calibration_ref.py both read."""
    sessions, nodes, train, dirs, clean = split_sessions(cfg["timeline_dirs"], cfg["algo"], train_archs,
                                                        float(cfg["idle_busy_max"]))
    if not train:
        raise HaseError("no training-split model among the measured ones", "timeline_dirs")
    records, lost_rec = available_records(cfg["records"], train)
    if lost_rec:  # the analysis failed on the GPU machine: no graph to learn from, named and left out
        log.warning("%d training model(s) without a CUDA record, left out: %s", len(lost_rec), " ".join(lost_rec))
    train = [m for m in train if m in records]
    if lost_rec:
        sessions, nodes = sessions[sessions["model"].isin(train)], nodes[nodes["model"].isin(train)]
        clean = clean[clean["model"].isin(train)]
    return sessions, nodes, train, dirs, clean, records


def at_reference_speed(nodes: pd.DataFrame, sessions: pd.DataFrame, ref: dict, launch_cost_us: float) -> tuple:
    """(nodes, factors): each session's plain node dispatch times (ref / its calibration) ^ elasticity, CUPTI's own
    cost per launch left as it is; a session without a calibration keeps its times (factor 1)."""
    if not ref.get("host_index_us") or "calib_host_index_us" not in sessions:
        return nodes, pd.Series(dtype=float)
    keys = ["machine", "model", "session", "cudnn_conv_algo_search"]
    cal = pd.to_numeric(sessions["calib_host_index_us"], errors="coerce")
    f = (float(ref["host_index_us"]) / cal) ** float(ref.get("elasticity", 1.0))
    f = f.where(np.isfinite(f) & (f > 0), 1.0).clip(*[1 / s for s in reversed(mc.SCALE_RANGE)])
    fac = sessions[keys].assign(f=f.to_numpy())
    n = nodes.merge(fac, on=keys, how="left")
    n["f"] = n["f"].fillna(1.0)
    cupti = launch_cost_us * n["launches"]
    n["host_us"] = cupti + (n["host_us"] - cupti).clip(lower=0.0) * n["f"]
    return n.drop(columns="f"), fac["f"]


def node_row(idx: pd.DataFrame, key: tuple):
    """The per-node medians of (model, node) from a frame indexed by them; None when the node was not measured."""
    if key not in idx.index:
        return None
    row = idx.loc[key]
    return row.iloc[0] if isinstance(row, pd.DataFrame) else row


def host_from_clean(per_node: pd.DataFrame, models: list, records: dict, model: dict, lab: pd.DataFrame,
                    sessions: pd.DataFrame, idle_frac: float, bounds, label_scale: pd.Series = None) -> tuple:
    """(per_node, factors): each dispatch-bound model's node dispatch scaled so that its timeline, built from its own
    measured node GPU and host times, runs as long as its clean label. Why: the host labels are launch intervals of a
    process with CUPTI attached, less one cost per launch (cupti_launch_us), but CUPTI's cost is per CUDA call, not per
    launch, so it differs by op mix: exam v10's dlrm ran 1.5-2.6x slower traced than clean with host labels that
    matched the trees (the model over-predicted +52%), and recurrent nodes' labels were 0.58-3.3x the clean estimate.
    Only where the run is dispatch-bound (median GPU idle >= idle_frac of the span) does the clean label pin the host
    sum; elsewhere the factor is 1. factors: pd.Series per model, clipped to `bounds`. label_scale (per model, 1 where
    absent): the host speed its label was taken at, relative to the reference (labels_at_reference)."""
    idle = (sessions["gpu_idle_us"] / sessions["span_us"]).groupby(sessions["model"]).median()
    terms = {"u": 0.0, "clock_ratio": 1.0, "wait_us": 0.0}
    lo, hi = (float(b) for b in bounds)
    pn = per_node.set_index(["model", "node"])
    factors = {}
    for m in models:
        if m not in lab.index or idle.get(m, 0.0) < idle_frac:
            continue
        ks = records[m]["kernels"]
        rows = [node_row(pn, (m, k["node_name"])) for k in ks]
        gpu = [float(r["gpu_us"]) if r is not None else 0.0 for r in rows]
        host = np.array([float(r["host_plain_us"]) if r is not None else 0.0 for r in rows])
        prep = tm.prepared(records[m], kernel_ms(ks, gpu), model, node_host_us=host)
        target = float(lab.loc[m, "e2e_ms"]) * 1e3
        params = mc.calibrated_params(model["params"], float(label_scale.get(m, 1.0))) \
            if label_scale is not None else model["params"]
        total = lambda f: tm.timeline_us(dict(prep, h=host * f), params, terms, True)["total_us"]  # noqa: E731
        if total(lo) >= target:
            f = lo
        elif total(hi) <= target:
            f = hi
        else:  # the run's length grows monotonically with its dispatch
            a, b = lo, hi
            for _ in range(30):
                f = 0.5 * (a + b)
                a, b = (f, b) if total(f) < target else (a, f)
        factors[m] = f
    fac = pd.Series(factors, dtype=float)
    out = per_node.copy()
    scale = out["model"].map(fac).fillna(1.0)
    out["host_plain_us"] = out["host_plain_us"] * scale
    return out, fac


def training_rows(models: list, records: dict, per_node: pd.DataFrame) -> tuple:
    """(kernels, gpu_us, host_us, model of each) for every record kernel with a measured node."""
    idx = per_node.set_index(["model", "node"])
    ks, g, h, owner = [], [], [], []
    for m in models:
        for k in with_context(records[m]["kernels"]):   # neighbours from the whole record, before any is skipped
            row = node_row(idx, (m, k["node_name"]))
            if row is not None:
                ks.append(k)
                g.append(float(row["gpu_us"]))
                h.append(float(row["host_plain_us"]))
                owner.append(m)
    return ks, np.array(g), np.array(h), np.array(owner)


def pool_rows(pool_cfg: dict, algo: str, train_archs: list, busy_max: float, log) -> tuple:
    """(kernels, gpu_us, archs, dirs, models) of the pooled GPU's training-split nodes (cfg gpu_pool); empty
    without one. Only their CUPTI GPU time is used."""
    if not pool_cfg:
        return [], np.zeros(0), np.array([], dtype=object), [], np.array([], dtype=object)
    if not pool_cfg.get("timeline_dirs") or not pool_cfg.get("records"):
        raise HaseError("config gpu_pool needs timeline_dirs and records", "gpu_pool")
    _, nodes, models, dirs, _ = split_sessions(pool_cfg["timeline_dirs"], algo, train_archs, busy_max)
    records, _ = available_records(pool_cfg["records"], models)
    models = [m for m in models if m in records]
    ks, g, _, owner = training_rows(models, records, node_medians(nodes, 0.0))
    # not the grouped 1-D convs that cuDNN may run one group at a time: whether it does is each GPU's own timing
    # choice (pooled, the H100's ssm went 30.7 -> 78.8% out of fold, session 28)
    keep = np.array([not per_group_candidate(k) for k in ks], bool)
    ks, g, owner = [k for k, t in zip(ks, keep) if t], g[keep], owner[keep]
    log.info("GPU-time trees also learn from %d nodes of %d models on %s (%d grouped Conv1d nodes left out)",
             len(ks), len(models), sorted({paths.gpu_of(d) for d in dirs}), int((~keep).sum()))
    return ks, g, np.array([paths.model_arch(m) for m in owner], dtype=object), dirs, owner


def prepare(record: dict, nm: NodeModel, model: dict) -> dict:
    gpu_us, host_us = nm.predict(record["kernels"])   # both trees in one pass over the record
    ms = kernel_ms(record["kernels"], gpu_us)
    prep = tm.prepared(record, ms, model, node_host_us=host_us)
    prep["kernel_ms"], prep["standalone_sum_ms"] = ms, float(sum(ms.values()))
    prep["unseen_types"] = nm.unseen_types(record["kernels"])
    prep["fallback_share"] = nm.fallback_share(record["kernels"], prep["dev"])
    return prep


def predict_idle(prep: dict, params: dict, spread: dict) -> dict:
    r = tm.with_spread(prep, params, {"u": 0.0, "clock_ratio": 1.0, "wait_us": 0.0}, spread, True)
    return {k: v / 1e3 for k, v in r.items()}


def clean_calibration_ref(cal_ref: dict, clean: pd.DataFrame) -> dict:
    """The host speed the clean labels were taken at: the clean processes' own calibration (trace_run's sessions read
    theirs with CUPTI attached, slower), and the elasticity between machines (machine_calibration.machine_elasticity);
    a target node's calibration is compared with this one. cal_ref (the trace sessions') where no clean process read
    a calibration. inference/refresh_calibration_ref.py re-makes it for an installed model."""
    if "clean_calib_host_index_us" not in clean:
        return cal_ref
    v = pd.to_numeric(clean["clean_calib_host_index_us"], errors="coerce").dropna()
    v = v[v > 0]
    if not len(v):
        return cal_ref
    between = mc.machine_elasticity(clean)   # what a target machine's median reading needs
    return dict(cal_ref, host_index_us=float(v.median()), p10_us=float(v.quantile(0.1)),
                p90_us=float(v.quantile(0.9)), sessions=int(len(v)),
                machines=int(clean.loc[v.index, "machine"].nunique()),
                elasticity_sessions=cal_ref.get("elasticity", 1.0), **between,
                source="clean-label processes" + ("" if between else " (elasticity from the trace sessions)"))


def with_copy_reference(cal_ref: dict, timeline_dirs) -> dict:
    """cal_ref with the GPU kind's typical session.run copy rate (every machine folder's calibration, labels-only ones
    too) as copy_gbps, where any folder read one: a target's own rate scales its copies."""
    copy_ref = mc.copy_reference([d for d in paths.expand_globs(timeline_dirs) if Path(d).is_dir()])
    return dict(cal_ref or {}, copy_gbps=copy_ref) if copy_ref else cal_ref


def label_host_scales(clean: pd.DataFrame, ref: dict) -> pd.Series:
    """Per model, the host speed its clean label was taken at relative to ref (the fit's calibration_ref): the
    geometric mean over its clean sessions of their machine's host_scale (the machine's median reading against the
    reference, to the elasticity), as a prediction for that machine would be scaled."""
    need = {"machine", "model", "clean_calib_host_index_us"}
    if not ref.get("host_index_us") or not need <= set(clean.columns):
        return pd.Series(dtype=float)
    idx = clean[clean["clean_calib_host_index_us"] > 0].groupby("machine")["clean_calib_host_index_us"].median()
    scale = pd.Series({mach: mc.host_scale({"calibration_ref": ref}, float(v))[0] for mach, v in idx.items()})
    return np.exp(np.log(clean["machine"].map(scale).fillna(1.0)).groupby(clean["model"]).mean())


FIT_BOUNDS = {"c0_us": (0.0, 400.0), "kappa": (0.5, 2.0)}   # physical ranges: a run's fixed cost, clean/learned host


def fit_c0_kappa(preps: list, labels_ms: np.ndarray, params: dict, spread: dict, scales=None) -> dict:
    """{'c0_us', 'kappa'} by least squares on the relative error of the idle runs (soft L1, as fit_interference's
    alpha) over out-of-fold preparations: every model's trees never saw its architecture. scales: per run, the host
    speed its label was taken at (labels_at_reference); the fitted c0 and kappa are then the reference speed's."""
    from scipy.optimize import least_squares
    names = list(FIT_BOUNDS)
    scales = np.ones(len(preps)) if scales is None else np.asarray(scales, float)

    def resid(x):
        p = dict(params, **dict(zip(names, (float(v) for v in x))))
        return np.array([predict_idle(pr, mc.calibrated_params(p, sc), spread)["central"]
                         for pr, sc in zip(preps, scales)]) / labels_ms - 1.0
    sol = least_squares(resid, [float(params[k]) for k in names], bounds=([FIT_BOUNDS[k][0] for k in names],
                        [FIT_BOUNDS[k][1] for k in names]), loss="soft_l1", f_scale=0.1, diff_step=1e-3)
    return dict(zip(names, (float(v) for v in sol.x)))


def main() -> int:
    p = base_parser("Phase 7: timeline model learned on the corpus's training architectures", "inference",
                    "corpus_timeline.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    split = load_split()
    train_archs = training_archs(split, cfg["join_exams"])
    q = tuple(float(x) for x in cfg["spread_quantiles"])
    if cfg["fit_c0_kappa"] and not (cfg["cv_folds"] and int(cfg["cv_folds"]) > 1):
        raise HaseError("fit_c0_kappa needs out-of-fold runs: set cv_folds to 2 or more", "cv_folds")
    if cfg["label"] not in ("clean", "trace"):
        raise HaseError(f"config label: '{cfg['label']}' is not clean or trace")
    sessions, nodes, train, dirs, clean, records = training_data(cfg, train_archs, log)
    if cfg["label"] == "clean":  # never mixed: a model without a clean label is left out
        if clean.empty:
            raise HaseError("label clean: no clean_sessions.csv in any timeline folder (benchmark/clean_labels.py)",
                            "timeline_dirs")
        lost = [m for m in train if m not in set(clean["model"])]
        # their nodes still teach the trees (no label enters there); the labels' uses (CUPTI's cost per launch,
        # the out-of-fold judgement, the band's residuals) skip them
        log.info("labels from processes that never profile: %d sessions on %d machines; %d training models "
                 "without one are scored on none", len(clean), clean["machine"].nunique(), len(lost))
    log.info("training split: %d models of %d architectures, %d sessions on %d machines", len(train),
             len({paths.model_arch(m) for m in train}), len(sessions), sessions["machine"].nunique())

    lab = labels(sessions, q) if cfg["label"] == "trace" else clean_labels(clean, q)
    launch_cost = cupti_launch_us(sessions, float(cfg["dispatch_bound_idle_frac"]),
                                  None if cfg["label"] == "trace" else lab["e2e_ms"])
    cal_ref = mc.reference(sessions)
    if cfg["host_relative_to_calibration"]:
        nodes, fac = at_reference_speed(nodes, sessions, cal_ref, launch_cost)
        if len(fac):
            log.info("node dispatch brought to the reference host speed (%.2f us, elasticity %.2f): session factors "
                     "p10 %.3f median %.3f p90 %.3f", cal_ref["host_index_us"], cal_ref.get("elasticity", 1.0),
                     fac.quantile(0.1), fac.median(), fac.quantile(0.9))
    per_node = node_medians(nodes, launch_cost)
    io = {m: (io_bytes(records[m].get("graph_inputs")), io_bytes(records[m].get("graph_outputs"))) for m in train}
    ct = copy_terms(sessions, io, {m: len(records[m]["kernels"]) for m in train})
    spread = spread_factors(sessions, q)
    base = tm.load(Path(cfg["load_params_from"])) if cfg["load_params_from"] else None
    model = {"host_table": measured_host_table(per_node, {m: records[m] for m in train}),
             "host_semantics": tm.LAUNCH, "gpu_floor_frac": 0.0, "gpu_floor_us": 0.0, "standalone_overhead_us": 0.0,
             "bandwidth": None, "idle_load": dict((base or {}).get("idle_load", {})),
             "idle_clock_mhz": float((base or {}).get("idle_clock_mhz", 0.0)),
             "copies_measured": {k: ct[k] for k in ("h2d_us_per_byte", "h2d_slow_us_per_byte", "h2d_wait_tau_us",
                                                    "d2h_us_per_byte", "us_per_node")},
             "statistic": "median", "cupti_launch_us": launch_cost, "spread": spread, "algo": cfg["algo"],
             "spread_quantiles": list(q), "gpu_source": "node_model", "predictor_dir": "",
             "params": dict(tm.DEFAULT_PARAMS, c0_us=ct["before_us0"] + ct["after_us0"], kappa=1.0),
             # the training processes' host speed: a target node's calibration scales the host terms by it
             "calibration_ref": cal_ref}
    if base:  # the load terms are not learned on the corpus (idle only): the measured interference model's
        model["params"].update({k: base["params"][k] for k in ("alpha", "beta_us", "clock_exp", "gamma")
                                if k in base["params"]})
        model["interference"] = base.get("interference", "per_launch")
        model["load_params_from"] = str(cfg["load_params_from"])
    if cfg["label"] == "clean":
        model["calibration_ref"] = clean_calibration_ref(cal_ref, clean)
    model["calibration_ref"] = with_copy_reference(model.get("calibration_ref"), cfg["timeline_dirs"])
    model["label"] = cfg["label"]
    # the host speed each clean label was taken at (reported out of fold always; fitted on with labels_at_reference)
    label_scale = label_host_scales(clean, model.get("calibration_ref") or {}) if cfg["label"] == "clean" else None
    lscale = label_scale if cfg["labels_at_reference"] else None
    if lscale is not None and len(lscale):
        model["labels_at_reference"] = {"models": int(len(lscale)), "p10": float(lscale.quantile(0.1)),
                                        "median": float(lscale.median()), "p90": float(lscale.quantile(0.9))}
        log.info("labels at the reference host speed: label scales p10 %.3f median %.3f p90 %.3f",
                 *(model["labels_at_reference"][k] for k in ("p10", "median", "p90")))
    if cfg["host_from_clean"] and cfg["label"] == "clean":
        per_node, hfac = host_from_clean(per_node, train, records, model, lab, sessions,
                                         float(cfg["dispatch_bound_idle_frac"]), cfg["host_from_clean_range"], lscale)
        fam = pd.Series({m: split.family[paths.model_arch(m)] for m in hfac.index}, dtype=object)
        model["host_from_clean"] = {"models": int(len(hfac)), "median": float(hfac.median()) if len(hfac) else 1.0,
                                    "p10": float(hfac.quantile(0.1)) if len(hfac) else 1.0,
                                    "p90": float(hfac.quantile(0.9)) if len(hfac) else 1.0,
                                    "by_family_median": {f: float(v.median()) for f, v in hfac.groupby(fam)}}
        log.info("host dispatch reconciled with the clean labels on %d dispatch-bound models: factor p10 %.2f median "
                 "%.2f p90 %.2f", len(hfac), model["host_from_clean"]["p10"], model["host_from_clean"]["median"],
                 model["host_from_clean"]["p90"])

    # ---- out of fold on the training split, grouped by architecture
    ks, g, h, owner = training_rows(train, records, per_node)
    archs = np.array([paths.model_arch(m) for m in owner])
    pool = pool_rows(cfg["gpu_pool"], cfg["algo"], train_archs, float(cfg["idle_busy_max"]), log)
    cv = {}
    if cfg["cv_folds"] and cfg["cv_folds"] > 1:
        uniq = sorted(set(archs))
        rng = np.random.default_rng(0)
        fold_of = dict(zip(uniq, rng.permutation(len(uniq)) % int(cfg["cv_folds"])))
        rows, oof_preps = [], {}
        for f in range(int(cfg["cv_folds"])):
            tr = np.array([fold_of[a] != f for a in archs])
            pt = np.array([fold_of.get(a) != f for a in pool[2]], bool)   # the held-out archs' pooled rows too
            nm = NodeModel().fit([k for k, t in zip(ks, tr) if t], g[tr], h[tr], cfg["xgboost"],
                                 gpu_pool=([k for k, t in zip(pool[0], pt) if t], pool[1][pt]) if len(pt) else None,
                                 target=cfg["gpu_target"])
            for m in train:
                if fold_of[paths.model_arch(m)] != f or m not in lab.index:
                    continue
                prep = prepare(records[m], nm, model)
                oof_preps[m] = prep
                r = predict_idle(prep, model["params"], spread)
                rows.append({"model": m, "arch": paths.model_arch(m), "family": split.family[paths.model_arch(m)],
                             "batch": int(m.split("_bs")[1].split("_")[0]), "pred_ms": r["central"],
                             "e2e_ms": lab.loc[m, "e2e_ms"], "pred_gpu_us": float(prep["dev"].sum()),
                             "pred_host_us": float(prep["h"].sum()), "fallback_share": prep["fallback_share"]})
            log.info("out-of-fold %d/%d done", f + 1, cfg["cv_folds"])
        d = pd.DataFrame(rows)
        if cfg["fit_c0_kappa"]:
            before = accuracy(d["pred_ms"], d["e2e_ms"])
            fitted = fit_c0_kappa([oof_preps[m] for m in d["model"]], d["e2e_ms"].to_numpy(float), model["params"],
                                  spread, None if lscale is None else d["model"].map(lscale).fillna(1.0).to_numpy())
            log.info("c0 %.1f -> %.1f us, kappa 1 -> %.3f (fitted on %d out-of-fold runs)", model["params"]["c0_us"],
                     fitted["c0_us"], fitted["kappa"], len(d))
            model["params"].update(fitted)
            model["fitted"] = sorted(fitted)
            model["at_bounds"] = [k for k, v in fitted.items() if min(abs(v - b) for b in FIT_BOUNDS[k]) < 1e-6]
            d["pred_ms_before_fit"] = d["pred_ms"]
            d["pred_ms"] = [predict_idle(oof_preps[m], model["params"], spread)["central"] for m in d["model"]]
            d["pred_host_us"] = [float(oof_preps[m]["h"].sum()) * model["params"]["kappa"] for m in d["model"]]
        if label_scale is not None and len(label_scale):   # and at the host speed each label was taken at
            d["label_host_scale"] = d["model"].map(label_scale).fillna(1.0)
            d["pred_ms_at_label_host"] = [predict_idle(oof_preps[m], mc.calibrated_params(model["params"], sc),
                                                       spread)["central"] for m, sc in zip(d["model"],
                                                                                           d["label_host_scale"])]
            a = accuracy(d["pred_ms_at_label_host"], d["e2e_ms"])
            log.info("out of fold at each label's host speed: MAPE %.2f%% (±10%%: %.0f%%, median signed %+.1f%%)",
                     a["mape_pct"], a["within_10pct"], a["median_signed_pct"])
        meas = sessions.assign(hp=sessions["host_sum_us"] - launch_cost * sessions["n_gpu_ops"]) \
            .groupby("model")[["hp", "gpu_sum_us"]].median()
        d["meas_gpu_us"] = meas.loc[d["model"], "gpu_sum_us"].to_numpy()
        d["meas_host_us"] = meas.loc[d["model"], "hp"].to_numpy()
        cv = {"what": f"{cfg['cv_folds']}-fold out of fold on the training split, folds by architecture",
              "overall": accuracy(d["pred_ms"], d["e2e_ms"]),
              **({"before_c0_kappa_fit": before, "c0_kappa": {k: model["params"][k] for k in FIT_BOUNDS},
                  "c0_kappa_note": "the 2 constants are fitted on these out-of-fold runs: overall is in-sample "
                                   "for them"} if cfg["fit_c0_kappa"] else {}),
              "gpu_sum": accuracy(d["pred_gpu_us"], d["meas_gpu_us"]),
              "host_sum": accuracy(d["pred_host_us"], d["meas_host_us"]),
              "by_family": {f: accuracy(t["pred_ms"], t["e2e_ms"]) for f, t in d.groupby("family")},
              "by_batch": {str(b): accuracy(t["pred_ms"], t["e2e_ms"]) for b, t in d.groupby("batch")}}
        for f, v in cv["by_family"].items():
            log.info("out of fold %-12s MAPE %.1f%% (±10%%: %.0f%%, median signed %+.1f%%)", f, v["mape_pct"],
                     v["within_10pct"], v.get("median_signed_pct", float("nan")))
        log.info("out of fold overall MAPE %.1f%%, ΣGPU %.1f%%, Σhost %.1f%%", cv["overall"]["mape_pct"],
                 cv["gpu_sum"]["mape_pct"], cv["host_sum"]["mape_pct"])

        # the band also holds the model's own error: split-conformal quantiles of the out-of-fold log residuals
        # (architectures the trees did not see), so p10-p90 is a predictive interval for a new architecture
        r = np.log(d["e2e_ms"] / d["pred_ms"])
        spread["residual_log_q"] = [float(r.quantile(q[0])), float(r.quantile(q[1]))]
        cv["residual_log_q"] = spread["residual_log_q"]

    # ---- final: every training node
    nm = NodeModel().fit(ks, g, h, cfg["xgboost"], gpu_pool=pool[:2] if len(pool[0]) else None,
                         target=cfg["gpu_target"])
    if len(pool[0]):
        nm.manifest["gpu_pool"].update(source=[str(x) for x in pool[3]], models=int(len(set(pool[4]))))
    out = Path(cfg["out"])
    # the GPU the traces came from (was written nvidia-h200 for every fit until session 27, the H100's included)
    gpus = sorted({paths.gpu_of(d) for d in dirs})
    nm.manifest["metadata"] = {"device": "cuda", "gpu": gpus[0] if len(gpus) == 1 else "+".join(gpus),
                               "train_models": len(train),
                               "train_archs": len({paths.model_arch(m) for m in train}),
                               "launch_cost_us": launch_cost, "source": [str(d) for d in dirs]}
    nm.save(out / "node_model")
    model["predictor_dir"] = paths.portable(out / "node_model")
    model["measured"] = {"cupti_launch_us": launch_cost, "copies": ct, "spread": spread, "train_models": train,
                         "split": str(paths.portable(paths.REPO / "model_zoo" / "corpus_split.yaml")),
                         "joined_exams": list(cfg["join_exams"] or [])}
    model.setdefault("fitted", []), model.setdefault("at_bounds", [])
    tm.save(model, out / "timeline_model.json")
    paths.atomic_write_text(out / "train_cv.json", json.dumps(cv, indent=1, default=float) + "\n")
    if cv:  # per model, out of fold: the development signal's cases (training split only)
        paths.atomic_write_text(out / "train_cv_cases.csv", d.to_csv(index=False, float_format="%.5g"))
    save_resolved(cfg, out)
    log.info("wrote %s (c0 %.1f us, CUPTI %.2f us/launch, %d training nodes)", out / "timeline_model.json",
             model["params"]["c0_us"], launch_cost, len(ks))
    return 0


if __name__ == "__main__":
    run_main(main)
