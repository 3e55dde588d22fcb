"""Phase 7: score a timeline model on the corpus's exam (issue 22), once it is final.

  python inference/score_exam.py [--set timeline_model=inference/results/nvidia-h200/corpus/timeline_model.json]

The exam is the `exam` split of model_zoo/corpus_split.yaml, frozen in `frozen_commit` before any term was
fitted on the corpus: three families held out whole, a fresh-seed draw of every training family and named
models the corpus does not contain. Each model's label is the median over every fresh session of every machine
(benchmark/results/<gpu>/corpus/machine_*); the prediction is the model's idle timeline from its CUDA record,
with the p10-p90 band of the model's measured host and copy spread. A timeline model fitted on any exam
architecture is refused (its `measured.train_models`), and so is an exam list holding a training architecture.

Writes <out>/summary.json: by_family.<family>.{n, mape_pct, within_10pct, median_signed_pct, in_band_pct},
by_group (held-out family / fresh seed / named), by_batch, overall, frozen_commit, gpu_minutes, the baselines
scored the same way; <out>/cases.csv. An `out` named exam_v<N> also writes <out>/../exam/summary.json: the
latest scored exam at issue 22's fixed path, with `exam` and `report` naming its version folder (and its machines
summary at issue 23's, <out>/../machines/summary.json).
"""
import json
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.graph_model.dag_critical_path import available_records  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from hase.inference.fit_corpus_timeline import split_sessions  # noqa: E402
from hase.inference.fit_measured_timeline import clean_labels, labels, read_clean  # noqa: E402
from hase.inference import machine_calibration as mc  # noqa: E402
from hase.inference.node_model import per_group_risk  # noqa: E402
from hase.model_zoo.corpus import load_split  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.metrics import accuracy  # noqa: E402

DEFAULTS = {"timeline_model": "inference/results/nvidia-h200/corpus/timeline_model.json", "predictor_dir": "",
            "baselines": {}, "label": "clean", "timeline_dirs": ["benchmark/results/nvidia-h200/corpus/machine_*"],
            "records": "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz",
            "split_file": "model_zoo/corpus_split.yaml",   # which frozen exam (corpus_split_v12.yaml: v12)
            "frozen_commit": "f63163b", "gpu_minutes": 0.0, "algo": "EXHAUSTIVE", "spread_quantiles": [0.1, 0.9],
            "out": "inference/results/nvidia-h200/exam",
            "panel": "",   # a machine panel (model_zoo/machines_panel_v*.yaml): only its architectures; issue 23's table
            "machine_response": "",   # a candidate response.json (fit_machine_response.py), scored beside the shipped
            "timeline_commit": ""}    # score timeline_model as committed there (the fit a panel was frozen against)


def score(d: pd.DataFrame, pred: str) -> dict:
    a = accuracy(d[pred], d["e2e_ms"])
    band = ((d["e2e_ms"] >= d[pred + "_p10"]) & (d["e2e_ms"] <= d[pred + "_p90"])).mean() * 100 \
        if pred + "_p10" in d else float("nan")
    return {"n": int(len(d)), "mape_pct": a["mape_pct"], "within_10pct": a["within_10pct"],
            "median_signed_pct": float(np.median((d[pred] / d["e2e_ms"] - 1) * 100)), "in_band_pct": float(band)}


def predictions(tl_path: str, predictor_dir: str, records: dict, models: list, split) -> dict:
    """{model: (central, p10, p90, fallback share, unseen types, prepared timeline input)} of one timeline model at
    idle; refuses one fitted on the exam."""
    from hase.inference.predict_model_latency import prepare_record
    from hase.training.train_kernel_model import load_predictor
    model = tm.load(Path(tl_path))
    seen = tm.train_archs(model) & set(split.exam)
    if seen:
        raise HaseError(f"this timeline model was fitted on exam architectures ({', '.join(sorted(seen)[:5])}): "
                        f"it cannot be scored on the exam", tl_path)
    pdir = tm.predictor_of(model, predictor_dir)
    if pdir is None:
        raise HaseError("the timeline model names no predictor (--set predictor_dir=...)", tl_path)
    pred = load_predictor(pdir)
    out = {}
    for m in models:
        prep = prepare_record(records[m], pred, model)
        r = tm.with_spread(prep, model["params"], tm.load_terms(model["idle_load"], model.get("idle_clock_mhz", 0.0)),
                           model.get("spread"), True)
        fb = pred.fallback_share(records[m]["kernels"], prep["dev"]) if hasattr(pred, "fallback_share") else 0.0
        out[m] = (r["central"] / 1e3, r["p10"] / 1e3, r["p90"] / 1e3, fb, " ".join(prep["unseen_types"]), prep)
    return out


