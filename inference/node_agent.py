"""Node agent: the DCGM-named fields of inference/dcgm_exporter.py plus the launch-wait probe
(benchmark/launch_probe.py), run periodically at a bounded cost, as Prometheus gauges.

  python inference/node_agent.py [--device cuda|cpu|auto] [--port 9400] [--set period_s=5]
         [--fixed values.json] [--duration-s S] [--parent-pid PID]

Without MPS a kernel launched onto an idle stream waits for the neighbour's running work, and no
DCGM field shows that wait. Every period_s the agent runs the probe chain (16 one-element Relu
kernels through IOBinding) for at most probe_budget_ms and exports, with dcgm-exporter's labels:

  hase_launch_wait_us                 wait per launch onto an idle stream (us, >= 0):
                                      (mean probe run - idle reference) / 16
  hase_launch_wait_p10_us, _p90_us    spread of the per-run waits of the same tick (us)
  hase_launch_probe_run_us            raw mean probe run time of the tick (us)
  hase_launch_probe_idle_run_us       the idle reference in use (us)
  hase_launch_probe_runs              probe runs in the tick
  hase_launch_wait_timestamp_seconds  unix time of the tick: consumers compute the value's age
  hase_launch_probe_ticks_total, hase_launch_probe_busy_seconds_total   counters;
      rate(busy_seconds_total) is the measured duty cycle

Cost: a tick stops before a run that, as long as its last one, would pass probe_budget_ms, and
the next tick starts max(period_s, tick busy / 0.001) later, so probe busy time / elapsed time
<= 0.1% even when one run overshoots; probe_budget_ms / (1000 * period_s) > 0.001 is rejected at
start. Busy time is the wall time of the probe runs, an upper bound on the GPU time they hold.
One-time start cost: `warmup` runs and, without idle_probe_us, idle_budget_ms of idle reference.

Idle reference (the probe's mean run time with no neighbour): idle_probe_us from the config when
> 0 (measured on this node type and software, e.g. calibrate_loads.py's idle PROBE_RUN_US_MEAN);
else measured at start, only once a window of idle_check_s shows the busy field <= idle_busy_max: the
agent waits up to idle_wait_s for one, then refuses to start with one line naming the field, its value
and the threshold (a reference taken under load makes every exported wait read low); then refreshed
as the median of the means of recent ticks whose preceding metrics window was idle.

Host calibration (issue 23; benchmark/host_calibration.py): at start, and again every calib_period_s when the
metrics window is idle, the agent measures this node's host dispatch per node (five 16-node chains,
calib_budget_ms each) and exports it, with the machine profile JSON at calib_profile when set:

  hase_calib_host_index_us            the host speed predictions scale host dispatch by (inference/machine_calibration.py):
                                      the median of the last calib_window readings, calib_period_s apart (the host
                                      runs in episodes of seconds; one reading older than ~5 s predicts worse than
                                      none: inference/results/nvidia-h200/calibration_age/)
  hase_calib_host_index_last_us       the last reading alone; hase_calib_host_readings: how many the median holds
  hase_calib_<chain>_us               per-node host time of each chain (relu, add, matmul, conv, reshape)
  hase_calib_<copy|compute>           at start: pageable copy GB/s (CUDA), conv/matmul GFLOP/s and add GB/s (CPU EP)
  hase_calib_run_fixed_us             at start: session.run of a one-node model, numpy in and out (the fixed cost)
  hase_calib_timestamp_seconds        unix time of the last calibration: consumers check its age

--device cpu runs the same chain on the CPU EP (one thread): the wait is then CPU scheduling
behind CPU neighbours, and the busy field is CPU_UTIL_PCT / 100.
With --parent-pid PID the agent dies with that process (benchmark/stressor.py's guard_child).
"""
import argparse
import collections
import dataclasses
import json
import time
from pathlib import Path


import numpy as np  # noqa: E402
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server  # noqa: E402

