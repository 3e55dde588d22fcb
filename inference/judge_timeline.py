"""Phase 7: judge a timeline model on any GPU's measured sessions (a second GPU, a new machine), idle.

  python inference/judge_timeline.py --set timeline_model=<timeline_model.json> --set timeline_dirs=[<machine dirs>]

Reads benchmark/trace_run.py sessions (imported by benchmark/import_trace.py, one folder per machine), labels
every model by the median over its fresh sessions (p10/p90 across sessions beside it, as
fit_measured_timeline.py does) and predicts it with the given timeline model (its host, copy and GPU terms as
they are: nothing is refitted). Writes <out>/cases.csv and <out>/summary.json (split `idle / <arch split>`).
A model with a GPU-time table needs no kernel predictor; one fitted with gpu_source=predictor names its
predictor in `predictor_dir`.
"""
import json
from pathlib import Path


import pandas as pd  # noqa: E402

from hase.graph_model.dag_critical_path import load_records  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from hase.inference.fit_interference import prepare_all  # noqa: E402
from hase.inference.fit_measured_timeline import NEED_S, labels, predict  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.metrics import accuracy  # noqa: E402
from hase.utils.tables import read_machines  # noqa: E402

DEFAULTS = {"timeline_model": "inference/results/nvidia-h200/measured/timeline_model.json",
            "predictor_dir": "",      # the kernel predictor of a gpu_source=predictor model
            "timeline_dirs": ["benchmark/results/nvidia-h100/timeline/machine_*"],
            "records": "ort_analysis/ort_kernel_record/nvidia-h200/records.json.xz",   # phase 2 CUDA records of the models
            "algo": "EXHAUSTIVE", "spread_quantiles": [0.1, 0.9],
            "out": "inference/results/nvidia-h100/judged"}


def main() -> int:
    p = base_parser("Phase 7: a timeline model judged on measured sessions of any GPU", "inference",
                    "judge_timeline.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    q = tuple(float(x) for x in cfg["spread_quantiles"])
    dirs = [Path(d) for d in paths.expand_globs(cfg["timeline_dirs"]) if Path(d).is_dir()]
    sessions = read_machines(dirs, "trace_sessions.csv.gz", NEED_S, "trace_run session")
    sessions = sessions[sessions["cudnn_conv_algo_search"] == cfg["algo"]]
    if sessions.empty:
        raise HaseError(f"no {cfg['algo']} sessions", dirs[0])
    model = tm.load(Path(cfg["timeline_model"]))
    records = load_records(cfg["records"], sorted(sessions["model"].unique()))
    preps = prepare_all(records, model, cfg["predictor_dir"])
    train = tm.train_archs(model)
    lab = labels(sessions, q)
    rows = []
    for m, prep in preps.items():
        e2e = predict(prep, model["params"], model.get("spread"), True)
        dev = predict(prep, model["params"], model.get("spread"), False)
        rows.append({"model": m, "arch": paths.model_arch(m),
                     "split": "training arch" if paths.model_arch(m) in train else "held-out arch",
                     **lab.loc[m].to_dict(), "pred_e2e_ms": e2e["central"], "pred_e2e_p10_ms": e2e["p10"],
                     "pred_e2e_p90_ms": e2e["p90"], "pred_device_ms": dev["central"],
                     "pred_gpu_sum_us": e2e["gpu_sum_us"], "pred_host_sum_us": e2e["host_sum_us"],
                     "meas_gpu_sum_us": float(sessions.loc[sessions["model"] == m, "gpu_sum_us"].median())})
    cases = pd.DataFrame(rows)
    splits = {}
    for s, d in cases.groupby("split"):
        splits[f"idle / {s}"] = {"models": int(len(d)), "e2e": accuracy(d["pred_e2e_ms"], d["e2e_ms"]),
                                 "device": accuracy(d["pred_device_ms"], d["device_ms"]),
                                 "gpu_sum": accuracy(d["pred_gpu_sum_us"], d["meas_gpu_sum_us"]),
                                 "label_in_p10_p90_pct": float(((d["e2e_ms"] >= d["pred_e2e_p10_ms"])
                                                                & (d["e2e_ms"] <= d["pred_e2e_p90_ms"])).mean() * 100),
                                 "signed_median_error_pct": float(((d["pred_e2e_ms"] / d["e2e_ms"] - 1) * 100).median())}
    gpu = sessions.get("gpu_name")
    summary = {"timeline_model": str(cfg["timeline_model"]), "predictor_dir": cfg["predictor_dir"],
               "timeline_dirs": [str(d) for d in dirs], "sessions_per_model": float(cases["sessions"].median()),
               "machines": int(sessions["machine"].nunique()),
               "gpu": sorted(set(gpu.dropna())) if gpu is not None else None, "by_split": splits}
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "cases.csv", cases.to_csv(index=False, float_format="%.5g"))
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
    save_resolved(cfg, out)
    for k, v in splits.items():
        log.info("%s (%d models): e2e MAPE %.1f%% (±10%%: %.0f%%, median signed %+.1f%%), device %.1f%%, ΣGPU %.1f%%",
                 k, v["models"], v["e2e"]["mape_pct"], v["e2e"]["within_10pct"], v["signed_median_error_pct"],
                 v["device"]["mape_pct"], v["gpu_sum"]["mape_pct"])
    return 0


if __name__ == "__main__":
    run_main(main)