def rescaled(prep: dict, model: dict, host_index_us: float, copy_scales: dict = None, response: dict = None) -> float:
    """The central prediction (ms) of a prepared model with the host terms scaled by one calibration reading (and,
    given copy_scales, session.run's copies by the machine's copy rate: machine_calibration.copy_scales; given a
    response, host terms and copies by the end-to-end machine response: machine_calibration.response_scales)."""
    if response:
        scale, copy_scales, _ = mc.response_scales(model, host_index_us, response)
    else:
        scale, _ = mc.host_scale(model, host_index_us)
    prep = mc.calibrated_copies(prep, copy_scales) if copy_scales else prep
    p = mc.calibrated_params(model["params"], scale)
    r = tm.with_spread(prep, p, tm.load_terms(model["idle_load"], model.get("idle_clock_mhz", 0.0)), None, True)
    return r["central"] / 1e3


def machine_response(cfg: dict) -> dict:
    """The end-to-end machine response to judge beside the shipped calibration (config machine_response: its
    response.json), or None."""
    if not cfg.get("machine_response"):
        return None
    resp, warn = mc.load_response(cfg["machine_response"])
    if warn:
        raise HaseError(warn)
    return resp


def by_machine(sessions: pd.DataFrame, d: pd.DataFrame, preds: dict, cfg: dict, log) -> dict:
    """Issue 23's judgement: each machine's own truth (the median of its sessions) against the prediction without
    and with that machine's host calibration (the median of its sessions' calib_host_index_us), and each session
    against the prediction scaled by the reading taken just before it. preds: predictions() of the exam models."""
    if "calib_host_index_us" not in sessions:
        return {}
    model = tm.load(Path(cfg["timeline_model"]))
    out = {"what": "exam models, each machine's median e2e against the uncalibrated and the calibrated prediction; "
                   "session_noise_pct: MAPE of single sessions against their machine's median",
           "timeline_model": cfg.get("timeline_shown", cfg["timeline_model"]), "calibration_ref": model.get("calibration_ref"),
           "by_machine": {}}
    sessions = sessions[sessions["model"].isin(d["model"])]
    dirs = {Path(x).name: Path(x) for x in paths.expand_globs(cfg["timeline_dirs"])}
    resp = machine_response(cfg)
    for mach, s in sessions.groupby("machine"):
        lab_m = s.groupby("model")["e2e_median_ms"].median()
        noise = accuracy(s["e2e_median_ms"], lab_m.loc[s["model"]].to_numpy())
        cal_us = mc.machine_host_index_us(s)
        models = [m for m in d["model"] if m in lab_m.index]
        dm = d.set_index("model").loc[models]
        t = pd.DataFrame({"e2e_ms": lab_m.loc[models].to_numpy(), "pred_ms": dm["pred_ms"].to_numpy(),
                          "batch": dm["batch"].to_numpy(), "risk": dm["per_group_risk"].to_numpy()})
        row = {"sessions": int(len(s)), "models": len(models), "host_index_us": cal_us,
               "session_noise_pct": noise["mape_pct"], "uncalibrated": score(t, "pred_ms")}
        cal_warn = mc.host_scale(model, cal_us)[1] if np.isfinite(cal_us) else "no calibrated session"
        if cal_warn:
            row["calibration_warning"] = cal_warn
        else:
            t["cal_ms"] = [rescaled(preds[m][-1], model, cal_us) for m in models]
            row["host_scale"] = mc.host_scale(model, cal_us)[0]
            row["calibrated"] = score(t, "cal_ms")
            for k in ("mape_pct", "within_10pct", "median_signed_pct"):
                row[k] = row["calibrated"][k]
            # issue 23's batch-1 target (a machine's median signed error at batch 1 within +-5%): host speed shows there
            b1 = t[t["batch"].astype(int) == 1]
            if len(b1):
                row["batch1"] = {"uncalibrated": score(b1, "pred_ms"), "calibrated": score(b1, "cal_ms")}
                row["batch1_median_signed_pct"] = row["batch1"]["calibrated"]["median_signed_pct"]
            # the candidate end-to-end response (inference/fit_machine_response.py), frozen before the panel
            if resp:
                t["calr_ms"] = [rescaled(preds[m][-1], model, cal_us, response=resp) for m in models]
                row["calibrated_response"] = score(t, "calr_ms")
                if len(b1):
                    row["batch1"]["calibrated_response"] = score(t[t["batch"].astype(int) == 1], "calr_ms")
            # and the copies by the machine's own session.run copy rate (its calibration.json, read in a process
            # of its own at the job's start and end)
            cal_file = dirs.get(str(mach), Path("/nonexistent")) / "calibration.json"
            if cal_file.exists():
                got = mc.machine_copy_gbps(mc.profiles_of(cal_file))
                sc, cwarn = mc.copy_scales(model, {"copy_gbps": got})
                if not cwarn:
                    t["calc_ms"] = [rescaled(preds[m][-1], model, cal_us, sc) for m in models]
                    row["copy_gbps"], row["copy_scales"] = got, sc
                    row["calibrated_with_copies"] = score(t, "calc_ms")
        # the same without the models that carry the per-group risk: one of them can decide a machine's MAPE
        ok = ~t["risk"].astype(bool)
        if (~ok).any() and ok.any():
            keep = set(np.asarray(models)[ok.to_numpy()])
            sn = s[s["model"].isin(keep)]
            wr = {"models": int(ok.sum()),
                  "session_noise_pct": accuracy(sn["e2e_median_ms"], lab_m.loc[sn["model"]].to_numpy())["mape_pct"]}
            variants = {"uncalibrated": "pred_ms", "calibrated": "cal_ms", "calibrated_response": "calr_ms",
                        "calibrated_with_copies": "calc_ms"}
            wr.update({name: score(t[ok], col) for name, col in variants.items() if col in t})
            b1 = t[ok & (t["batch"].astype(int) == 1)]
            if len(b1):
                wr["batch1_median_signed_pct"] = {name: score(b1, col)["median_signed_pct"]
                                                  for name, col in variants.items() if col in t}
            row["without_per_group_risk"] = wr
        # per session: each session's own truth against the prediction scaled by the calibration read just before it
        cs = s.dropna(subset=["calib_host_index_us"])
        cs = cs[cs["model"].isin(preds)]  # an exam model without a record has no prediction
        if not cal_warn and len(cs):
            ps = pd.DataFrame({"e2e_ms": cs["e2e_median_ms"].to_numpy(),
                               "pred_ms": [preds[m][0] for m in cs["model"]],
                               "cal_ms": [rescaled(preds[m][-1], model, u)
                                          for m, u in zip(cs["model"], cs["calib_host_index_us"])]})
            row["per_session"] = {"uncalibrated": score(ps, "pred_ms"), "calibrated": score(ps, "cal_ms")}
            if "without_per_group_risk" in row:   # the same sessions without the risk models
                ok_s = cs["model"].isin(keep).to_numpy()
                if ok_s.any():
                    row["without_per_group_risk"]["per_session"] = {
                        "uncalibrated": score(ps[ok_s], "pred_ms"), "calibrated": score(ps[ok_s], "cal_ms")}
        row.update(gpu_state(s))
        out["by_machine"][str(mach)] = row
        out.setdefault("_cases", []).append(t.assign(machine=str(mach), model=models, sessions=s.groupby("model").size()
                                                      .loc[models].to_numpy(), host_index_us=cal_us))
        out.setdefault("_labels", {})[str(mach)] = lab_m
        log.info("machine %s: %d sessions, host %.2f us/node, noise %.1f%%; MAPE %.1f%% uncalibrated, %s%s", mach,
                 len(s), cal_us, noise["mape_pct"], row["uncalibrated"]["mape_pct"],
                 f"{row['calibrated']['mape_pct']:.1f}% calibrated (x{row['host_scale']:.3f})" if "calibrated" in row
                 else "no calibration", "; per session %.1f%% -> %.1f%%" % (
                     row["per_session"]["uncalibrated"]["mape_pct"], row["per_session"]["calibrated"]["mape_pct"])
                 if "per_session" in row else "")
        if "batch1" in row:
            log.info("machine %s: batch 1 (%d models) median signed %+.1f%% uncalibrated, %+.1f%% calibrated", mach,
                     row["batch1"]["calibrated"]["n"], row["batch1"]["uncalibrated"]["median_signed_pct"],
                     row["batch1_median_signed_pct"])
        if "calibrated_response" in row:
            log.info("machine %s: candidate end-to-end response: MAPE %.1f%%, batch 1 median signed %s", mach,
                     row["calibrated_response"]["mape_pct"],
                     f"{row['batch1']['calibrated_response']['median_signed_pct']:+.1f}%"
                     if "calibrated_response" in row.get("batch1", {}) else "-")
        if "without_per_group_risk" in row:
            w = row["without_per_group_risk"]
            log.info("machine %s: without the %d per-group-risk models: noise %.1f%%, MAPE %s", mach,
                     len(t) - w["models"], w["session_noise_pct"],
                     ", ".join(f"{k} {w[k]['mape_pct']:.1f}%" for k in ("uncalibrated", "calibrated",
                                                                          "calibrated_response") if k in w))
        if "calibrated_with_copies" in row:
            log.info("machine %s: with its copy rate too (h2d x%.2f, d2h x%.2f): MAPE %.1f%%, median signed %+.1f%%",
                     mach, row["copy_scales"]["h2d"], row["copy_scales"]["d2h"],
                     row["calibrated_with_copies"]["mape_pct"], row["calibrated_with_copies"]["median_signed_pct"])
    out["between_machines"] = between_machines(out.pop("_labels", {}))
    if out["between_machines"]:
        log.info("label noise: machines' medians against each other %.1f%% MAPE (the predictor against one machine "
                 "is read beside it)", out["between_machines"]["mape_pct"])
    return out