from hase.benchmark.host_calibration import Calibrator, host_index  # noqa: E402
from hase.benchmark.launch_probe import N_LAUNCHES, make_probe, probe, wait_per_launch_us  # noqa: E402
from hase.benchmark.stressor import LoadProcess, guard_child, signal_ready  # noqa: E402
from hase.inference.dcgm_exporter import LABELS, gpu_labels, make_gauges, read_fixed  # noqa: E402
from hase.inference.machine_calibration import HostReadings  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import resolve_device  # noqa: E402

CONFIG = Path(__file__).resolve().parent / "node_agent.yaml"
MAX_DUTY = 0.001  # probe busy time / elapsed time: at most 0.1% of the GPU
DEFAULTS = {"device": "auto", "device_id": 0, "interval_s": 1.0, "period_s": 5.0, "probe_budget_ms": 4.0,
            "probe_max_runs": 200, "warmup": 50, "idle_probe_us": 0.0, "idle_budget_ms": 200.0,
            "idle_check_s": 1.0, "idle_busy_max": 0.05, "idle_wait_s": 30.0, "idle_window": 12,
            "calibrate": True, "calib_budget_ms": 20.0, "calib_period_s": 120.0, "calib_window": 8, "calib_profile": ""}
POSITIVE = ("interval_s", "period_s", "probe_budget_ms", "probe_max_runs", "idle_budget_ms", "idle_window",
            "calib_budget_ms", "calib_period_s", "calib_window")
NON_NEGATIVE = ("idle_probe_us", "idle_check_s", "idle_busy_max", "idle_wait_s", "warmup")
PROBE_GAUGES = {
    "hase_launch_wait_us": "wait per launch onto an idle stream behind the neighbours (us)",
    "hase_launch_wait_p10_us": "10th percentile of the per-run wait per launch in the last tick (us)",
    "hase_launch_wait_p90_us": "90th percentile of the per-run wait per launch in the last tick (us)",
    "hase_launch_probe_run_us": "mean run time of the launch probe chain in the last tick (us)",
    "hase_launch_probe_idle_run_us": "idle reference: the probe's mean run time with no neighbour (us)",
    "hase_launch_probe_runs": "probe runs in the last tick",
    "hase_launch_wait_timestamp_seconds": "unix time of the last probe tick",
}


# ---- cost: pure ---------------------------------------------------------------------------------
def check_config(cfg: dict, source) -> float:
    """The configured duty cycle (probe budget / period); HaseError naming the key when it is bad."""
    for key in POSITIVE + NON_NEGATIVE:
        try:
            v = float(cfg[key])
        except (TypeError, ValueError):
            raise HaseError(f"{key} must be a number, got {cfg[key]!r}", source)
        if key in POSITIVE and not v > 0:
            raise HaseError(f"{key} must be > 0, got {cfg[key]!r}", source)
        if key in NON_NEGATIVE and not v >= 0:
            raise HaseError(f"{key} must be >= 0, got {cfg[key]!r}", source)
    duty = float(cfg["probe_budget_ms"]) / (1e3 * float(cfg["period_s"]))
    if duty > MAX_DUTY:
        raise HaseError(f"probe_budget_ms {cfg['probe_budget_ms']:g} / period_s {cfg['period_s']:g} is a duty cycle "
                        f"of {duty:.3%} > {MAX_DUTY:.1%}: lower probe_budget_ms or raise period_s", source)
    return duty


def probe_tick(run, budget_us: float, max_runs: int, clock=time.perf_counter) -> list:
    """Run times (us) of one tick: at least one run, then stop before a run that, as long as the
    last one, would pass budget_us, or at max_runs."""
    runs_us, busy_us = [], 0.0
    while len(runs_us) < max_runs:
        t0 = clock()
        run()
        dt = (clock() - t0) * 1e6
        runs_us.append(dt)
        busy_us += dt
        if busy_us + dt > budget_us:
            break
    return runs_us


