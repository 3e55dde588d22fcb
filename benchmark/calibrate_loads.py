"""Load calibration: what each stressor intensity and co-runner knob does to the GPU, measured alone.

  python benchmark/calibrate_loads.py [--device cuda] [--set calibration.stressor_levels=[0,0.5,1]]
      [--set 'calibration.corunners={small_infer: [0.5]}']

For every setting of the `calibration:` section of benchmark/config.yaml: start the load as the
collector does (separate process, cleaned up on exit), wait settle_s, then average the metrics
source (NVML/GPM on CUDA, psutil on CPU) over sample_s with nothing else running. One row per
setting with the DCGM-named means, into benchmark/results/<slug>/load_calibration.csv (written
whole, atomically), plus a Markdown table load_calibration.md: intensity against GPU utilization.
With calibration.probe_ms > 0, each setting also gets the launch-wait probe (benchmark/launch_probe.py):
how long one launch onto an idle stream waits behind the load, which the metrics cannot say.
"""
import csv
import io
import time
from pathlib import Path


from hase.utils.progress import progress  # noqa: E402

from hase.benchmark.collector import DEFAULTS, make_load, parse_loads  # noqa: E402
from hase.benchmark.gpu_metrics import busy_reading, make_source, not_idle, wait_idle  # noqa: E402
from hase.benchmark.launch_probe import make_probe, probe, wait_per_launch_us  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import device_slug, resolve_device  # noqa: E402

CSV_NAME, MD_NAME = "load_calibration.csv", "load_calibration.md"
# columns of the Markdown table (the CSV has every field)
MD_FIELDS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
             "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_SM_CLOCK",
             "DCGM_FI_DEV_POWER_USAGE", "CPU_UTIL_PCT", "LOAD_AVG_1M", "PROBE_WAIT_US_PER_LAUNCH")
PROBE_FIELDS = ["PROBE_RUN_US_MEAN", "PROBE_RUN_US_MEDIAN", "PROBE_RUN_US_P90", "PROBE_N", "PROBE_WAIT_US_PER_LAUNCH"]


def calibration_loads(ccfg: dict, base_cfg: dict) -> list:
    """Collector-style load entries for every stressor mode x level and co-runner x knob."""
    entries = [{"kind": "stressor", "mode": m, "level": x} for m in ccfg["stressor_modes"] for x in ccfg["stressor_levels"]
               if not (x == 0 and m != ccfg["stressor_modes"][0])]  # one idle row is enough
    if not isinstance(ccfg["corunners"], dict):
        raise HaseError("calibration.corunners must be a mapping name -> [knobs]")
    for name, knobs in ccfg["corunners"].items():
        for k in (knobs if isinstance(knobs, list) else [knobs]):
            entries.append({"kind": "corunner", "name": name, "knob": k})
    return parse_loads({**base_cfg, "loads": entries})


def to_csv(rows: list, cols: list) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def to_markdown(rows: list, fields: list, meta: str) -> str:
    shown = [f for f in MD_FIELDS if f in fields]
    head = "| load | setting | " + " | ".join(f.replace("DCGM_FI_", "") for f in shown) + " |"
    lines = [f"# Load calibration ({meta})", "", "Each load alone, metrics averaged over the window.", "",
             head, "|" + "---|" * (len(shown) + 2)]
    for r in rows:
        vals = " | ".join(f"{r[f]:.3g}" if isinstance(r.get(f), float) else str(r.get(f, "")) for f in shown)
        lines.append(f"| {r['load']} | {r['level']:g} | {vals} |")
    return "\n".join(lines) + "\n"


def add_probe_waits(rows: list) -> None:
    """Wait per launch onto an idle stream of every row, against the first idle row's probe."""
    idle = next((r for r in rows if r["level"] == 0), None)
    if idle is None:
        raise HaseError("the launch probe needs an idle setting (stressor level 0) as its reference")
    for r in rows:
        r["PROBE_WAIT_US_PER_LAUNCH"] = wait_per_launch_us(r["PROBE_RUN_US_MEAN"], idle["PROBE_RUN_US_MEAN"])


