"""Phase 4 tool: slowdowns next to a neighbour, paired with idle runs of the same session within seconds (issue 24).

  python benchmark/paired_labels.py --device cuda --set 'models=[a.onnx, b.onnx]' \
      --set 'loads=[cnn_train:0.3, small_infer:0.5]' --set sessions=3 --set out=paired.csv

Why: benchmark/run_gpu_slices.sh measures each load as a stage of its own, minutes apart, against an idle stage
measured first and again last. Host speed moves in episodes (docs/method.md, issue 23), and on H100 machine r
(session 26) the same models' clean idle label read 0.66-1.20x between the first and the last stage (|log| median
0.11): a slowdown read across stages carries that drift, and at batch 1 it is as large as the interference term.
Here the neighbour runs for the whole load and is paused (SIGSTOP) and resumed (SIGCONT) around blocks of runs of one
InferenceSession: idle and loaded runs alternate within a second, in one process, so what the host does between
stages cancels in their ratio.

For every load: start the neighbour (benchmark/corunners.py, a child process), then for each fresh session of each
model (rounds order, as clean_labels.py): the host calibration, the session made and warmed up with the neighbour
paused (so cuDNN's algorithm search sees the idle GPU), then `rounds` x (pause it, wait
`pause_settle_s` for its queued kernels to drain, time `block_ms` of session.run; resume it, wait `resume_settle_s`,
time `block_ms`). The neighbour's state is read from /proc before every idle block: a neighbour that is not stopped
there is an error, never a silent idle label. One CSV row per (model, load, session): the idle and loaded runs'
mean, median, p10, p90 and counts, slowdown = loaded mean / idle mean (the mean: runs next to a part-time neighbour
are bimodal), the per-round slowdowns, this process's host calibration. Never imports torch (what a user's process
sees; the neighbour is a child). Resumable: rows already in `out` are skipped.
"""
import csv
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from hase.benchmark.ort_kernel_runner import make_runner, stats, time_loop
from hase.utils import paths
from hase.utils.config import base_parser, from_args
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.onnx_io import dummy_feed
from hase.utils.ort_session import make_session, resolve_device

DEFAULTS = {"device": "auto", "device_id": 0, "models": [], "model_list": "", "loads": [], "sessions": 3,
            "warmup": 20, "rounds": 3, "block_ms": 200.0, "min_loops": 5, "max_loops": 5000,
            "pause_settle_s": 0.15, "resume_settle_s": 0.3, "cudnn_conv_algo_search": "EXHAUSTIVE", "threads": 0,
            "seed": 0, "calib_budget_ms": 8.0, "out": ""}
FIELDS = ["model", "load", "session", "slowdown", "round_slowdowns", "idle_mean_ms", "idle_median_ms",
          "idle_p10_ms", "idle_p90_ms", "idle_n", "loaded_mean_ms", "loaded_median_ms", "loaded_p10_ms",
          "loaded_p90_ms", "loaded_n", "host_index_us", "pid", "neighbour_pid"]


def parse_load(spec: str) -> tuple:
    """'name:knob' -> (name, knob); a bad one is a one-line error naming the field."""
    name, sep, knob = str(spec).partition(":")
    try:
        k = float(knob)
    except ValueError:
        k = None
    if not sep or not name or k is None or not 0.0 < k <= 1.0:
        raise HaseError(f"config loads: '{spec}' is not name:knob with a knob in (0, 1]")
    return name, k


def load_tag(name: str, knob: float) -> str:
    """The label run_gpu_slices.sh and fit_interference.py use for a load (cnn_train@0.3)."""
    return f"{name}@{knob:g}"


def process_state(pid: int) -> str:
    """One letter from /proc/PID/stat (R running, S sleeping, T stopped, ...); '' when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2:].split()[0]


class Pausable:
    """SIGSTOP/SIGCONT of a neighbour process, checked: paused() waits until /proc says it is stopped."""

    def __init__(self, pid: int):
        self.pid = pid

    def pause(self, settle_s: float) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 2.0
        while process_state(self.pid) not in ("T", "t"):
            if time.monotonic() > deadline:
                raise HaseError(f"neighbour pid {self.pid} did not stop (state '{process_state(self.pid)}')")
            time.sleep(0.002)
        time.sleep(settle_s)   # its kernels already queued on the GPU drain meanwhile

    def resume(self, settle_s: float) -> None:
        os.kill(self.pid, signal.SIGCONT)
        time.sleep(settle_s)

    def check_paused(self) -> None:
        s = process_state(self.pid)
        if s not in ("T", "t"):
            raise HaseError(f"neighbour pid {self.pid} is not stopped before an idle block (state '{s}')")


def paired_run(run, pause: Pausable, cfg: dict) -> dict:
    """rounds x (idle block, loaded block) of one session's run(); the neighbour is left running."""
    idle, loaded, per_round = [], [], []
    try:
        for _ in range(int(cfg["rounds"])):
            pause.pause(float(cfg["pause_settle_s"]))
            pause.check_paused()
            a = time_loop(run, None, cfg["block_ms"], cfg["min_loops"], cfg["max_loops"])["samples_ms"]
            pause.resume(float(cfg["resume_settle_s"]))
            b = time_loop(run, None, cfg["block_ms"], cfg["min_loops"], cfg["max_loops"])["samples_ms"]
            idle += a
            loaded += b
            per_round.append(statistics.fmean(b) / statistics.fmean(a))
    finally:
        os.kill(pause.pid, signal.SIGCONT)   # never leave the neighbour stopped
    return {"idle": idle, "loaded": loaded, "per_round": per_round}


