"""Phase 4 tool: what one session.run really does, measured per node, in several fresh sessions.

  python benchmark/trace_run.py --device cuda --set 'models=[model_zoo/models/*.onnx]' [--set sessions=5]

For each model, `sessions` fresh InferenceSessions, one after another; in each:
  1. warm-up runs (cuDNN's per-session algorithm search happens in the first one),
  2. `profiled_runs` runs with ORT's profiler and (CUDA) torch.profiler's CUPTI activity: ORT gives each
     node's host window, CUPTI each GPU op and the launch call that issued it (same correlation id), so
     each run's launches are attributed to nodes (debug/ort_profiler_kernel_sum.py does the mapping),
  3. ORT's profiler is stopped (end_profiling) and session.run is timed plainly, `budget_ms` per mode
     (e2e: numpy in/out; device: IOBinding, inputs and outputs already on the GPU). In this process CUPTI stays
     attached after the profile, so these times run slow at small batch (harness report:
     benchmark/results/nvidia-h200/harness/); with `clean_labels` (CUDA) every model's sessions are first timed
     in a child process that never profiles (benchmark/clean_labels.py): columns e2e_clean_*, the label,
  4. `cupti_runs` runs under CUPTI alone. ORT's profiler inflates host time (it records every node);
     CUPTI costs about a microsecond per launch. This session's launch sequence from step 2 names the
     node of every launch by position, so the host dispatch per node is measured from the launch
     intervals of these runs: a node's host time is the time from its first launch to the next node's.
     Nodes that launch nothing (a Reshape that aliases its input) share the interval of the launching
     node before them in proportion to their ORT-profiled times.
On CPU EP there is no CUPTI: the node time of the ORT profiler is the compute (steps 2 and 3 only).

Writes to benchmark/results/<device>/<out>/:
  trace_sessions.csv  one row per (model, session): latency stats per mode, Σ host, Σ GPU, copies, fixed
                      cost, profiling inflation, kernel-name signature, SM clock
  trace_nodes.csv     one row per (model, session, node): host_us (launch intervals), host_ort_us
                      (profiled), gpu_us (CUPTI: the union of its kernels' intervals), gpu_kernel_sum_us (their summed
                      durations: larger where kernels overlap), gpu_idle_before_us, launches, kernel names
  traces/<model>.measured.json  Perfetto trace of the median CUPTI run of the first session, in the
                      format of the predicted trace (graph_model/overlap_simulator.py)
Resumable: models whose sessions are all in trace_sessions.csv are skipped.
"""
import bisect
import collections
import hashlib
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.benchmark.ort_kernel_runner import make_runner, time_loop  # noqa: E402
from hase.debug.ort_profiler_kernel_sum import (attribute_gpu_ops, kineto_events, load_profile_events,  # noqa: E402
                                           parse_profile, union_us)
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import dummy_feed  # noqa: E402
from hase.utils.ort_session import device_slug, make_session, provenance, resolve_device  # noqa: E402

DEFAULTS = {"device": "auto", "device_id": 0, "models": [], "sessions": 5, "warmup": 20, "profiled_runs": 10,
            "cupti_runs": 20, "budget_ms": 300.0, "min_loops": 20, "max_loops": 5000, "modes": ["e2e", "device"],
            "cudnn_conv_algo_search": "EXHAUSTIVE", "trace_sessions": 1, "out": "timeline", "seed": 0, "threads": 0,
            "keep_going": False, "model_list": "", "calibrate": True, "calib_budget_ms": 8.0, "clean_labels": True,
            "clean_sessions": 0, "settle_max_s": 60.0,
            # the sessions are the timeline fits' idle reference: before a model, at most every idle_check_s, the busy
            # field (GR engine; CPU util on CPU EP) over idle_window_s must be <= idle_busy_max, else wait up to
            # idle_wait_s and stop with one line (1 = record, never refuse); recorded as bg_busy_* per session
            "idle_busy_max": 0.1, "idle_window_s": 0.5, "idle_wait_s": 60.0, "idle_check_s": 60.0,
            # more CUDA EP options for every session, e.g. {cudnn_conv1d_pad_to_nc1d: 1} (a 1-D conv as [N, C, 1, D]
            # for cuDNN instead of [N, C, D, 1]: does cuDNN then stop running grouped Conv1d one group at a time?)
            "cuda_options": {}}
