"""Phase 4 tool: whole-model latency labels from a process that never profiles (what a user's process sees).

  python benchmark/clean_labels.py --device cuda --set 'models=[a.onnx, b.onnx]' --set sessions=3 --set out=F.csv

benchmark/trace_run.py times plain session.run in the process that just profiled the session with CUPTI
(torch.profiler). Kineto leaves CUPTI attached after a profile (its callbacks then cost every CUDA call), and
trace_run's plain timing came out 1.27-1.71x slower at batch 1 than the same models in fresh processes that import
onnxruntime only (benchmark/results/nvidia-h200/harness/README.md). This tool is that fresh process: it must never
import torch. For each model, `sessions` fresh InferenceSessions with ORT's defaults (`order`: rounds, session 0 of
every model, then session 1, ...: measure_order says why): warm-up, then
the median of plain session.run (numpy in/out: `e2e`) over `budget_ms`, and this process's host calibration (the
launch chains) before each session. trace_run calls it in a child process before its own sessions
(`clean_labels: true`), so every corpus session gets `e2e_clean_median_ms` beside the old label.

Writes one CSV row per (model, session): model, session, e2e_clean_median_ms (and _mean_ms), e2e_clean_p10_ms, e2e_clean_p90_ms,
e2e_clean_n, clean_calib_host_index_us, clean_pid, on CUDA the GPU's SM clock, power, power limit, temperature and
clock-event reasons read right after the timed loop (clean_sm_clock_mhz, ..., gpu_metrics.GpuState), where the
host was (clean_cpu_before/after: the CPU the thread ran on; clean_steal_pct: the hypervisor's steal over the loop;
clean_loadavg_1m), and (CUDA,
copy_budget_ms > 0) the copy rate session.run
reaches in this process just before (clean_run_{h2d,d2h}_{1,16}MiB_gbps, host_calibration.Calibrator.run_copies).
Off by default: with it on (machines y and j, exam v11) the labels ran 5-60% slower than on earlier machines and
slower than the same machine's CUPTI-traced process; the copy rate is read in a process of its own instead
(benchmark/host_calibration.py run_copy_budget_ms, run_gpu_corpus.sh). Kept only for the A/B that finds out why
(gpu_jobs.yaml copy_probe_ab). Resumable: rows already in `out` are kept and skipped.
"""
import csv
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hase.benchmark.ort_kernel_runner import make_runner, time_loop
from hase.utils import paths
from hase.utils.config import base_parser, from_args
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.onnx_io import dummy_feed
from hase.utils.ort_session import make_session, resolve_device

DEFAULTS = {"device": "auto", "device_id": 0, "models": [], "sessions": 3, "warmup": 20, "budget_ms": 300.0,
            "min_loops": 20, "max_loops": 5000, "cudnn_conv_algo_search": "EXHAUSTIVE", "threads": 0, "seed": 0,
            "calib_budget_ms": 8.0, "copy_budget_ms": 0.0, "profiled_runs": 0, "model_list": "", "settle_max_s": 60.0, "out": "",
            "idle_busy_max": 0.1, "idle_window_s": 0.5, "idle_wait_s": 60.0, "idle_check_s": 60.0,  # as trace_run's
            "order": "rounds",
            # extra CUDA EP options beside the algorithm search, as trace_run's (e.g. {cudnn_conv1d_pad_to_nc1d: 1}:
            # benchmark/run_gpu_corpus_nc1d.sh); labels taken with options go to a folder of their own
            "cuda_options": {}}
FIELDS = ["model", "session", "e2e_clean_median_ms", "e2e_clean_p10_ms", "e2e_clean_p90_ms", "e2e_clean_n",
          "clean_calib_host_index_us", "clean_pid", "clean_ort_node_sum_us", "clean_ort_execute_us",
          "clean_profiled_wall_us", "clean_bg_busy_field", "clean_bg_busy_value", "clean_bg_busy_frac",
          "clean_run_h2d_1MiB_gbps", "clean_run_h2d_16MiB_gbps", "clean_run_d2h_1MiB_gbps", "clean_run_d2h_16MiB_gbps",
          # the runs' mean: next to a part-time neighbour the runs are bimodal and the median keeps the un-hit mode
          # (H100 machine m, session 24: clean median 0.77x the traced median next to small_infer)
          "e2e_clean_mean_ms",
          # the GPU right after the timed loop (gpu_metrics.GpuState): a slow machine's clock or power/thermal event
          "clean_sm_clock_mhz", "clean_power_w", "clean_power_limit_w", "clean_temp_c", "clean_clock_events",
          # what may flip host speed in episodes (machine ag, exam v21: the probe read 7-8 or 10-16 us per node in
          # runs of 1-22 models within one process): the CPU the thread ran on before and after the timed loop, the
          # hypervisor's steal over it (a VM's neighbour on the physical host), the 1-minute load
          "clean_cpu_before", "clean_cpu_after", "clean_steal_pct", "clean_loadavg_1m"]