def read_panel(cfg: dict):
    """The architectures of cfg's machine panel (a set), None without one; one line naming the file and field when
    it is not a panel of this exam."""
    if not cfg["panel"]:
        return None
    import yaml
    pfile = paths.REPO / cfg["panel"]
    if not pfile.is_file():
        raise HaseError("no such machine panel file", cfg["panel"])
    pan = yaml.safe_load(pfile.read_text())
    if not isinstance(pan, dict) or not isinstance(pan.get("archs"), list):
        raise HaseError("a machine panel needs a list 'archs'", cfg["panel"])
    if pan.get("split_file") != cfg["split_file"]:
        raise HaseError(f"field 'split_file' is {pan.get('split_file')!r}, not this exam's {cfg['split_file']!r}",
                        cfg["panel"])
    return set(pan["archs"])


def merge_machines(old, new: dict, exam: str, report: str) -> dict:
    """Issue 23's machine table across exams: this exam's machines (each tagged with the exam and the fit that scored
    it), and every machine an earlier exam scored that this one did not, kept as it was scored then (its own fit
    and exam). One machine is one row: a machine scored again takes the newer exam's row."""
    out = dict(new, exam=exam, report=report)
    rows = {m: dict(r, exam=exam, timeline_model=new.get("timeline_model")) for m, r in new["by_machine"].items()}
    for m, r in ((old or {}).get("by_machine") or {}).items():
        if m not in rows:
            rows[m] = dict(r, exam=r.get("exam", old.get("exam")), timeline_model=r.get("timeline_model",
                                                                                          old.get("timeline_model")))
    out["by_machine"] = dict(sorted(rows.items()))
    out["targets"] = machine_targets({m: r for m, r in rows.items() if r.get("exam") == exam})
    wr = {m: without_risk_row(r) for m, r in rows.items() if r.get("exam") == exam and "without_per_group_risk" in r}
    if wr:
        out["targets_without_per_group_risk"] = machine_targets(wr)
    return out


