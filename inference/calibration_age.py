"""Issue 23: how long a host-calibration reading stays true. On the H200 machines the host speed comes in episodes
(exams v21, v22: the probe read before each model flips between ~7 and ~10-15 us per node for runs of models). A
prediction scaled by a reading is only as good as that reading is for the moment the job runs, so this asks, on the
exam machines' clean label processes (one process per machine, sessions in measurement order): predict each
session with the host terms scaled by the reading taken k sessions *before* it, and score against that session's
own e2e. k = 0 is the reading taken right before it; 'median of w' the median of the w readings ending k sessions
before it (a rolling calibration); 'machine median' is the machine's calibration over the whole run; 'none' is the
uncalibrated prediction. Lags in seconds are k times the machine's mean seconds per session (from its log).

  python inference/calibration_age.py [--set machines=...]

Each machine is scored with a fit that never trained on its exam (exam v21's machine ag with the fit exam v21
judged). Writes <out>/summary.json, <out>/lags.csv and <out>/calibration_age.png.
"""
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from hase.graph_model.dag_critical_path import available_records
from hase.inference import machine_calibration as mc
from hase.inference.score_exam import predictions, rescaled
from hase.inference import timeline_model as tm
from hase.model_zoo.corpus import load_split
from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.metrics import accuracy

DEFAULTS = {
    # machine folder: (its exam split, a timeline model fitted on none of that exam's architectures)
    "machines": {
        "benchmark/results/nvidia-h200/corpus/machine_ah": {
            "split_file": "model_zoo/corpus_split_v22.yaml",
            "timeline_model": "inference/results/nvidia-h200/corpus/timeline_model.json"},
        "benchmark/results/nvidia-h200/corpus/machine_ag": {
            "split_file": "model_zoo/corpus_split_v21.yaml",
            "timeline_model": "9144522:inference/results/nvidia-h200/corpus/timeline_model.json"}},
    "records": "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz",
    "lags": [0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 400],
    "windows": [1, 5, 25, 100],   # a reading at lag k: the median of w readings ending there (1: one reading)
    "out": "inference/results/nvidia-h200/calibration_age",
}


def seconds_per_session(machine_dir: Path, sessions: int) -> float:
    """The label stage's seconds over its `sessions` (log.txt's 'stage trace' and the next stage's start)."""
    log = (machine_dir / "log.txt").read_text()
    st = {m.group(1): int(m.group(2)) for m in re.finditer(r"^stage (.+?) (\d+)$", log, re.M)}
    start, end = st.get("trace"), st.get("trace after the labels")
    return float(end - start) / sessions if start is not None and end is not None and sessions else float("nan")


def at_commit(spec: str, tmp: Path) -> tuple:
    """(timeline model path, predictor dir or ''): 'COMMIT:path' is the file as committed then (its folder unpacked
    with git archive into tmp, its node model beside it); a plain path is itself."""
    import subprocess
    m = re.match(r"^([0-9a-f]{7,40}):(.+)$", spec)
    if not m:
        return spec, ""
    commit, rel = m.groups()
    folder = str(Path(rel).parent)
    dest = tmp / commit
    dest.mkdir(parents=True, exist_ok=True)
    arc = subprocess.run(["git", "archive", commit, folder], cwd=paths.REPO, capture_output=True, check=False)
    if arc.returncode:
        raise HaseError(f"git archive {commit} {folder}: {arc.stderr.decode().strip()[:200]}", "machines")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arc.stdout, check=True)
    tl = dest / rel
    pdir = tm.predictor_of(tm.load(tl), "")
    return str(tl), str(dest / pdir) if pdir and not Path(pdir).is_absolute() else ""