def done_rows(path: Path) -> set:
    if not path.exists():
        return set()
    with open(path, newline="") as f:
        return {(r["model"], r["session"]) for r in csv.DictReader(f)}


def profiled(sess, run, cfg: dict, prof: str) -> dict:
    """trace_run's ORT-profiled runs without CUPTI (same order: warm-up with ORT's profiler on, the profiled
    runs, then plain timing): the node dispatch sums a process that never loads CUPTI reads."""
    from hase.debug.ort_profiler_kernel_sum import load_profile_events, parse_profile
    wall = []
    for _ in range(int(cfg["profiled_runs"])):
        t = time.perf_counter()
        run()
        wall.append((time.perf_counter() - t) * 1e6)
    path = Path(sess.end_profiling())
    runs = parse_profile(load_profile_events(path), skip_runs=1 + int(cfg["warmup"]))
    shutil.rmtree(prof, ignore_errors=True)
    for _ in range(3):  # as trace_run: a few runs after the profiler stops
        run()
    per_node = {}  # as trace_run's ort_node_sum_us: the sum over nodes of each node's median over the runs
    for r in runs:
        for n in r["nodes"]:
            per_node.setdefault(n["name"], []).append(n["end_us"] - n["start_us"])
    return {"clean_ort_node_sum_us": f"{sum(statistics.median(v) for v in per_node.values()):.6g}",
            "clean_ort_execute_us": f"{statistics.median(r['execute_us'] for r in runs):.6g}",
            "clean_profiled_wall_us": f"{statistics.median(wall):.6g}"}


def run_copies(cal, cfg: dict, log) -> dict:
    """This process's session.run copy rates (clean_run_*_gbps); a probe that fails (it has not run on a GPU yet when
    written) is logged once and switched off: it must never cost the labels."""
    if cfg["copy_budget_ms"] <= 0:
        return {}
    try:
        return {f"clean_{k}": f"{v:.4g}" for k, v in cal.run_copies(cfg["copy_budget_ms"]).items()}
    except Exception as ex:  # noqa: BLE001  (ORT raises several types; any of them means "no copy reading")
        log.warning("copy probe failed, left out of the labels from here on: %s", str(ex).splitlines()[0][:200])
        cfg["copy_budget_ms"] = 0
        return {}


def settle(cal, cfg: dict, log) -> list:
    """Wait until the host is steady before the first label: on machine j the clean process that started right
    after the export and records stages read 13-16 us per node for its first minute, then 7.1-7.6. Repeats the host
    calibration until 3 readings in a row are within 10% of each other, at most `settle_max_s`. Returns the readings."""
    from hase.benchmark.host_calibration import host_index
    t0, got = time.perf_counter(), []
    while time.perf_counter() - t0 < float(cfg["settle_max_s"]):
        got.append(host_index(cal.host(cfg["calib_budget_ms"])))
        last = got[-3:]
        if len(last) == 3 and max(last) <= 1.1 * min(last):
            break
        time.sleep(1.0)
    if got:
        log.info("host settled after %.0f s: %s us per node", time.perf_counter() - t0,
                 " ".join(f"{x:.1f}" for x in got))
    return got