def next_tick_s(t_tick: float, busy_s: float, period_s: float) -> float:
    """Start of the next tick: a period later, or later still when this tick overshot, so that
    busy time stays <= MAX_DUTY of elapsed time."""
    return t_tick + max(period_s, busy_s / MAX_DUTY)


# ---- measurements: pure -------------------------------------------------------------------------
def busy_fraction(window: dict):
    """Neighbour busy 0-1 from one metrics window (GR engine, else GPU util, else CPU util); None if unknown."""
    for field, scale in (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0), ("DCGM_FI_DEV_GPU_UTIL", 0.01),
                         ("CPU_UTIL_PCT", 0.01)):
        v = window.get(field)
        if v is not None and v == v:
            return float(v) * scale
    return None


def idle_reference(config_us: float, start_us, start_idle: bool, idle_ticks) -> tuple:
    """(idle probe run time us, where it came from): config > recent idle ticks (+ an idle start) > start."""
    if config_us > 0:
        return float(config_us), "config idle_probe_us"
    if idle_ticks:
        vals = list(idle_ticks) + ([start_us] if start_idle else [])
        return float(np.median(vals)), f"median of {len(vals)} idle measurements"
    return float(start_us), "measured at start" + ("" if start_idle else " (not idle)")


def wait_stats(runs_us: list, idle_us: float, n: int = N_LAUNCHES) -> dict:
    """Gauge values of one tick: mean wait per launch, spread of the per-run waits, raw run time."""
    a = np.asarray(runs_us, dtype=float)
    per_run = np.maximum(a - idle_us, 0.0) / n
    return {"hase_launch_wait_us": wait_per_launch_us(float(a.mean()), idle_us, n),
            "hase_launch_wait_p10_us": float(np.percentile(per_run, 10)),
            "hase_launch_wait_p90_us": float(np.percentile(per_run, 90)),
            "hase_launch_probe_run_us": float(a.mean()), "hase_launch_probe_idle_run_us": float(idle_us),
            "hase_launch_probe_runs": float(a.size)}


def start_window(cfg: dict, source, fixed) -> dict:
    """The metrics window before the idle reference is measured at start: its busy field must be <= idle_busy_max
    (waiting up to idle_wait_s for such a window of idle_check_s); else HaseError naming the field, its value and
    the threshold (a reference under load made every exported wait read low). --fixed values are read as they are."""
    from hase.benchmark.gpu_metrics import busy_reading, not_idle, wait_idle
    busy_max = float(cfg["idle_busy_max"])
    if fixed is None:
        return wait_idle(source, busy_max, float(cfg["idle_check_s"]), float(cfg["idle_wait_s"]), "idle_busy_max",
                         "node agent's idle reference (or set idle_probe_us)")
    field, value, frac = busy_reading(fixed)
    if frac is not None and frac > busy_max and busy_max < 1:
        raise HaseError("not idle for the node agent's idle reference: " + not_idle(
            field, value, busy_max, "idle_busy_max", "in the --fixed values") + "; set idle_probe_us")
    return fixed


# ---- parent side ----------------------------------------------------------------------------------
class NodeAgent(LoadProcess):
    """`with NodeAgent("cpu", port): ...`: the agent as a child that dies with this process."""

    def __init__(self, device: str = "auto", port: int = 9400, sets=(), fixed=None, ready_timeout_s: float = 120.0):
        args = ["--device", device, "--port", port, *[x for s in sets for x in ("--set", s)]]
        if fixed:
            args += ["--fixed", fixed]
        super().__init__("node_agent", Path(__file__), args, ready_timeout_s)


# ---- the agent ------------------------------------------------------------------------------------
def open_metrics(fixed, device: str, device_id: int, keep_s: float = 60.0) -> tuple:
    """(fields, sampler or None, fixed values or None): NVML on cuda, psutil on cpu, or --fixed. The sampler keeps
    keep_s of samples (the agent reads windows of seconds; the default 600 s grew its RSS for 10 minutes)."""
    if fixed:
        values = read_fixed(fixed)
        return list(values), None, values
    from hase.benchmark.gpu_metrics import DCGM_FIELDS, PSUTIL_FIELDS, make_source
    fields = list(DCGM_FIELDS if device == "cuda" else PSUTIL_FIELDS)
    source = make_source({"source": "auto", "fields": fields, "keep_s": keep_s}, device, device_id)
    source.start()
    return fields, source, None