CONFIG = paths.REPO / "benchmark" / "trace_run.yaml"   # this tool's own config (collector's is config.yaml)
RUN_MARKER = "hase_trace_run"
BEFORE, AFTER = "(before Execute)", "(after Execute)"
NO_LAUNCH = "(no launch record)"
SESSION_KEYS = ("model", "cudnn_conv_algo_search", "session")
PROCESS_TAG = f"{os.uname().nodename}-{os.getpid()}-{int(time.time())}"  # sessions that shared one process


# ---------------------------------------------------------------- attribution: pure functions

def launch_template(runs: list, ops: list) -> dict:
    """The launch sequence of one session, from its ORT-profiled runs: the owner (node or bucket) and
    name of each GPU op in launch order. Runs whose sequence differs from the most common are counted."""
    seqs = []
    for i in range(len(runs)):
        mine = sorted((o for o in ops if o["run"] == i and o["launch_us"] is not None), key=lambda o: o["launch_us"])
        seqs.append(tuple((o["owner"], o["name"]) for o in mine))
    if not seqs:
        raise HaseError("no profiled runs to take the launch sequence from")
    common, n = collections.Counter(seqs).most_common(1)[0]
    return {"owners": [s[0] for s in common], "names": [s[1] for s in common], "runs_agreeing": n,
            "runs": len(seqs), "unlaunched_ops": sum(o["launch_us"] is None for o in ops)}


def split_runs(kin: dict) -> list:
    """GPU ops of a CUPTI-only pass grouped per run marker, each with its launch (host) time; ops
    whose correlation has no launch record are kept apart and counted (never dropped silently)."""
    runs = [{"start_us": m["start_us"], "end_us": m["end_us"], "ops": [], "unlaunched": []} for m in kin["markers"]]
    starts = [r["start_us"] for r in runs]
    for op in kin["gpu_ops"]:
        la = kin["launches"].get(op["correlation"])
        t = la["ts_us"] if la else op["start_us"]
        i = bisect.bisect_right(starts, t) - 1
        if i < 0 or t > runs[i]["end_us"] + 1:
            continue
        if la is None:
            runs[i]["unlaunched"].append(op)
        else:
            runs[i]["ops"].append(dict(op, launch_us=la["ts_us"], launch_end_us=la["ts_us"] + la["dur_us"]))
    for r in runs:
        r["ops"].sort(key=lambda o: o["launch_us"])
    return runs


def assign_owners(run: dict, template: dict) -> bool:
    """Name each op of a CUPTI-only run by its position in the template; False if the sequence differs
    (another op count or another kernel name at some position), then the run is not used."""
    if len(run["ops"]) != len(template["owners"]):
        return False
    if any(o["name"] != nm for o, nm in zip(run["ops"], template["names"])):
        return False
    for o, owner in zip(run["ops"], template["owners"]):
        o["owner"] = owner
    return True


def node_host_intervals(run: dict, nodes: list, ort_us: dict) -> dict:
    """Host dispatch per node (us) in one CUPTI-only run, from its launch times.

    nodes: node names in ORT's execution order; ort_us: each node's ORT-profiled time (us), used only to
    share an interval between a launching node and the launchless nodes after it, and for launchless
    nodes before the first launch (scaled by the run's measured/profiled ratio)."""
    first, last_end = {}, {}
    for o in run["ops"]:
        first.setdefault(o["owner"], o["launch_us"])
        last_end[o["owner"]] = max(last_end.get(o["owner"], 0.0), o["launch_end_us"])
    launching = [n for n in nodes if n in first]
    out = {n: 0.0 for n in nodes}
    if not launching:
        return out
    after = [o["launch_us"] for o in run["ops"] if o["owner"] == AFTER]
    # the last launching node's dispatch ends where the output copy is issued (or at its last launch)
    end_last = min(after) if after else last_end[launching[-1]]
    pos = {n: i for i, n in enumerate(nodes)}
    measured = profiled = 0.0
    for j, n in enumerate(launching):
        t1 = first[launching[j + 1]] if j + 1 < len(launching) else end_last
        nxt = pos[launching[j + 1]] if j + 1 < len(launching) else len(nodes)
        group = nodes[pos[n]:nxt]
        span = max(t1 - first[n], 0.0)
        w = [max(ort_us.get(g, 0.0), 0.0) for g in group]
        tot = sum(w)
        for g, wi in zip(group, w):
            out[g] = span * (wi / tot if tot > 0 else (1.0 if g == n else 0.0))
        measured += span
        profiled += tot
    ratio = measured / profiled if profiled > 0 else 1.0
    for n in nodes[:pos[launching[0]]]:
        out[n] = ort_us.get(n, 0.0) * ratio
    return out