def measure(models: list, cfg: dict, log) -> int:
    """Time every (model, session) not yet in cfg['out']; append each row as it is measured. Returns rows added."""
    out = Path(cfg["out"])
    device = resolve_device(cfg["device"], cfg["device_id"])
    done = done_rows(out)
    cuda_opts = dict({str(k): str(v) for k, v in (cfg["cuda_options"] or {}).items()},
                     cudnn_conv_algo_search=cfg["cudnn_conv_algo_search"]) if device == "cuda" else None
    from hase.benchmark.host_calibration import Calibrator, cpu_times, current_cpu, host_index, steal_pct
    cal = Calibrator(device, cfg["device_id"], cfg["threads"])
    settle(cal, cfg, log)
    from hase.benchmark.gpu_metrics import GpuState, IdleGuard
    gpu = GpuState(cfg["device_id"]) if device == "cuda" else None
    guard = IdleGuard(device, cfg["device_id"], cfg["idle_busy_max"], cfg["idle_window_s"], cfg["idle_wait_s"],
                      cfg["idle_check_s"], "clean_labels")
    new = not out.exists()
    header = FIELDS
    if not new:  # a file begun before a column was added keeps its header (the new columns are left out)
        with open(out, newline="") as f:
            header = next(csv.reader(f), None) or FIELDS
    added, t0 = 0, time.perf_counter()
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, header, extrasaction="ignore")
        if new:
            w.writeheader()
        for mi, mp, i in measure_order(models, int(cfg["sessions"]), cfg["order"]):
            mp = Path(mp)
            if (mp.stem, str(i)) in done:
                continue
            idle = {f"clean_{k}": v for k, v in guard.check().items()}   # read at most every idle_check_s
            host = host_index(cal.host(cfg["calib_budget_ms"]))
            copies = run_copies(cal, cfg, log)   # off by default: it slowed the labels (docstring)
            prof = tempfile.mkdtemp(prefix="hase_clean_") if cfg["profiled_runs"] else None
            sess = make_session(mp, device, device_id=cfg["device_id"], cuda_options=cuda_opts,
                                threads=cfg["threads"], profile_prefix=Path(prof, "ort") if prof else None)
            run = make_runner(sess, dummy_feed(sess, seed=cfg["seed"]), "e2e", cfg["device_id"])
            for _ in range(int(cfg["warmup"]) + 1):
                run()
            ort = profiled(sess, run, cfg, prof) if prof else {}
            cpu0, st0 = current_cpu(), cpu_times()
            r = time_loop(run, None, cfg["budget_ms"], cfg["min_loops"], cfg["max_loops"])
            where = {"clean_cpu_before": cpu0, "clean_cpu_after": current_cpu(),
                     "clean_steal_pct": f"{steal_pct(st0, cpu_times()):.3g}", "clean_loadavg_1m": f"{os.getloadavg()[0]:.3g}"}
            state = {f"clean_{k}": (f"{v:.4g}" if isinstance(v, float) else v)
                     for k, v in (gpu.read() if gpu else {}).items()}
            w.writerow({"model": mp.stem, "session": i, "e2e_clean_median_ms": f"{r['median_ms']:.6g}",
                        "e2e_clean_p10_ms": f"{r['p10_ms']:.6g}", "e2e_clean_p90_ms": f"{r['p90_ms']:.6g}",
                        "e2e_clean_mean_ms": f"{r['mean_ms']:.6g}",
                        "e2e_clean_n": len(r["samples_ms"]), "clean_calib_host_index_us": f"{host:.4g}",
                        "clean_pid": os.getpid(), **ort, **idle, **copies, **state, **where})
            f.flush()
            added += 1
            del run, sess
            log.info("[%d/%d, session %d, %.0fs] clean labels: %s", mi + 1, len(models), i,
                     time.perf_counter() - t0, mp.stem)
    return added


def measure_order(models: list, sessions: int, order: str) -> list:
    """(index, model, session) in measuring order. rounds: session 0 of every model, then session 1 of every model,
    ...; models: a model's sessions back to back (the order before session 23). Host speed comes in episodes of
    seconds that span several consecutive models (exam v11, H100 machines k and l: the residual against the other
    machine is correlated over 3 consecutive models, 0.18-0.19, and a model's two back-to-back sessions agree 0.118
    in log sd where the machines differ 0.233), so back-to-back sessions share one episode and their median is one
    sample; rounds put a model's sessions minutes apart, at the same device time."""
    if order not in ("rounds", "models"):
        raise HaseError(f"config order must be rounds or models, not '{order}'")
    if order == "models":
        return [(mi, m, i) for mi, m in enumerate(models) for i in range(sessions)]
    return [(mi, m, i) for i in range(sessions) for mi, m in enumerate(models)]


def main() -> int:
    p = base_parser("Phase 4: latency labels from a process that never profiles", "benchmark", "clean_labels.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("benchmark", args.log_level)
    if not cfg["out"]:
        raise HaseError("config out: the CSV to write is required")
    cfg["models"] = paths.config_models(cfg)
    n = measure(cfg["models"], cfg, log)
    if "torch" in sys.modules:   # the point of this process: CUPTI never loaded
        raise HaseError("torch was imported in the clean-label process: its labels are not clean")
    log.info("wrote %d rows to %s", n, cfg["out"])
    return 0


if __name__ == "__main__":
    run_main(main)