def row_of(model: str, load: str, session: int, r: dict, host_us: float, neighbour_pid: int) -> dict:
    """One CSV row: each block kind's runs summarised as every timing here is (ort_kernel_runner.stats)."""
    st = {tag: stats(r[tag]) for tag in ("idle", "loaded")}
    out = {"model": model, "load": load, "session": session, "pid": os.getpid(), "neighbour_pid": neighbour_pid,
           "slowdown": f"{st['loaded']['mean_ms'] / st['idle']['mean_ms']:.5g}",
           "round_slowdowns": ";".join(f"{x:.4g}" for x in r["per_round"]), "host_index_us": f"{host_us:.4g}"}
    for tag, v in st.items():
        out.update({f"{tag}_{k}": f"{v[k]:.6g}" for k in ("mean_ms", "median_ms", "p10_ms", "p90_ms")})
        out[f"{tag}_n"] = v["n"]
    return out


def done_rows(path: Path) -> set:
    if not path.exists():
        return set()
    with open(path, newline="") as f:
        return {(r["model"], r["load"], r["session"]) for r in csv.DictReader(f)}


def measure(models: list, loads: list, cfg: dict, log) -> int:
    """Every (load, session, model) not yet in cfg['out'], one row each, appended as measured. Returns rows added."""
    from hase.benchmark.corunners import start_corunner
    from hase.benchmark.host_calibration import Calibrator, host_index
    out = Path(cfg["out"])
    device = resolve_device(cfg["device"], cfg["device_id"])
    cuda_opts = {"cudnn_conv_algo_search": cfg["cudnn_conv_algo_search"]} if device == "cuda" else None
    done = done_rows(out)
    cal = Calibrator(device, cfg["device_id"], cfg["threads"])
    new = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    added, t0 = 0, time.perf_counter()
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        if new:
            w.writeheader()
        for name, knob in loads:
            tag = load_tag(name, knob)
            todo = [(i, m) for i in range(int(cfg["sessions"])) for m in models
                    if (Path(m).stem, tag, str(i)) not in done]
            if not todo:
                continue
            with start_corunner(name, knob, device, cfg["device_id"]) as nb:
                pause = Pausable(nb.pid)
                for i, mp in todo:
                    if not nb.alive():
                        raise HaseError(f"neighbour {tag} exited during the measurement")
                    mp = Path(mp)
                    # the session is made and warmed with the neighbour paused: cuDNN's EXHAUSTIVE search times
                    # its candidates in the first run, and next to a neighbour it may keep another algorithm than
                    # the idle timeline's; both blocks then run the idle choice (paired_run pauses it first anyway)
                    pause.pause(float(cfg["pause_settle_s"]))
                    try:
                        host = host_index(cal.host(cfg["calib_budget_ms"]))
                        sess = make_session(mp, device, device_id=cfg["device_id"], cuda_options=cuda_opts,
                                            threads=cfg["threads"])
                        run = make_runner(sess, dummy_feed(sess, seed=cfg["seed"]), "e2e", cfg["device_id"])
                        for _ in range(int(cfg["warmup"]) + 1):
                            run()
                    except BaseException:
                        os.kill(pause.pid, signal.SIGCONT)
                        raise
                    r = paired_run(run, pause, cfg)
                    row = row_of(mp.stem, tag, i, r, host, nb.pid)
                    w.writerow(row)
                    f.flush()
                    added += 1
                    del run, sess
                    log.info("[%s, session %d, %.0fs] %s: slowdown %s (rounds %s)", tag, i,
                             time.perf_counter() - t0, mp.stem, row["slowdown"], row["round_slowdowns"])
    return added


def main() -> int:
    p = base_parser("Phase 4: slowdowns next to a neighbour, paired with idle runs of the same session",
                    "benchmark", "paired_labels.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("benchmark", args.log_level)
    if not cfg["out"]:
        raise HaseError("config out: the CSV to write is required")
    cfg["models"] = paths.config_models(cfg)
    loads = [parse_load(s) for s in cfg["loads"]]
    if not loads:
        raise HaseError("config loads: no neighbour given (name:knob, benchmark/corunners.py names)")
    for k in ("rounds", "sessions"):
        if int(cfg[k]) < 1:
            raise HaseError(f"config {k}: must be at least 1, got {cfg[k]}")
    n = measure(cfg["models"], loads, cfg, log)
    if "torch" in sys.modules:   # the labels are a user's process's: CUPTI never loaded
        raise HaseError("torch was imported in the paired-label process: its labels are not clean")
    log.info("wrote %d rows to %s", n, cfg["out"])
    return 0


if __name__ == "__main__":
    run_main(main)