def main() -> int:
    p = base_parser(__doc__, "inference", CONFIG.name)
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # the doc's gauge table and cost, as written
    p.add_argument("--port", type=int, default=9400)
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--fixed", type=Path, help="serve these fixed DCGM/CPU values (JSON) instead of sampling; "
                                              "the probe still runs")
    p.add_argument("--duration-s", type=float, default=0.0, help="stop after this long (0 = forever)")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process dies")
    args = p.parse_args()
    if args.parent_pid is not None:
        guard_child(args.parent_pid)
    cfg = from_args(args, DEFAULTS)
    duty = check_config(cfg, args.config)
    log = get_logger("node_agent", args.log_level)
    device = resolve_device(cfg["device"], cfg["device_id"])
    registry = CollectorRegistry()
    labels = gpu_labels(cfg["device_id"])
    keep_s = max(60.0, 4 * max(float(cfg["interval_s"]), float(cfg["idle_check_s"])))
    fields, source, fixed = open_metrics(args.fixed, device, cfg["device_id"], keep_s)
    try:
        return serve(cfg, args, device, registry, labels, fields, source, fixed, duty, log)
    finally:
        if source is not None:
            source.stop()


def calibration_gauges(cal, registry, labels, gauges: dict, readings=None) -> None:
    """Set (creating on first use) the hase_calib_* gauges from a Calibration (its host_index_us: the rolling median
    of `readings`, a machine_calibration.HostReadings, beside the last reading and their count)."""
    vals = {**cal.columns("hase_calib_"), "hase_calib_timestamp_seconds": cal.time_unix}
    if readings is not None:
        vals.update(hase_calib_host_index_last_us=readings.last, hase_calib_host_readings=len(readings.values))
    for name, v in vals.items():
        if name not in gauges:
            gauges[name] = Gauge(name, "host calibration of this node (benchmark/host_calibration.py)", LABELS,
                                 registry=registry).labels(**labels)
        gauges[name].set(v)