def node_gpu(run: dict, nodes: list) -> dict:
    """Per owner: GPU time (the union of its ops' intervals), the plain sum of their durations, ops, idle GPU time
    before its first op, kernel names. The union, not the sum: cuDNN runs some grouped convolutions as per-group
    kernels that overlap in time (wav2vec's positional conv, ssm's long depthwise Conv1d: up to 7x more summed
    kernel time than GPU busy time, trace_sessions gpu_sum_us vs gpu_busy_us), and the node holds the GPU for the
    union only."""
    out, spans = {}, {}
    prev_end = None
    for o in sorted(run["ops"], key=lambda o: o["start_us"]):
        st = out.setdefault(o["owner"], {"gpu_us": 0.0, "kernel_sum_us": 0.0, "ops": 0, "idle_before_us": None,
                                         "names": []})
        if st["idle_before_us"] is None:
            st["idle_before_us"] = max(o["start_us"] - prev_end, 0.0) if prev_end is not None else 0.0
        st["kernel_sum_us"] += o["dur_us"]
        spans.setdefault(o["owner"], []).append((o["start_us"], o["start_us"] + o["dur_us"]))
        st["ops"] += 1
        if o["name"] not in st["names"]:
            st["names"].append(o["name"])
        prev_end = o["start_us"] + o["dur_us"] if prev_end is None else max(prev_end, o["start_us"] + o["dur_us"])
    for owner, st in out.items():
        st["gpu_us"] = union_us(spans[owner])
    return out


def run_summary(run: dict, nodes: list, host: dict) -> dict:
    """Per-run totals of a CUPTI-only run (us): Σ host, Σ GPU of nodes, copies, GPU busy/idle, and the
    fixed cost = wall - (first node launch -> last GPU end) - copies outside it."""
    ops = run["ops"]
    node_ops = [o for o in ops if o["owner"] in set(nodes)]
    copy_in = sum(o["dur_us"] for o in ops if o["owner"] == BEFORE)
    copy_out = sum(o["dur_us"] for o in ops if o["owner"] == AFTER)
    busy = union_us((o["start_us"], o["start_us"] + o["dur_us"]) for o in node_ops)
    t0 = min((o["launch_us"] for o in node_ops), default=run["start_us"])
    t1 = max((o["start_us"] + o["dur_us"] for o in node_ops), default=t0)
    wall = run["end_us"] - run["start_us"]
    return {"wall_us": wall, "host_sum_us": sum(host.values()), "gpu_sum_us": sum(o["dur_us"] for o in node_ops),
            "gpu_busy_us": busy, "span_us": t1 - t0, "gpu_idle_us": max((t1 - t0) - busy, 0.0),
            "h2d_gpu_us": copy_in, "d2h_gpu_us": copy_out,
            "before_us": t0 - run["start_us"], "after_us": run["end_us"] - t1}


def kernel_signature(names) -> str:
    """Short hash of the ordered GPU op names: equal signatures = the same kernels (cuDNN algorithms)."""
    return hashlib.sha1("\n".join(names).encode()).hexdigest()[:12]