def without_risk_row(r: dict) -> dict:
    """A by_machine row read on the models without the per-group risk, in machine_targets' fields."""
    w = r["without_per_group_risk"]
    out = {"sessions": r.get("sessions"), "models": r.get("models"), "session_noise_pct": w["session_noise_pct"]}
    if "calibrated" in w:
        out["mape_pct"] = w["calibrated"]["mape_pct"]
        b1 = (w.get("batch1_median_signed_pct") or {}).get("calibrated")
        if b1 is not None:
            out["batch1_median_signed_pct"] = b1
    return out


def machine_targets(rows: dict, noise_gap_pts: float = 2.0, spread_pts: float = 3.0, batch1_pct: float = 5.0,
                    min_machines: int = 3, min_sessions: int = 3) -> dict:
    """Issue 23's per-GPU targets, read off one exam's (or panel's) machines, all judged with one fit on one model
    set: each machine's calibrated MAPE within noise_gap_pts of its own session noise; the per-machine MAPE spread
    within spread_pts; every batch-1 median signed error within +-batch1_pct; at least min_machines machines with
    min_sessions fresh sessions per model. A machine without a calibrated score is counted as missing, not as met."""
    scored = {m: r for m, r in rows.items() if "mape_pct" in r and "session_noise_pct" in r}
    gap = {m: float(r["mape_pct"] - r["session_noise_pct"]) for m, r in scored.items()}
    b1 = {m: float(r["batch1_median_signed_pct"]) for m, r in scored.items() if "batch1_median_signed_pct" in r}
    per_model = {m: r["sessions"] / r["models"] for m, r in scored.items() if r.get("models")}
    mape = [r["mape_pct"] for r in scored.values()]
    enough = sorted(m for m, k in per_model.items() if k >= min_sessions)
    return {"machines": sorted(rows), "gap_to_noise_pts": gap,
            "met_noise": bool(gap) and len(gap) == len(rows) and all(g <= noise_gap_pts for g in gap.values()),
            "spread_pts": float(max(mape) - min(mape)) if mape else None,
            "met_spread": len(mape) >= 2 and max(mape) - min(mape) <= spread_pts,
            "batch1_median_signed_pct": b1,
            "met_batch1": bool(b1) and len(b1) == len(rows) and all(abs(v) <= batch1_pct for v in b1.values()),
            "machines_with_enough_sessions": enough, "met_machines": len(enough) >= min_machines,
            "limits": {"noise_gap_pts": noise_gap_pts, "spread_pts": spread_pts, "batch1_pct": batch1_pct,
                       "min_machines": min_machines, "min_sessions_per_model": min_sessions}}


