"""Phase 4.1: time one ONNX model (a kernel or a whole network) in ONNX Runtime.

  python benchmark/ort_kernel_runner.py --model path.onnx [--device cpu|cuda|auto]
      [--warmup N | --no-warmup] [--loops N] [--budget-ms X] [--mode e2e|device|both] [--json]

Timing follows triton's do_bench: warm up, then repeat until a time budget is spent (at least
min_loops, at most max_loops; or exactly --loops), keep every raw sample, report median/p10/p90.

Modes:
  e2e     session.run with host numpy arrays: on CUDA this includes the H2D/D2H copies.
  device  IOBinding with inputs and outputs already in the EP's memory, then run_with_iobinding
          and an explicit synchronize, so only the kernels (plus ORT's dispatch) are timed.
          On CPU there is no device memory: 'device' is IOBinding with CPU OrtValues, which
          only skips numpy<->OrtValue wrapping; expect it to equal e2e within noise.

profile_node_times() reads ORT's profiler: per node '<node>_kernel_time' events (cat Node).
On the CUDA EP these are HOST times (launch + dispatch), not GPU execution; the GPU's own
per-kernel times come from CUPTI (debug/ort_profiler_kernel_sum.py run_profiled, CUDA only).
"""
import argparse
import json
import math
import shutil
import tempfile
import time
from pathlib import Path


import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.onnx_io import NAME_OF_ORT, dummy_feed  # noqa: E402
from hase.utils.ort_session import make_session, resolve_device  # noqa: E402

MODES = ("e2e", "device")
RUNNER_DEFAULTS = {"warmup": 10, "budget_ms": 100.0, "min_loops": 10, "max_loops": 10000}


def percentile(samples_ms, q: float) -> float:
    return float(np.percentile(samples_ms, q)) if len(samples_ms) else math.nan


def stats(samples_ms) -> dict:
    a = np.asarray(samples_ms, dtype=float)
    if not a.size:
        return {"n": 0, "mean_ms": math.nan, "median_ms": math.nan, "p10_ms": math.nan, "p90_ms": math.nan,
                "min_ms": math.nan, "std_ms": math.nan}
    return {"n": int(a.size), "mean_ms": float(a.mean()), "median_ms": float(np.median(a)),
            "p10_ms": percentile(a, 10), "p90_ms": percentile(a, 90), "min_ms": float(a.min()),
            "std_ms": float(a.std())}


def session_device(session) -> str:
    return "cuda" if session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"


def make_runner(session, feed: dict, mode: str, device_id: int = 0):
    """A no-argument callable doing one synchronous inference in the given mode."""
    if mode == "e2e":
        return lambda: session.run(None, feed)
    if mode != "device":
        raise HaseError(f"unknown mode '{mode}' (e2e or device)")
    dev = session_device(session)
    io = session.io_binding()
    keep = []  # OrtValues must outlive the binding
    for name, arr in feed.items():
        ov = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr), dev, device_id)
        keep.append(ov)
        io.bind_ortvalue_input(name, ov)
    for o in session.get_outputs():
        static = all(isinstance(d, int) and d >= 0 for d in (o.shape or []))
        if static and o.type in NAME_OF_ORT:
            # preallocated: the timed loop then has no output allocation, like a serving engine
            ov = ort.OrtValue.ortvalue_from_shape_and_type(list(o.shape), np.dtype(NAME_OF_ORT[o.type]), dev, device_id)
            keep.append(ov)
            io.bind_ortvalue_output(o.name, ov)
        else:
            io.bind_output(o.name, dev, device_id)

    def run():
        io.synchronize_inputs()
        session.run_with_iobinding(io)
        io.synchronize_outputs()  # CUDA: wait for the stream so the sample covers the kernels
    run.keep = keep
    return run


def time_loop(fn, loops=None, budget_ms: float = 100.0, min_loops: int = 10, max_loops: int = 10000) -> dict:
    """Call fn until `loops` samples, or until budget_ms is spent (min_loops..max_loops)."""
    samples = []
    start_ts = time.time()
    deadline = time.perf_counter() + budget_ms / 1e3
    while True:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        samples.append((t1 - t0) * 1e3)
        n = len(samples)
        if loops:
            if n >= loops:
                break
        elif n >= max_loops or (n >= min_loops and t1 >= deadline):
            break
    return {"samples_ms": samples, "start_ts": start_ts, "end_ts": time.time(), **stats(samples)}


def measure(session, feed: dict, mode: str = "e2e", warmup: int = 10, loops=None,
            budget_ms: float = 100.0, min_loops: int = 10, max_loops: int = 10000, device_id: int = 0) -> dict:
    """Warm up, then time `mode`; returns raw samples, stats and the loop's wall-clock start/end."""
    fn = make_runner(session, feed, mode, device_id)
    for _ in range(int(warmup)):
        fn()
    res = time_loop(fn, loops, budget_ms, min_loops, max_loops)
    res.update({"mode": mode, "warmup": int(warmup), "device": session_device(session)})
    return res