def measured_timeline(model: str, run: dict, nodes: list, host: dict, label: dict) -> dict:
    """One measured run as an overlap_simulator result (same Chrome-trace format as the prediction):
    host dispatch intervals and GPU ops, time 0 = the run's start."""
    t0 = run["start_us"]
    ev = [{"name": "session overhead", "kind": "overhead", "track": "host", "resource": "host", "start_us": 0.0,
           "end_us": 0.0, "node": None, "cause": None}]
    first = {}
    for o in run["ops"]:
        first.setdefault(o["owner"], o["launch_us"])
    for n in nodes:
        if n in first:
            s = first[n] - t0
            ev.append({"name": label.get(n, n), "kind": "dispatch", "track": "host", "resource": "host",
                       "start_us": s, "end_us": s + host.get(n, 0.0), "node": label.get(n, n), "cause": None})
    ev[0]["end_us"] = min((e["start_us"] for e in ev[1:]), default=0.0)
    kinds = {BEFORE: "h2d", AFTER: "d2h"}
    for o in run["ops"]:
        kind = kinds.get(o["owner"], "kernel")
        name = label.get(o["owner"], o["owner"]) if kind == "kernel" else o["name"]
        ev.append({"name": name, "kind": kind, "track": "gpu", "resource": "copy" if kind != "kernel" else "gpu",
                   "start_us": o["start_us"] - t0, "end_us": o["start_us"] - t0 + o["dur_us"],
                   "node": name if kind == "kernel" else None, "cause": None, "gpu_op": o["name"]})
    total = run["end_us"] - t0
    gpu = sum(o["dur_us"] for o in run["ops"] if o["owner"] not in kinds)
    return {"model": model + " (measured)", "ep": "cuda", "total_ms": total / 1e3, "timeline": ev, "bound_by": {},
            "gpu_busy_fraction": gpu / total if total > 0 else 0.0}


def cpu_timeline(model: str, run: dict, label: dict) -> dict:
    """One ORT-profiled CPU EP run as an overlap_simulator result: each node's compute on the host."""
    t0 = run["model_run_start_us"]
    ev = [{"name": "session overhead", "kind": "overhead", "track": "host", "resource": "host", "start_us": 0.0,
           "end_us": max(run["execute_start_us"] - t0, 0.0), "node": None, "cause": None}]
    for nd in run["nodes"]:
        name = label.get(nd["name"], nd["name"])
        ev.append({"name": name, "kind": "cpu_node", "track": "host", "resource": "host",
                   "start_us": nd["start_us"] - t0, "end_us": nd["end_us"] - t0, "node": name, "cause": None})
    total = run["model_run_end_us"] - t0
    return {"model": model + " (measured)", "ep": "cpu", "total_ms": total / 1e3, "timeline": ev, "bound_by": {},
            "gpu_busy_fraction": 0.0}


def median_of(values) -> float:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(statistics.median(vals)) if vals else math.nan


def cupti_session(cruns: list, tmpl: dict, nodes: list, ort_us: dict, ops_of: dict, label: dict, model: str,
                  idx: int, log) -> tuple:
    """One session's CUPTI-only runs (split_runs) named by its launch template: the session row's
    CUPTI columns, the node rows, and the used runs with their host intervals and summaries.
    GPU ops without a launch record (in any run, used or not) are counted in unlaunched_ops and warned
    about; those of the profiled runs in profiled_unlaunched_ops."""
    used = [r for r in cruns if assign_owners(r, tmpl)]
    unlaunched = sum(len(r["unlaunched"]) for r in cruns)
    if not used:
        log.warning("%s session %d: no CUPTI-only run had the profiled launch sequence (%d ops); node times "
                    "from the profiled runs", model, idx, len(tmpl["owners"]))
    hosts = [node_host_intervals(r, nodes, ort_us) for r in used]
    gpus = [node_gpu(r, nodes) for r in used]
    sums = [run_summary(r, nodes, h) for r, h in zip(used, hosts)]
    row = {}
    for k in ("wall_us", "host_sum_us", "gpu_sum_us", "gpu_busy_us", "span_us", "gpu_idle_us", "h2d_gpu_us",
              "d2h_gpu_us", "before_us", "after_us"):
        row["cupti_" + k if k == "wall_us" else k] = median_of([s[k] for s in sums])
    row.update({"kernel_signature": kernel_signature(tmpl["names"]), "n_gpu_ops": len(tmpl["names"]),
                "cupti_runs_used": len(used), "cupti_runs": len(cruns), "unlaunched_ops": unlaunched,
                "profiled_unlaunched_ops": tmpl.get("unlaunched_ops", 0),
                "profiled_runs_agreeing": tmpl["runs_agreeing"]})
    if unlaunched:
        log.warning("%s session %d: %d GPU ops had no launch record (counted in unlaunched_ops)",
                    model, idx, unlaunched)
    node_rows = []
    for n in nodes:
        g = [x.get(n) for x in gpus]
        node_rows.append({"model": model, "session": idx, "node": n, "op": ops_of[n],
                          "kernel_id": label.get(n, ""),
                          "host_us": median_of([h[n] for h in hosts]), "host_ort_us": ort_us[n],
                          "gpu_us": median_of([x["gpu_us"] if x else 0.0 for x in g]) if g else math.nan,
                          "gpu_kernel_sum_us": median_of([x["kernel_sum_us"] if x else 0.0 for x in g]) if g
                          else math.nan,
                          "gpu_idle_before_us": median_of([x["idle_before_us"] if x else 0.0 for x in g]) if g else math.nan,
                          "launches": sum(1 for o in tmpl["owners"] if o == n),
                          "kernel_names": "|".join(dict.fromkeys(nm for o, nm in zip(tmpl["owners"], tmpl["names"])
                                                                if o == n))[:400]})
    return row, node_rows, used, hosts, sums