SLOW_EVENTS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")


def gpu_state(s: pd.DataFrame) -> dict:
    """A machine's GPU as its clean labels read it right after each timed loop (clean_labels' GpuState columns, from
    session 28 on): the median SM clock and power, and the share of sessions that ended under a power or thermal clock
    event. Says whether a machine that runs GPU-bound models slow (H100 machine m, exam v12) ran at a lower clock."""
    if "clean_sm_clock_mhz" not in s:
        return {}
    clock = pd.to_numeric(s["clean_sm_clock_mhz"], errors="coerce")
    if clock.isna().all():
        return {}
    # an all-empty column reads as float NaN: cast before filling (pandas refuses a str fill on float64)
    ev = s.get("clean_clock_events", pd.Series("", index=s.index)).astype(object).fillna("").astype(str)
    return {"sm_clock_mhz_median": float(clock.median()),
            "power_w_median": float(pd.to_numeric(s.get("clean_power_w", pd.Series(dtype=float)), errors="coerce").median()),
            "slow_clock_event_pct": float(ev.apply(lambda e: any(x in e.split("+") for x in SLOW_EVENTS)).mean() * 100)}


def anchor_offsets(timeline_dirs, exam_machines: list, d: pd.DataFrame) -> dict:
    """How fast each exam machine runs against the machines the fit learned from, read on the models both measured
    (the training anchors an exam job runs beside the exam): per machine, the median of its clean label over the
    other machines' median, overall and at batch 1. Post hoc, not a score: the exam prediction scaled by the
    exam machines' offset (their sessions' weights) says how much of the error is the machines' speed."""
    every = [x for x in paths.expand_globs(timeline_dirs) if Path(x).is_dir()]
    clean = read_clean(every)
    if clean.empty or not exam_machines:
        return {}
    med = clean.groupby(["model", "machine"])["e2e_clean_median_ms"].median().unstack("machine")
    others = med.drop(columns=[m for m in exam_machines if m in med])
    if others.empty:
        return {}
    ref = others.median(axis=1)
    out, weights = {"what": "per exam machine, the median over the models it shares with the other machines (the "
                            "training anchors) of its clean label over theirs; offset: the machines' ratios weighted "
                            "by their sessions; offset_scaled_post_hoc: the exam scored with the prediction x offset "
                            "(not a score)", "by_machine": {}}, {}
    for m in exam_machines:
        if m not in med:
            continue
        j = pd.concat([med[m].rename("x"), ref.rename("ref")], axis=1).dropna()
        if j.empty:
            continue
        r = j["x"] / j["ref"]
        bs1 = r[[("_bs1_" in k) for k in r.index]]
        out["by_machine"][str(m)] = {"models": int(len(r)), "median_ratio": float(r.median()),
                                     "p10": float(r.quantile(0.1)), "p90": float(r.quantile(0.9)),
                                     "batch1_median_ratio": float(bs1.median()) if len(bs1) else None}
        weights[str(m)] = int((clean["machine"] == m).sum())
    if not out["by_machine"]:
        return {}
    w = np.array([weights[m] for m in out["by_machine"]], float)
    f = float(np.average([v["median_ratio"] for v in out["by_machine"].values()], weights=w))
    out["offset"] = f
    out["offset_scaled_post_hoc"] = score(d.assign(scaled_ms=d["pred_ms"] * f), "scaled_ms")
    return out