def serve(cfg, args, device, registry, labels, fields, source, fixed, duty, log) -> int:
    from hase.benchmark.gpu_metrics import snapshot
    dcgm = make_gauges(fields, registry)
    gauges = {name: Gauge(name, doc, LABELS, registry=registry).labels(**labels) for name, doc in PROBE_GAUGES.items()}
    ticks = Counter("hase_launch_probe_ticks", "probe ticks run", LABELS, registry=registry).labels(**labels)
    busy_total = Counter("hase_launch_probe_busy_seconds", "probe busy time (wall time of its runs)", LABELS,
                         registry=registry).labels(**labels)
    # one thread on CPU: a launch then is one dispatch, and ORT's spinning pool adds no load of its own
    run = make_probe(device, cfg["device_id"], int(cfg["warmup"]), threads=1 if device == "cpu" else 0)
    start_us, start_idle = None, False
    window = fixed if fixed is not None else {}   # the busy field of the last metrics window (ticks read it)
    if float(cfg["idle_probe_us"]) <= 0:  # the agent measures its own idle reference: only on an idle device
        window = start_window(cfg, source, fixed)
        busy0 = busy_fraction(window)
        start_idle = busy0 is not None and busy0 <= float(cfg["idle_busy_max"])
        start_us = probe(run, float(cfg["idle_budget_ms"]))["PROBE_RUN_US_MEAN"]
        if busy0 is None:
            log.warning("%s: no busy field to check that the device is idle at agent start: the idle reference "
                        "%.1f us may include waits; or set idle_probe_us", device, start_us)
    idle_ticks = collections.deque(maxlen=int(cfg["idle_window"]))
    ref_us, ref_src = idle_reference(float(cfg["idle_probe_us"]), start_us, start_idle, idle_ticks)
    for f, v in (fixed or {}).items():
        dcgm[f].labels(**labels).set(v)
    calibrator, calib_gauges, t_calib = None, {}, float("inf")
    if cfg["calibrate"]:
        calibrator = Calibrator(device, cfg["device_id"], 1 if device == "cpu" else 0, int(cfg["warmup"]))
        # at start only, session.run's own copy rate (predictions scale their copies by it: machine_calibration)
        cal = calibrator.calibrate(float(cfg["calib_budget_ms"]), run_copy_budget_ms=10.0 if device == "cuda" else 0.0)
        readings = HostReadings(int(cfg["calib_window"]))
        readings.add(cal.host_index_us)
        calibration_gauges(cal, registry, labels, calib_gauges, readings)
        if cfg["calib_profile"]:
            paths.atomic_write_text(Path(cfg["calib_profile"]), json.dumps(cal.to_dict(), indent=1))
        log.info("host calibration: %.2f us per node (%s)", cal.host_index_us,
                 " ".join(f"{k} {v:.2f}" for k, v in cal.host_us_per_node.items()))
        t_calib = time.monotonic() + float(cfg["calib_period_s"])
    start_http_server(args.port, addr=args.address, registry=registry)
    log.info("serving %d fields + launch-wait probe on http://%s:%d/metrics; probe every %gs, <= %g ms "
             "(duty cycle %.3f%%); idle reference %.1f us (%s)", len(fields), args.address, args.port,
             cfg["period_s"], cfg["probe_budget_ms"], duty * 100, ref_us, ref_src)
    signal_ready()
    t_end = time.monotonic() + args.duration_s if args.duration_s > 0 else float("inf")
    t_next = time.monotonic()
    while time.monotonic() < t_end:
        if source is not None:  # the probe runs between windows, so the window never sees it
            window = snapshot(source, float(cfg["interval_s"]))
            for f, v in window.items():
                if v == v:  # skip NaN (no GPM on this GPU)
                    dcgm[f].labels(**labels).set(v)
        else:
            time.sleep(max(min(float(cfg["interval_s"]), t_next - time.monotonic(), t_end - time.monotonic()), 0.0))
        if time.monotonic() < t_next:
            continue
        t_tick = time.monotonic()
        runs_us = probe_tick(run, float(cfg["probe_budget_ms"]) * 1e3, int(cfg["probe_max_runs"]))
        busy_s = sum(runs_us) / 1e6
        busy = busy_fraction(window)
        if busy is not None and busy <= float(cfg["idle_busy_max"]):
            idle_ticks.append(float(np.mean(runs_us)))
            if calibrator is not None and time.monotonic() >= t_calib:   # only on an idle device: no neighbour slowed
                host = calibrator.host(float(cfg["calib_budget_ms"]))
                # exported: the median of the last calib_window readings, minutes apart (one reading is true for
                # seconds: inference/results/nvidia-h200/calibration_age/)
                cal = dataclasses.replace(cal, host_us_per_node=host, host_index_us=readings.add(host_index(host)),
                                          time_unix=time.time())
                calibration_gauges(cal, registry, labels, calib_gauges, readings)
                t_calib = time.monotonic() + float(cfg["calib_period_s"])
            new_ref = idle_reference(float(cfg["idle_probe_us"]), start_us, start_idle, idle_ticks)
            if new_ref[1] != ref_src:
                log.info("idle reference now %.1f us (%s)", *new_ref)
            ref_us, ref_src = new_ref
        for name, v in wait_stats(runs_us, ref_us).items():
            gauges[name].set(v)
        gauges["hase_launch_wait_timestamp_seconds"].set(time.time())
        ticks.inc()
        busy_total.inc(busy_s)
        t_next = next_tick_s(t_tick, busy_s, float(cfg["period_s"]))
    return 0


if __name__ == "__main__":
    run_main(main)
