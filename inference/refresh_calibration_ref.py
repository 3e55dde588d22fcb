"""Re-make an installed corpus timeline model's `calibration_ref` (the training processes' host speed, the elasticity
between machines, the kind's copy rates) from its own fit config, without refitting its trees:

  python inference/refresh_calibration_ref.py --set timeline_model=inference/results/nvidia-h200/corpus/timeline_model.json

Why a stage of its own: calibration_ref is read only when a prediction is scaled to a target machine
(inference/machine_calibration.py); the trees, c0 and kappa do not depend on it (the fit brings node dispatch to the
reference speed with the trace sessions' own elasticity, which this keeps). A change in how the elasticity is
estimated (session 33: a model + machine fit instead of per-model medians) therefore needs this field re-made, not a
28-minute refit. The config is the model's resolved_config.json beside it (its timeline_dirs, join_exams,
idle_busy_max, records), so the fit's own training data is read (fit_corpus_timeline.training_data); machine folders
added since are read too.
Writes the model in place (temp file, then rename) and logs the old and new values.
"""
import json
from pathlib import Path

from hase.inference import machine_calibration as mc
from hase.inference import timeline_model as tm
from hase.inference.fit_corpus_timeline import (clean_calibration_ref, load_split, training_archs, training_data,
                                                with_copy_reference)
from hase.utils.config import base_parser, from_args
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger

DEFAULTS = {"timeline_model": "inference/results/nvidia-h200/corpus/timeline_model.json"}


def main() -> int:
    p = base_parser("Re-make a corpus timeline model's calibration_ref from its fit config", "inference",
                    "refresh_calibration_ref.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    path = Path(cfg["timeline_model"])
    if not path.exists():
        raise HaseError("no such timeline model", path)
    rc_path = path.parent / "resolved_config.json"
    if not rc_path.exists():
        raise HaseError("no resolved_config.json beside the timeline model (not a fit_corpus_timeline output)", rc_path)
    model = json.loads(path.read_text())
    fit = json.loads(rc_path.read_text()).get("config", {})
    for key in ("timeline_dirs", "algo", "label", "records", "idle_busy_max"):
        if key not in fit:
            raise HaseError(f"resolved config has no '{key}'", rc_path)
    if fit["label"] != "clean":
        raise HaseError(f"label '{fit['label']}': only a clean-label fit has a clean calibration reference", rc_path)
    # the fit's own training data, so the reference is the one the fit would write
    sessions, _, _, _, clean, _ = training_data(fit, training_archs(load_split(), fit.get("join_exams", [])), log)
    old = model.get("calibration_ref") or {}
    new = with_copy_reference(clean_calibration_ref(mc.reference(sessions), clean), fit["timeline_dirs"])
    if not new.get("host_index_us"):
        raise HaseError("no calibrated training session in the fit's timeline_dirs", rc_path)
    for k in ("host_index_us", "sessions", "machines", "elasticity", "elasticity_corr", "elasticity_machines"):
        log.info("%-20s %s -> %s", k, old.get(k), new.get(k))
    model["calibration_ref"] = new
    tm.save(model, path)
    log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    run_main(main)