def between_machines(labels: dict) -> dict:
    """The labels' own noise across machines: every pair of machines' medians on the models both measured, as MAPE
    of one against the other (symmetric enough at these sizes), pooled over pairs. A model's sessions on one machine
    can share a host-speed episode (clean_labels order), so this, not session_noise_pct, says how far a machine's
    truth moves; a predictor cannot be expected closer to one machine than machines are to each other."""
    names = sorted(labels)
    pairs, errs = {}, []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            j = pd.concat([labels[a].rename("a"), labels[b].rename("b")], axis=1).dropna()
            if len(j):
                acc = accuracy(j["a"], j["b"])
                pairs[f"{a}~{b}"] = {"models": int(len(j)), "mape_pct": acc["mape_pct"],
                                     "within_10pct": acc["within_10pct"]}
                errs.append(np.abs(j["a"] / j["b"] - 1) * 100)
    if not errs:
        return {}
    e = pd.concat(errs)
    return {"what": "each machine's median e2e against each other machine's, on the models both measured",
            "pairs": pairs, "mape_pct": float(e.mean()), "within_10pct": float((e <= 10).mean() * 100)}


def one_gpu(cfg: dict) -> str:
    """The GPU scored: the one timeline_model, timeline_dirs and out name (paths.gpu_of); a config that mixes two (an
    H100 timeline scored into the H200's exam folder: exam_vN.yaml's out left as it is) is refused before anything
    is written. The records may be another GPU's: the graph ORT builds does not depend on the card."""
    named = {"timeline_model": paths.gpu_of(cfg["timeline_model"]), "out": paths.gpu_of(cfg["out"]),
             **{f"timeline_dirs[{i}]": paths.gpu_of(d) for i, d in enumerate(cfg["timeline_dirs"] or [])}}
    gpus = {g for g in named.values() if g}
    if len(gpus) > 1:
        tm_gpu = named["timeline_model"] or sorted(gpus)[0]
        key, other = next((k, g) for k, g in named.items() if g and g != tm_gpu)
        raise HaseError(f"config {key} is for {other}, timeline_model for {tm_gpu}: set timeline_model, timeline_dirs "
                        f"and out for the one GPU scored")
    return next(iter(gpus), "")