# ---------------------------------------------------------------- measuring

def sm_clock_mhz(device_id: int) -> float:
    try:
        import pynvml
        pynvml.nvmlInit()
        return float(pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(device_id), pynvml.NVML_CLOCK_SM))
    except Exception:  # no NVML: no clock
        return math.nan


def cupti_pass(run_fn, loops: int, device_id: int) -> dict:
    """`loops` runs of run_fn under torch.profiler (CPU + CUDA activity); the Kineto trace as a dict."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.cuda.set_device(device_id)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(loops):
            with record_function(RUN_MARKER):
                run_fn()
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix="hase_kineto_")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        return json.loads(Path(tmp).read_text())
    finally:
        os.unlink(tmp)


def rename_marker(trace: dict) -> dict:
    """debug's kineto_events looks for its own marker name; ours is RUN_MARKER."""
    from hase.debug import ort_profiler_kernel_sum as dbg
    for ev in trace.get("traceEvents", []):
        if ev.get("name") == RUN_MARKER:
            ev["name"] = dbg.RUN_MARKER
    return trace


def one_session(model_path: Path, device: str, cfg: dict, idx: int, label: dict, want_trace: bool, log,
                calibrator=None) -> tuple:
    """Measure one fresh session; returns (session row, node rows, measured timeline or None).
    calibrator: benchmark/host_calibration's, run in this process just before the session: the host speed
    its host times are learned relative to."""
    calib = calibrator.host(cfg["calib_budget_ms"]) if calibrator is not None else {}
    probe = device == "cpu" and calibrator is not None   # the compute speed around the session (compute_probe)
    probe_before = calibrator.compute_probe() if probe else math.nan
    tmp = Path(tempfile.mkdtemp(prefix="hase_trace_"))
    cuda_opts = (dict({str(k): str(v) for k, v in (cfg["cuda_options"] or {}).items()},
                      cudnn_conv_algo_search=cfg["cudnn_conv_algo_search"]) if device == "cuda" else None)
    t_create = time.perf_counter()
    sess = make_session(model_path, device, profile_prefix=tmp / "ort", device_id=cfg["device_id"],
                        cuda_options=cuda_opts, threads=cfg["threads"])
    create_s = time.perf_counter() - t_create
    feed = dummy_feed(sess, seed=cfg["seed"])
    e2e = make_runner(sess, feed, "e2e", cfg["device_id"])
    t_w = time.perf_counter()
    e2e()
    first_run_s = time.perf_counter() - t_w
    for _ in range(cfg["warmup"]):
        e2e()
    with_cupti = device == "cuda"
    # 2. profiled runs (ORT profiler, + CUPTI on CUDA)
    prof_wall = []
    kin_p = None
    if with_cupti:
        def timed():
            t = time.perf_counter()
            e2e()
            prof_wall.append((time.perf_counter() - t) * 1e6)
        kin_p = rename_marker(cupti_pass(timed, cfg["profiled_runs"], cfg["device_id"]))
    else:
        for _ in range(cfg["profiled_runs"]):
            t = time.perf_counter()
            e2e()
            prof_wall.append((time.perf_counter() - t) * 1e6)
    start_ns = sess.get_profiling_start_time_ns()
    prof_path = Path(sess.end_profiling())
    events = load_profile_events(prof_path)
    runs = parse_profile(events, skip_runs=1 + cfg["warmup"])
    nodes = [n["name"] for n in runs[0]["nodes"]]
    ops_of = {n["name"]: n["op"] for n in runs[0]["nodes"]}
    ort_us = {n: median_of([nd["end_us"] - nd["start_us"] for r in runs for nd in r["nodes"] if nd["name"] == n])
              for n in nodes}
    # 3. plain timing, ORT's profiler off
    modes = {}
    for mode in cfg["modes"]:
        fn = make_runner(sess, feed, mode, cfg["device_id"])
        for _ in range(3):
            fn()
        clk0 = sm_clock_mhz(cfg["device_id"]) if with_cupti else math.nan
        r = time_loop(fn, None, cfg["budget_ms"], cfg["min_loops"], cfg["max_loops"])
        clk1 = sm_clock_mhz(cfg["device_id"]) if with_cupti else math.nan
        modes[mode] = dict(r, sm_clock_mhz=np.nanmean([clk0, clk1]) if with_cupti else math.nan)
    row = {"model": model_path.stem, "cudnn_conv_algo_search": cfg["cudnn_conv_algo_search"] if with_cupti else "",
           "session": idx, "device": device, "threads": cfg["threads"], "n_nodes": len(nodes), "create_s": create_s, "first_run_s": first_run_s,
           "profiled_wall_us": median_of(prof_wall), "ort_node_sum_us": sum(ort_us.values()),
           "ort_execute_us": median_of([r["execute_us"] for r in runs]),
           "ort_before_execute_us": median_of([r["before_execute_us"] for r in runs]),
           "ort_after_execute_us": median_of([r["after_execute_us"] for r in runs]), "process": PROCESS_TAG}
    if calib:
        from hase.benchmark.host_calibration import host_columns, host_index
        row.update(host_columns(calib, host_index(calib)))
    for mode, r in modes.items():
        row.update({f"{mode}_{k}": r[k] for k in ("mean_ms", "median_ms", "p10_ms", "p90_ms", "n")})
        row[f"{mode}_sm_clock_mhz"] = r["sm_clock_mhz"]
    node_rows, timeline = [], None
    if not with_cupti:  # CPU EP: the profiled node time is the compute
        row.update({"host_sum_us": sum(ort_us.values()), "gpu_sum_us": 0.0, "kernel_signature": "",
                    "n_gpu_ops": 0, "cupti_runs_used": 0, "unlaunched_ops": 0, "profiled_unlaunched_ops": 0})
        for n in nodes:
            node_rows.append({"model": model_path.stem, "session": idx, "node": n, "op": ops_of[n],
                              "kernel_id": label.get(n, ""), "host_us": ort_us[n], "host_ort_us": ort_us[n],
                              "gpu_us": 0.0, "gpu_kernel_sum_us": 0.0, "gpu_idle_before_us": 0.0, "launches": 0,
                              "kernel_names": ""})
        row.update({"probe_matmul_gflops_before": probe_before,
                    "probe_matmul_gflops_after": calibrator.compute_probe() if probe else math.nan})
        if want_trace:
            med = sorted(runs, key=lambda r: r["model_run_us"])[len(runs) // 2]
            timeline = cpu_timeline(model_path.stem, med, label)
        sess = None
        _cleanup(tmp, prof_path)
        return row, node_rows, timeline
    kp = kineto_events(kin_p, start_ns)
    ops_p = attribute_gpu_ops(runs, kp["gpu_ops"], kp["launches"])
    tmpl = launch_template(runs, ops_p)
    # 4. CUPTI-only runs
    kin_c = rename_marker(cupti_pass(e2e, cfg["cupti_runs"], cfg["device_id"]))
    cruns = split_runs(kineto_events(kin_c, start_ns))
    upd, node_rows, used, hosts, sums = cupti_session(cruns, tmpl, nodes, ort_us, ops_of, label,
                                                      model_path.stem, idx, log)
    row.update(upd)
    if want_trace and used:
        med = sorted(range(len(used)), key=lambda i: sums[i]["wall_us"])[len(used) // 2]
        timeline = measured_timeline(model_path.stem, used[med], nodes, hosts[med], label)
    sess = None
    _cleanup(tmp, prof_path)
    return row, node_rows, timeline


def _cleanup(tmp: Path, prof_path: Path) -> None:
    for p in (prof_path, *tmp.glob("*")):
        try:
            Path(p).unlink()
        except OSError:
            pass
    try:
        tmp.rmdir()
    except OSError:
        pass


def kernel_labels(model_path: Path, device: str) -> dict:
    """{ORT node name: Hase kernel id} from the model's phase 2 record, when there is one."""
    from hase.ort_analysis.fusion_detector import record_path
    rp = record_path(model_path.stem, device)
    if not rp.exists():
        return {}
    rec = paths.read_json(rp, "kernel record")
    return {k["node_name"]: k["id"] for k in rec.get("kernels", []) if k.get("node_name")}


def clean_pass(models: list, cfg: dict, out: Path, log, device: str = "cuda") -> dict:
    """benchmark/clean_labels.py in a child process (no torch, no CUPTI) over the models, before any profiling
    here; resumable through out/clean_sessions.csv. {(model stem, session as str): its e2e_clean_* columns}."""
    import subprocess
    import sys
    csv_path = out / "clean_sessions.csv"
    cmd = [sys.executable, str(paths.REPO / "benchmark" / "clean_labels.py"), "--device", device,
           "--log-level", "WARNING", "--set", f"models=[{', '.join(str(m) for m in models)}]"]
    cmd += ["--set", f"sessions={cfg.get('clean_sessions') or cfg['sessions']}"]
    for k in ("warmup", "budget_ms", "min_loops", "max_loops", "cudnn_conv_algo_search", "threads",
              "seed", "device_id", "calib_budget_ms", "profiled_runs", "settle_max_s", "idle_busy_max",
              "idle_window_s", "idle_wait_s", "idle_check_s"):
        cmd += ["--set", f"{k}={cfg.get(k, DEFAULTS[k])}"]
    cmd += ["--set", f"out={csv_path}"]
    env = paths.child_env()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise HaseError(f"clean-label process failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:200]}")
    d = pd.read_csv(csv_path)
    log.info("clean labels (a process that never profiles): %d model-sessions in %.0f s", len(d),
             time.perf_counter() - t0)
    cols = [c for c in d.columns if c not in ("model", "session")]
    return {(str(m), str(s)): dict(zip(cols, v)) for m, s, *v in d[["model", "session", *cols]].itertuples(index=False)}


def append_csv(path: Path, rows: list) -> None:
    """Append rows. Rows with the file's columns are appended in one write (a corpus's node table grows to
    hundreds of thousands of rows: rewriting it per model cost minutes); other columns rewrite the file
    whole through a temp file."""
    if not rows:
        return
    new = pd.DataFrame(rows)
    if path.exists():
        with open(path) as f:
            header = f.readline().rstrip("\n").split(",")
        if header == [str(c) for c in new.columns]:
            with open(path, "a") as f:
                f.write(new.to_csv(index=False, header=False))
            return
        new = pd.concat([pd.read_csv(path), new], ignore_index=True)
    paths.atomic_write_text(path, new.to_csv(index=False))


def done_sessions(path: Path) -> set:
    if not path.exists():
        return set()
    df = pd.read_csv(path, keep_default_na=False)
    return {tuple(str(v) for v in r) for r in df[list(SESSION_KEYS)].itertuples(index=False)}


def main() -> int:
    p = base_parser("Measured timeline of session.run per node, in several fresh sessions", "benchmark")
    p.set_defaults(config=CONFIG)
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("trace_run", args.log_level)
    if cfg["sessions"] < 1 or cfg["profiled_runs"] < 1 or cfg["cupti_runs"] < 1:
        raise HaseError("sessions, profiled_runs and cupti_runs must be >= 1")
    if not isinstance(cfg["threads"], int) or cfg["threads"] < 0:
        raise HaseError(f"config threads: ORT intra-op threads must be an integer >= 0 (0 = ORT's default), "
                        f"not '{cfg['threads']}'")
    bad = [m for m in cfg["modes"] if m not in ("e2e", "device")]
    if bad:
        raise HaseError(f"config modes: unknown mode '{bad[0]}' (e2e or device)")
    device = resolve_device(cfg["device"], cfg["device_id"])
    if cfg["model_list"]:
        models = [Path(x) for x in paths.model_list(cfg["model_list"])]
    else:
        pats = cfg["models"] or [str(paths.models_dir() / "*.onnx")]
        models = [m for m in paths.expand_globs(pats) if ".opt." not in m.name]
    out = paths.bench_results_dir() / device_slug(device, cfg["device_id"]) / cfg["out"]
    out.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, out, f"trace_config_{cfg['cudnn_conv_algo_search'].lower()}.json",
                  {"provenance": provenance(device, cfg["device_id"])})
    s_csv, n_csv = out / "trace_sessions.csv", out / "trace_nodes.csv"
    done = done_sessions(s_csv)
    from hase.benchmark.gpu_metrics import IdleGuard
    guard = IdleGuard(device, cfg["device_id"], cfg["idle_busy_max"], cfg["idle_window_s"], cfg["idle_wait_s"],
                      cfg["idle_check_s"], "trace_run")
    guard.check()   # before the process calibration too: a profile taken next to a busy neighbour is the wrong speed
    calibrator = None
    if cfg["calibrate"]:  # this process's host and copy speed, once in full, then per session (host chains)
        from hase.benchmark.host_calibration import Calibrator
        calibrator = Calibrator(device, cfg["device_id"], cfg["threads"])
        cal = calibrator.calibrate()
        d = json.loads((out / "calibration.json").read_text()) if (out / "calibration.json").exists() else {}
        d[PROCESS_TAG] = cal.to_dict()
        paths.atomic_write_text(out / "calibration.json", json.dumps(d, indent=1))
        log.info("calibration of this process: host %.2f us/node, %s", cal.host_index_us,
                 " ".join(f"{k} {v:.1f}" for k, v in {**cal.copy_gbps, **cal.compute}.items()))
    algo = cfg["cudnn_conv_algo_search"] if device == "cuda" else ""
    clean = {}
    if cfg["clean_labels"] and device == "cuda":  # before anything here loads CUPTI
        todo_models = [mp for mp in models  # clean_labels.py skips the sessions it already has
                       if any((mp.stem, algo, str(i)) not in done for i in range(cfg["sessions"]))
                       or cfg["clean_sessions"] > cfg["sessions"]]
        if todo_models:
            clean = clean_pass(todo_models, cfg, out, log)
    t0 = time.perf_counter()
    for mi, mp in enumerate(models):
        todo = [i for i in range(cfg["sessions"]) if (mp.stem, algo, str(i)) not in done]
        if not todo:
            continue
        idle = guard.check()
        label = kernel_labels(mp, device)
        srows, nrows = [], []
        for i in todo:
            try:
                row, nodes, tl = one_session(mp, device, cfg, i, label, i < cfg["trace_sessions"], log, calibrator)
            except HaseError as e:
                if not cfg["keep_going"]:
                    raise
                log.error("%s session %d failed: %s", mp.stem, i, e)
                break
            except Exception as e:  # ORT/CUDA failure on this model: one line, keep going with the next
                log.error("%s session %d failed: %s", mp.stem, i, " ".join(str(e).split())[:200])
                break
            row["algo_tag"] = algo
            row.update(idle)
            row.update(clean.get((mp.stem, str(i)), {}))
            srows.append(row)
            nrows += nodes
            if tl is not None:
                from hase.graph_model.overlap_simulator import write_chrome_trace
                write_chrome_trace(tl, out / "traces" / f"{mp.stem}.measured.json")
        append_csv(s_csv, srows)
        append_csv(n_csv, [dict(r, cudnn_conv_algo_search=algo) for r in nrows])
        if srows:
            lat = [r.get("e2e_mean_ms", math.nan) for r in srows]
            log.info("[%d/%d %.0fs] %s: %d sessions, e2e mean %s ms", mi + 1, len(models), time.perf_counter() - t0,
                     mp.stem, len(srows), " ".join(f"{x:.3f}" for x in lat))
    log.info("wrote %s and %s", s_csv, n_csv)
    return 0


if __name__ == "__main__":
    run_main(main)