# ---- ORT profiler: per-node host times -------------------------------------------------------
def parse_profile(events: list, runs: int) -> dict:
    """Average per-node '_kernel_time' over the last `runs` model_run windows of a trace."""
    runs_ev = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])[-runs:]
    execs = [e for e in events if e.get("name") == "SequentialExecutor::Execute"]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in runs_ev]

    def in_timed_run(e):
        return any(a <= e["ts"] <= b for a, b in windows)

    per_node, order = {}, []
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or not in_timed_run(e):
            continue
        name = e["name"][: -len("_kernel_time")]
        if name not in per_node:
            order.append(name)
            per_node[name] = {"node_name": name, "op_name": e.get("args", {}).get("op_name", ""),
                              "provider": e.get("args", {}).get("provider", ""), "total_us": 0.0}
        per_node[name]["total_us"] += e["dur"]
    n = max(len(windows), 1)
    nodes = [{**{k: v for k, v in per_node[nm].items() if k != "total_us"},
              "kernel_time_us": per_node[nm]["total_us"] / n} for nm in order]
    return {"runs": len(windows), "nodes": nodes,
            "kernel_time_sum_us": sum(x["kernel_time_us"] for x in nodes),
            "model_run_us": float(np.mean([e["dur"] for e in runs_ev])) if runs_ev else math.nan,
            "execute_us": float(np.mean([e["dur"] for e in execs if in_timed_run(e)]))
            if any(in_timed_run(e) for e in execs) else math.nan}


def profile_node_times(model_path, device: str, runs: int = 10, warmup: int = 3, opt_level: str = "all",
                       feed: dict = None) -> dict:
    """Run with ORT profiling; per-node '_kernel_time' in µs averaged over `runs` (warm-up excluded).

    Returns {"nodes": [{node_name, op_name, provider, kernel_time_us}], "kernel_time_sum_us",
    "model_run_us", "execute_us", "runs"}. On CUDA these are host dispatch times (see module doc).
    """
    tmp = Path(tempfile.mkdtemp(prefix="hase_prof_"))
    try:
        sess = make_session(model_path, device, opt_level, profile_prefix=tmp / "ort")
        feed = feed if feed is not None else dummy_feed(sess)
        for _ in range(int(warmup) + int(runs)):
            sess.run(None, feed)
        trace = sess.end_profiling()
        events = json.loads(Path(trace).read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return parse_profile(events, int(runs))


# ---- CLI ---------------------------------------------------------------------------------------
def format_result(r: dict) -> str:
    return (f"mode={r['mode']:<6} n={r['n']:<6d} mean={r['mean_ms']:.4f} ms  median={r['median_ms']:.4f} ms  "
            f"p10={r['p10_ms']:.4f} ms  p90={r['p90_ms']:.4f} ms  start_ts={r['start_ts']:.6f}  end_ts={r['end_ts']:.6f}")


def main() -> int:
    p = argparse.ArgumentParser(description="Phase 4.1: time one ONNX model in ONNX Runtime")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--warmup", type=int, default=RUNNER_DEFAULTS["warmup"])
    p.add_argument("--no-warmup", action="store_true", help="time from the first run (cold)")
    p.add_argument("--loops", type=int, default=None, help="exact number of timed runs (overrides the budget)")
    p.add_argument("--budget-ms", type=float, default=RUNNER_DEFAULTS["budget_ms"])
    p.add_argument("--min-loops", type=int, default=RUNNER_DEFAULTS["min_loops"])
    p.add_argument("--max-loops", type=int, default=RUNNER_DEFAULTS["max_loops"])
    p.add_argument("--mode", choices=["e2e", "device", "both"], default="e2e")
    p.add_argument("--opt-level", choices=["disable", "basic", "extended", "all"], default="all",
                   help="ORT graph optimization (kernel files are already optimized nodes: 'disable' is exact)")
    p.add_argument("--json", action="store_true", help="print one JSON object (raw samples included)")
    args = p.parse_args()
    if args.loops is not None and args.loops < 1:
        raise HaseError("--loops must be >= 1")
    if args.warmup < 0 or args.budget_ms <= 0:
        raise HaseError("--warmup must be >= 0 and --budget-ms > 0")
    device = resolve_device(args.device)
    sess = make_session(args.model, device, args.opt_level)
    feed = dummy_feed(sess)
    modes = list(MODES) if args.mode == "both" else [args.mode]
    results = []
    for m in modes:
        try:
            results.append(measure(sess, feed, m, 0 if args.no_warmup else args.warmup, args.loops,
                                   args.budget_ms, args.min_loops, args.max_loops))
        except HaseError:
            raise
        except Exception as e:  # ORT runtime failure (unsupported op, OOM): one line, exit 2
            raise HaseError(f"ORT cannot run it on {device}: {' '.join(str(e).split())[:200]}", args.model)
    if args.json:
        print(json.dumps({"model": str(args.model), "device": device, "providers": sess.get_providers(),
                          "results": results}))
        return 0
    print(f"model={args.model} device={device} provider={sess.get_providers()[0]}")
    if device == "cpu" and "device" in modes:
        print("note: on CPU 'device' mode is IOBinding with CPU OrtValues (no transfers exist to exclude)")
    for r in results:
        print(format_result(r))
    return 0


if __name__ == "__main__":
    run_main(main)
