"""Issue 23 item 5, a compare report: CPU timelines carried between CPUs by calibration alone, one source or several.

  python inference/compare_cpu_sources.py [--set out=DIR]

Reads the cases.csv of inference/judge_cpu_transfer.py judgements (one per source CPU -> target CPU, the same models
on both sides, each prediction scaled by the target's calibration) and writes, per target CPU:
  single   each source's calibrated prediction against the target's median over sessions
  pair     the geometric mean of the other CPUs' calibrated predictions (leave one CPU out: the target's own
           sessions are in neither source), what a predictor built on the other CPUs would say
Nothing is fitted here. Writes OUT/summary.json and prints the table.
"""
import json
from pathlib import Path

import numpy as np

from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.metrics import accuracy
from hase.utils.tables import read_csv_checked

DEFAULTS = {"judgements": {}, "out": ""}   # inference/cpu_sources.yaml: "source->target": judgement folder


def main() -> int:
    p = base_parser("CPU timelines between CPUs: one source CPU or the geometric mean of several", "inference",
                    "cpu_sources.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS, required=("out",))
    log = get_logger("inference", args.log_level)
    cases = {}
    for pair, folder in cfg["judgements"].items():
        if "->" not in pair:
            raise HaseError(f"config judgements: key '{pair}' is not 'source->target'")
        c = read_csv_checked(paths.csv_or_gz(Path(folder) / "cases.csv"), ("model", "measured_ms", "calibrated_ms"),
                             "judgement", f"config judgements.{pair}: ")
        cases[tuple(pair.split("->"))] = c.set_index("model")
    out = {"single": {}, "pair": {}}
    for (s, t), c in cases.items():
        out["single"][f"{s}->{t}"] = accuracy(c["calibrated_ms"], c["measured_ms"])
    for t in sorted({t for _, t in cases}):
        srcs = sorted(s for s, tt in cases if tt == t)
        if len(srcs) < 2:
            continue
        idx = sorted(set.intersection(*(set(cases[(x, t)].index) for x in srcs)))
        geo = np.exp(np.mean([np.log(cases[(x, t)].loc[idx, "calibrated_ms"].to_numpy()) for x in srcs], axis=0))
        meas = cases[(srcs[0], t)].loc[idx, "measured_ms"].to_numpy()
        out["pair"][f"{'+'.join(srcs)}->{t}"] = dict(accuracy(geo, meas),
                                                     mean_of_single_mape_pct=float(np.mean(
                                                         [out["single"][f"{x}->{t}"]["mape_pct"] for x in srcs])))
    for kind, rows in out.items():
        for k, v in rows.items():
            log.info("%-6s %-32s MAPE %5.1f%%  within ±10%% %5.1f%%  median %+5.1f%%  (n %d)", kind, k, v["mape_pct"],
                     v["within_10pct"], v["median_signed_pct"], v["n"])
    o = Path(cfg["out"])
    o.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(o / "summary.json", json.dumps(out, indent=1))
    save_resolved(cfg, o)
    log.info("wrote %s", o / "summary.json")
    return 0


if __name__ == "__main__":
    run_main(main)
