"""Where a scored exam misses, term by term: per family, the predicted GPU time against the trace's measured GPU
busy time (the union of kernel intervals, CUPTI) and the predicted host dispatch against the trace's host sum with
CUPTI's own cost per launch taken off, beside the whole-model signed error of the exam (cases.csv).

  python debug/exam_terms.py --set exam=inference/results/nvidia-h200/exam_v10 \
      [--set 'timeline_dirs=[benchmark/results/nvidia-h200/corpus/machine_x]']

Reads only what the scorer wrote (resolved_config.json names the timeline model, records and traces). Writes
<exam>/terms.csv (one row per traced exam model) and <exam>/terms.json (per family medians). A model read this way
is no longer a test: run it after the exam is scored, never before, and before the default it names is refit on
the exam (it refuses a timeline model that has trained on the exam's architectures).
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hase.graph_model.dag_critical_path import available_records
from hase.inference import timeline_model as tm
from hase.inference.fit_corpus_timeline import split_sessions
from hase.inference.score_exam import predictions
from hase.model_zoo.corpus import load_split
from hase.utils import paths
from hase.utils.config import base_parser, from_args
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger

DEFAULTS = {"exam": "inference/results/nvidia-h200/exam_v10", "timeline_dirs": [],
            "cupti_us_per_launch": 5.03}  # CUPTI's measured cost per launch on the host (docs/method.md)


def exam_split(rc: dict):
    """The split of the exam the scorer scored (its resolved config's split_file; the default split for exams
    scored before the key existed). Not the default: a fit that joined an older exam (the H200's joins exam v11)
    would be refused as trained on that exam."""
    return load_split(paths.REPO / rc["split_file"]) if rc.get("split_file") else load_split()


def main() -> int:
    p = base_parser("Where a scored exam misses, term by term", "debug", "exam_terms.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("debug", args.log_level)
    ex = Path(cfg["exam"])
    if not (ex / "cases.csv").exists():
        raise HaseError("cases.csv missing: score the exam first (inference/score_exam.py)", ex)
    rc = json.loads((ex / "resolved_config.json").read_text())["config"]
    cases = pd.read_csv(ex / "cases.csv")
    model = tm.load(Path(rc["timeline_model"]))
    seen = tm.train_archs(model) & {paths.model_arch(m) for m in cases["model"]}
    if seen:  # the scorer names a path, not a version: a later refit there has trained on this exam
        raise HaseError(f"the timeline model has since been fitted on this exam's architectures ({len(seen)}, e.g. "
                        f"{sorted(seen)[0]}): its terms would be in-sample; run this right after scoring",
                        rc["timeline_model"])
    dirs = cfg["timeline_dirs"] or rc["timeline_dirs"]
    # the fit's and the scorer's reader: traced sessions and nodes of the exam's architectures only
    tr, nodes, _, _, _ = split_sessions(dirs, rc["algo"], {paths.model_arch(m) for m in cases["model"]})
    if tr.empty:
        raise HaseError("no trace sessions in timeline_dirs", ",".join(dirs))
    launches = nodes.groupby(["machine", "model", "session"])["launches"].sum()
    tr["launches"] = [launches.get(k, np.nan) for k in zip(tr["machine"], tr["model"], tr["session"])]
    meas = tr.groupby("model")[["gpu_busy_us", "host_sum_us", "launches"]].median()
    models = sorted(set(meas.index) & set(cases["model"]))
    records, _ = available_records(rc["records"], models)
    models = [m for m in models if m in records]
    pr = predictions(rc["timeline_model"], rc.get("predictor_dir", ""), records, models, exam_split(rc))
    par = model["params"]
    rows = []
    for m in models:
        prep = pr[m][-1]
        rows.append({"model": m, "pred_gpu_us": float(np.sum(tm.gpu_idle_us(prep, par)[~prep["on_host"]])),
                     "pred_host_us": float(np.sum(prep["h"]) * par["kappa"])})
    t = pd.DataFrame(rows).set_index("model").join(meas).join(cases.set_index("model")[["family", "batch", "e2e_ms",
                                                                                          "pred_ms"]])
    t["meas_host_us"] = t["host_sum_us"] - cfg["cupti_us_per_launch"] * t["launches"]
    t["gpu_ratio"] = t["pred_gpu_us"] / t["gpu_busy_us"]
    t["host_ratio"] = t["pred_host_us"] / t["meas_host_us"]
    t["e2e_signed_pct"] = (t["pred_ms"] / t["e2e_ms"] - 1) * 100
    t["host_share"] = t["meas_host_us"] / (t["e2e_ms"] * 1e3)  # above ~1: dispatch-bound
    med = lambda s: float(np.median(s))  # noqa: E731
    fam = {f: {"n": int(len(g)), "gpu_ratio": med(g["gpu_ratio"]), "host_ratio": med(g["host_ratio"]),
               "e2e_signed_pct": med(g["e2e_signed_pct"]), "host_share": med(g["host_share"])}
           for f, g in t.groupby("family")}
    out = {"exam": str(ex), "timeline_model": rc["timeline_model"], "models": len(t),
           "overall": {"gpu_ratio": med(t["gpu_ratio"]), "host_ratio": med(t["host_ratio"]),
                       "e2e_signed_pct": med(t["e2e_signed_pct"])},
           "batch_1": {"gpu_ratio": med(t.loc[t["batch"] == 1, "gpu_ratio"]),
                       "host_ratio": med(t.loc[t["batch"] == 1, "host_ratio"])},
           "by_family": fam}
    paths.atomic_write_text(ex / "terms.csv", t.reset_index().to_csv(index=False, float_format="%.5g"))
    paths.atomic_write_text(ex / "terms.json", json.dumps(out, indent=1) + "\n")
    log.info("%d traced exam models: predicted/measured GPU %.3f, host %.3f (median); e2e %+.1f%%", len(t),
             out["overall"]["gpu_ratio"], out["overall"]["host_ratio"], out["overall"]["e2e_signed_pct"])
    for f, v in fam.items():
        log.info("  %-12s n=%3d GPU x%.2f host x%.2f e2e %+6.1f%% host share %.2f", f, v["n"], v["gpu_ratio"],
                 v["host_ratio"], v["e2e_signed_pct"], v["host_share"])
    return 0


if __name__ == "__main__":
    run_main(main)