def one_machine(mdir: Path, spec: dict, cfg: dict, log, tmp: Path) -> tuple:
    # row order is measurement order: lags count every session of the process (exam or anchor)
    full = pd.read_csv(mdir / "clean_sessions.csv.xz")
    if full["clean_pid"].nunique() != 1:
        raise HaseError(f"{mdir}: {full['clean_pid'].nunique()} label processes; the lag is read within one process")
    probe = full["clean_calib_host_index_us"].to_numpy(float)
    split = load_split(paths.REPO / spec["split_file"])
    s = full[full["model"].map(paths.model_arch).isin(set(split.exam))]   # exam models only
    records, missing = available_records(cfg["records"], sorted(set(s["model"])))
    s = s[~s["model"].isin(missing)]
    idx = s.index.to_numpy()   # each exam session's row in the whole process
    s = s.reset_index(drop=True)
    tl, pdir = at_commit(spec["timeline_model"], tmp)
    model = tm.load(Path(tl))
    preds = predictions(tl, pdir, records, sorted(set(s["model"])), split)
    e2e = s["e2e_clean_median_ms"].to_numpy(float)
    batch = np.array([int(m.split("_bs")[1].split("_")[0]) for m in s["model"]])
    cache = {}

    def pred_at(m, u):
        key = (m, round(float(u), 3))
        if key not in cache:
            cache[key] = rescaled(preds[m][-1], model, float(u))
        return cache[key]
    rows = []
    sps = seconds_per_session(mdir, len(full))

    def add(name, lag, p, ok):
        for tag, sel in (("all", ok), ("batch 1", ok & (batch == 1)), ("batch > 1", ok & (batch > 1))):
            a = accuracy(p[sel], e2e[sel])
            rows.append({"machine": mdir.name, "reading": name, "lag_sessions": lag,
                         "lag_s": lag * sps if lag is not None else float("nan"), "models": tag, "n": int(sel.sum()),
                         "mape_pct": a["mape_pct"], "within_10pct": a["within_10pct"],
                         "median_signed_pct": float(np.median((p[sel] / e2e[sel] - 1) * 100))})
    ok_all = np.ones(len(s), bool)
    med = float(np.nanmedian(probe))
    p_none = np.array([preds[m][0] for m in s["model"]])
    p_med = np.array([pred_at(m, med) for m in s["model"]])
    add("none", None, p_none, ok_all)
    add("machine median", None, p_med, ok_all)
    wins = [int(w) for w in cfg["windows"]]
    first = max(cfg["lags"]) + max(wins) - 1   # the same sessions at every lag and window: a full window at the largest
    okl = idx >= first
    for k in cfg["lags"]:
        j = idx - int(k)
        for w in wins:
            u = np.array([np.nanmedian(probe[x - w + 1:x + 1]) if x - w + 1 >= 0 else np.nan for x in j])
            p = np.array([pred_at(m, v) if np.isfinite(v) else np.nan for m, v in zip(s["model"], u)])
            add("one reading" if w == 1 else f"median of {w}", int(k), p, okl & np.isfinite(p))
    # the same sessions as the lagged rows, for the two references
    add("none (lagged sessions)", None, p_none, okl)
    add("machine median (lagged sessions)", None, p_med, okl)
    x = probe[np.isfinite(probe)]
    acf = {int(k): float(np.corrcoef(x[:-k], x[k:])[0, 1]) for k in cfg["lags"] if 0 < k < len(x) - 2}
    info = {"sessions": int(len(s)), "seconds_per_session": sps, "probe_median_us": med,
            "probe_autocorrelation": acf, "timeline_model": spec["timeline_model"], "split_file": spec["split_file"]}
    log.info("%s: %d exam sessions, %.2f s per session, probe median %.2f us, autocorrelation %s", mdir.name,
             len(s), sps, med, ", ".join(f"lag {k}: {v:.2f}" for k, v in acf.items()))
    return rows, info


def main() -> int:
    p = base_parser("Issue 23: how long a host-calibration reading stays true", "inference", "calibration_age.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    out = paths.REPO / cfg["out"]
    import tempfile
    rows, infos = [], {}
    with tempfile.TemporaryDirectory(prefix="hase_calage_") as tmp:
        for mdir, spec in cfg["machines"].items():
            r, info = one_machine(paths.REPO / mdir, spec, cfg, log, Path(tmp))
            rows += r
            infos[Path(mdir).name] = info
    t = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "lags.csv", t.to_csv(index=False, float_format="%.4g"))
    summary = {"what": "per exam session, the prediction with the host terms scaled by the probe read k sessions "
                       "before it, against that session's e2e (MAPE); references: no scaling, the machine's median",
               "machines": infos, "lags": t.to_dict(orient="records")}
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
    for (mach, models), g in t.groupby(["machine", "models"]):
        ref = g[g["reading"].isin(["none (lagged sessions)", "machine median (lagged sessions)"])]
        lag = g[g["reading"] == "one reading"]
        log.info("%s %s: none %.1f%%, machine median %.1f%%; one reading at lag %s", mach, models,
                 *ref["mape_pct"].tolist(), ", ".join(f"{int(k)}: {v:.1f}%" for k, v in zip(lag["lag_sessions"],
                                                                                             lag["mape_pct"])))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, models in zip(axes, ("batch 1", "batch > 1")):
            for mach, g in t[t["models"] == models].groupby("machine"):
                lag = g[g["reading"] == "one reading"]
                line = ax.plot(lag["lag_s"].clip(lower=0.3), lag["mape_pct"], "o-", label=f"{mach}: one reading")
                for name, style in (("machine median (lagged sessions)", "--"), ("none (lagged sessions)", ":")):
                    v = g.loc[g["reading"] == name, "mape_pct"]
                    if len(v):
                        ax.axhline(float(v.iloc[0]), ls=style, color=line[0].get_color(), lw=1,
                                   label=f"{mach}: {name.split(' (')[0]}")
            ax.set_xscale("log")
            ax.set_xlabel("age of the reading (s; 0 plotted at 0.3)")
            ax.set_title(models)
        axes[0].set_ylabel("MAPE against the session's own e2e (%)")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "calibration_age.png", dpi=110)
    except ImportError:
        log.warning("no matplotlib: no plot")
    save_resolved(cfg, out)
    return 0


if __name__ == "__main__":
    run_main(main)