def sample_window(source, cfg: dict, ld: dict) -> tuple:
    """(t0, t1, metrics) over calibration.sample_s. The idle row (level 0) is the probe's idle reference: its
    busy field must be <= idle_busy_max over the window, else the window is taken again after an idle one, for
    at most idle_wait_s; then HaseError naming the field, its value and the threshold."""
    busy_max, wait_s = float(cfg["idle_busy_max"]), float(cfg["idle_wait_s"])
    deadline = time.monotonic() + wait_s
    while True:
        t0 = time.time()
        time.sleep(float(cfg["calibration"]["sample_s"]))
        t1 = time.time()
        window = source.window(t0, t1)
        field, value, frac = busy_reading(window)
        if ld["level"] > 0 or frac is None or frac <= busy_max or busy_max >= 1:
            return t0, t1, window
        if time.monotonic() >= deadline:
            raise HaseError("not idle for the idle row (the probe's idle reference): " + not_idle(
                field, value, busy_max, "idle_busy_max", f"over {cfg['calibration']['sample_s']:g} s")
                + f" after {wait_s:g} s of waiting; stop the neighbour, or raise idle_busy_max")
        wait_idle(source, busy_max, float(cfg["idle_window_s"]), max(deadline - time.monotonic(), 0.0),
                  "idle_busy_max", "idle row (the probe's idle reference)")


def main() -> int:
    p = base_parser("Calibrate loads: stressor intensity / co-runner knob -> GPU metrics", "benchmark")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    ccfg = cfg["calibration"]
    if float(ccfg["sample_s"]) <= 0:
        raise HaseError("calibration.sample_s must be > 0")
    log = get_logger("benchmark", args.log_level)
    loads = calibration_loads(ccfg, cfg)
    device = resolve_device(cfg["device"], cfg["device_id"])
    source = make_source(cfg["metrics"], device, cfg["device_id"])
    source.check()
    out_dir = paths.bench_results_dir() / (cfg["out"] or device_slug(device, cfg["device_id"]))
    rows = []
    probe_run = make_probe(device, cfg["device_id"]) if float(ccfg["probe_ms"]) > 0 else None
    source.start()
    try:
        for ld in progress(loads, desc="calibrate", unit="load"):
            with make_load(ld, device, cfg) as load:
                time.sleep(cfg["settle_s"])
                t0, t1, window = sample_window(source, cfg, ld)
                if ld["level"] > 0 and not load.alive():
                    raise HaseError(f"load {ld['name']} at {ld['level']:g} died during calibration")
                rows.append({"load": ld["name"], "level": ld["level"], **window,
                             "start_ts": f"{t0:.3f}", "end_ts": f"{t1:.3f}"})
                if probe_run is not None:  # after the metric window, so the probe is not in it
                    rows[-1].update(probe(probe_run, float(ccfg["probe_ms"])))
            log.info("%s @ %g: %s", ld["name"], ld["level"],
                     ", ".join(f"{k.replace('DCGM_FI_', '')}={rows[-1][k]:.3g}" for k in MD_FIELDS if k in rows[-1]))
    finally:
        source.stop()
    if probe_run is not None:
        add_probe_waits(rows)
    cols = ["load", "level", *source.fields, *(PROBE_FIELDS if probe_run is not None else []), "start_ts", "end_ts"]
    paths.atomic_write_text(out_dir / CSV_NAME, to_csv(rows, cols))
    meta = f"{device_slug(device, cfg['device_id'])}, settle {cfg['settle_s']} s, window {ccfg['sample_s']} s, " \
           f"{time.strftime('%Y-%m-%d')}"
    paths.atomic_write_text(out_dir / MD_NAME, to_markdown(rows, [c for c in cols if c in MD_FIELDS], meta))
    save_resolved(cfg, out_dir, name="load_calibration_config.json")
    log.info("wrote %s and %s", out_dir / CSV_NAME, out_dir / MD_NAME)
    return 0


if __name__ == "__main__":
    run_main(main)