def main() -> int:
    p = base_parser("Phase 7: score a timeline model on the frozen exam", "inference", "exam.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    one_gpu(cfg)
    resolved = dict(cfg)   # what resolved_config.json keeps: the path as given (a commit's temp copy is gone after the run)
    if cfg["timeline_commit"]:   # the fit as committed there, not the installed one
        cfg["timeline_shown"] = f"{cfg['timeline_commit']}:{cfg['timeline_model']}"
        cfg["timeline_model"] = tm.at_commit(str(cfg["timeline_commit"]), cfg["timeline_model"])
    split = load_split(paths.REPO / cfg["split_file"])
    q = tuple(float(x) for x in cfg["spread_quantiles"])
    panel_archs = read_panel(cfg)
    sessions, _, exam, _, clean = split_sessions(cfg["timeline_dirs"], cfg["algo"], split.exam)
    split.refuse_trained(exam)
    if cfg["label"] not in ("clean", "trace"):
        raise HaseError(f"config label: '{cfg['label']}' is not clean or trace")
    if cfg["label"] == "clean":  # the label a user's process sees; never mixed with trace_run's own timing
        exam = sorted(set(exam) | set(clean["model"]))
        split.refuse_trained(exam)
        # by_machine reads one table of sessions: the clean ones, in its column names
        sessions = clean.rename(columns={"e2e_clean_median_ms": "e2e_median_ms",
                                         "clean_calib_host_index_us": "calib_host_index_us"})
    if panel_archs is not None:   # issue 23: the panel's architectures only, the same on every machine that ran it
        exam = [m for m in exam if paths.model_arch(m) in panel_archs]
        sessions = sessions[sessions["model"].isin(exam)]
        clean = clean[clean["model"].isin(exam)] if clean is not None else clean
    if not exam:
        raise HaseError("no exam model among the measured ones", "timeline_dirs")
    records, unpredicted = available_records(cfg["records"], exam)
    if unpredicted:  # a model Hase could not analyse is a failure of the exam, listed, not a crash of the scorer
        log.warning("%d exam model(s) have no record (the analysis failed on the GPU machine): %s",
                    len(unpredicted), " ".join(unpredicted))
        exam = [m for m in exam if m not in unpredicted]
        if not exam:   # e.g. a machine panel scored before its exam job made the records
            raise HaseError(f"none of the {len(unpredicted)} measured exam models has a record in {cfg['records']} "
                            "(the exam's GPU job makes them; import them first)", "records")
    lab = labels(sessions, q) if cfg["label"] == "trace" else clean_labels(clean, q)
    d = pd.DataFrame({"model": exam})
    d["arch"] = [paths.model_arch(m) for m in exam]
    d["family"] = [split.family[a] for a in d["arch"]]
    d["group"] = [split.exam_group[a] for a in d["arch"]]
    d["batch"] = [int(m.split("_bs")[1].split("_")[0]) for m in exam]
    for c in ("e2e_ms", "e2e_p10_ms", "e2e_p90_ms", "sessions", "machines"):
        d[c] = lab.loc[exam, c].to_numpy()
    main_pred = predictions(cfg["timeline_model"], cfg["predictor_dir"], records, exam, split)
    d["pred_ms"] = [main_pred[m][0] for m in exam]
    d["pred_ms_p10"] = [main_pred[m][1] for m in exam]
    d["pred_ms_p90"] = [main_pred[m][2] for m in exam]
    d["fallback_share"] = [main_pred[m][3] for m in exam]
    d["unseen_types"] = [main_pred[m][4] for m in exam]
    # the models whose prediction names the grouped-Conv1d per-group risk (node_model.per_group_risk): decided from
    # the record alone, before any label; scored apart as well (exam v23: one of them, 58x over, added 11 points)
    d["per_group_risk"] = [bool(per_group_risk(records[m]["kernels"])) for m in exam]
    base_scores = {}
    for name, b in (cfg["baselines"] or {}).items():
        bp = predictions(b["timeline_model"], b.get("predictor_dir", ""), records, exam, split)
        d[f"base_{name}_ms"] = [bp[m][0] for m in exam]
        d[f"base_{name}_ms_p10"] = [bp[m][1] for m in exam]
        d[f"base_{name}_ms_p90"] = [bp[m][2] for m in exam]
        base_scores[name] = {"timeline_model": b["timeline_model"], "overall": score(d, f"base_{name}_ms"),
                             "without_per_group_risk": score(d[~d["per_group_risk"]], f"base_{name}_ms"),
                             "by_family": {f: score(t, f"base_{name}_ms") for f, t in d.groupby("family")},
                             "by_batch": {str(k): score(t, f"base_{name}_ms") for k, t in d.groupby("batch")}}
    summary = {"what": "idle session.run (numpy in/out) of the exam models against the median of every fresh session "
                       "on every machine; the exam split was frozen before any corpus fit",
               "label": cfg["label"] + (" (benchmark/clean_labels.py: processes that never profile)"
                                        if cfg["label"] == "clean" else " (trace_run's own plain timing)"),
               "timeline_model": cfg.get("timeline_shown", cfg["timeline_model"]), "frozen_commit": cfg["frozen_commit"],
               "gpu_minutes": cfg["gpu_minutes"], "sessions_per_model": int(d["sessions"].median()),
               "machines": int(d["machines"].max()), "models": int(len(d)), "architectures": int(d["arch"].nunique()),
               "overall": score(d, "pred_ms"),
               "without_per_group_risk": score(d[~d["per_group_risk"]], "pred_ms"),
               "per_group_risk_models": int(d["per_group_risk"].sum()),
               "by_family": {f: score(t, "pred_ms") for f, t in d.groupby("family")},
               "by_group": {g: score(t, "pred_ms") for g, t in d.groupby("group")},
               "by_batch": {str(k): score(t, "pred_ms") for k, t in d.groupby("batch")},
               "fallback_share": {"max": float(d["fallback_share"].max()),
                                  "models_over_2pct": int((d["fallback_share"] > 0.02).sum()),
                                  "unseen_types": sorted({t for s in d["unseen_types"] for t in s.split()})},
               "baselines": base_scores}
    machines = by_machine(sessions, d, main_pred, cfg, log)
    if machines and cfg["label"] == "clean":
        anchors = anchor_offsets(cfg["timeline_dirs"], sorted(sessions["machine"].unique()), d)
        if anchors:
            machines["anchors"] = anchors
            log.info("the exam machines against the others on the anchors: %s; the prediction x%.3f (post hoc): "
                     "MAPE %.1f%%", ", ".join(f"{m} x{v['median_ratio']:.3f} ({v['models']} models)"
                                             for m, v in anchors["by_machine"].items()),
                     anchors["offset"], anchors["offset_scaled_post_hoc"]["mape_pct"])
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    if machines:
        mdir = out / "machines"
        mdir.mkdir(parents=True, exist_ok=True)
        cases = machines.pop("_cases", None)
        if cases:   # each machine's median against each variant, model by model (one row per machine and model)
            c = pd.concat(cases, ignore_index=True)
            lead = ["machine", "model", "batch", "sessions", "host_index_us", "e2e_ms"]
            c = c[lead + [k for k in c.columns if k not in lead]]
            paths.atomic_write_text(mdir / "cases.csv", c.to_csv(index=False, float_format="%.5g"))
        paths.atomic_write_text(mdir / "summary.json", json.dumps(machines, indent=1, default=float) + "\n")
    paths.atomic_write_text(out / "cases.csv", d.to_csv(index=False, float_format="%.5g"))
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
    save_resolved(resolved, out)
    if out.name.startswith("exam_v") and not cfg["panel"]:  # issue 22's fixed path: the latest scored exam
        latest = out.parent / "exam"
        latest.mkdir(parents=True, exist_ok=True)
        paths.atomic_write_text(latest / "summary.json", json.dumps(dict(summary, exam=out.name, report=str(out)),
                                                                    indent=1, default=float) + "\n")
    if out.name.startswith("exam_v") or cfg["panel"]:
        if machines:   # issue 23's fixed path: <gpu>/machines/summary.json, the latest exam's machines
            fixed = out.parent / "machines" / "summary.json"
            fixed.parent.mkdir(parents=True, exist_ok=True)
            old = json.loads(fixed.read_text()) if fixed.exists() else None
            paths.atomic_write_text(fixed, json.dumps(merge_machines(old, machines, out.name, str(out / "machines")),
                                                      indent=1, default=float) + "\n")
    o = summary["overall"]
    log.info("exam: %d models, MAPE %.1f%% (±10%%: %.0f%%, median signed %+.1f%%, in band %.0f%%)", o["n"],
             o["mape_pct"], o["within_10pct"], o["median_signed_pct"], o["in_band_pct"])
    w = summary["without_per_group_risk"]
    log.info("exam without the %d per-group-risk models: %d models, MAPE %.1f%% (±10%%: %.0f%%)",
             summary["per_group_risk_models"], w["n"], w["mape_pct"], w["within_10pct"])
    for f, v in summary["by_family"].items():
        log.info("  %-12s n=%3d MAPE %5.1f%%  ±10%% %3.0f%%  signed %+5.1f%%  band %3.0f%%", f, v["n"], v["mape_pct"],
                 v["within_10pct"], v["median_signed_pct"], v["in_band_pct"])
    for name, b in base_scores.items():
        log.info("baseline %s: MAPE %.1f%%", name, b["overall"]["mape_pct"])
    return 0


if __name__ == "__main__":
    run_main(main)
