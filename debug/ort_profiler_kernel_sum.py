"""Where does an ORT session.run() spend its time? Host breakdown from ORT's profiler, and on CUDA
the GPU kernels (torch.profiler / CUPTI) assigned to the ORT node that launched them.

  python debug/ort_profiler_kernel_sum.py --model X.onnx [--warmup 50] [--loops 50]
      [--profile-prefix P] [--device-id 0] [--device cpu|cuda|auto]
      [--trace-out merged.json] [--json-out breakdown.json]

Host breakdown (averaged over the timed runs; the warmup runs are profiled by ORT too, then dropped):

  model_run                    session.run inside ORT
  ├ before Execute             model_run start -> Execute start (input checks, input copies)
  ├ SequentialExecutor::Execute
  │ ├ node_timeline_span       first node start -> last node end
  │ │ ├ kernel_time_sum        sum of the <node>_kernel_time events
  │ │ ├ within-node non-kernel node span minus its kernel_time (fence format only; 0 without fences)
  │ │ └ gaps between nodes     next node start - previous node end
  │ └ Execute outside nodes    Execute - node_timeline_span
  └ after Execute              Execute end -> model_run end (on CUDA: stream sync, output copy)

Two profile formats: ORT before ~1.17 wrote <node>_fence_before / _kernel_time / _fence_after (node span
= fence_before start -> fence_after end); ORT 1.31 writes only <node>_kernel_time (node span = that
event). Timestamps are integer microseconds from the profiling start (sess.get_profiling_start_time_ns(),
system clock, ns since the Unix epoch).

GPU side (--device cuda with a CUDA torch): the timed runs also run under torch.profiler (CPU + CUDA
activity). Its Chrome trace gives every GPU kernel/memcpy/memset (GPU start, duration, correlation id)
and every CUDA launch call (cudaLaunchKernel, cuLaunchKernel, cudaMemcpyAsync... host start, same
correlation id); those times are baseTimeNanoseconds + ts*1000 = ns since the Unix epoch, the clock ORT
uses, so they map onto ORT's time base exactly. Each GPU op goes to the ORT node whose host window
holds its launch.
"""
import argparse
import bisect
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


from hase.utils import paths  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import dummy_feed  # noqa: E402
from hase.utils.ort_session import make_session, provenance, resolve_device  # noqa: E402

RUN_EVENT = "model_run"
EXECUTE_SUFFIX = "Executor::Execute"      # SequentialExecutor::Execute (ParallelExecutor in old ORT)
NODE_PARTS = ("_fence_before", "_kernel_time", "_fence_after")
FORMAT_FENCE = "fence"                     # <node>_fence_before / _kernel_time / _fence_after
FORMAT_KERNEL_TIME = "kernel_time"         # <node>_kernel_time only (ORT 1.31)
FORMAT_TEXT = {FORMAT_FENCE: "fence_before/kernel_time/fence_after (node span = fences)",
               FORMAT_KERNEL_TIME: "kernel_time only, no fences (node span = kernel_time event)"}

# (key in the breakdown dict, printed label, indent); every value is microseconds, printed in ms
BREAKDOWN_ROWS = [
    ("model_run_us", "model_run", 0),
    ("execute_us", "SequentialExecutor::Execute", 0),
    ("node_timeline_span_us", "node_timeline_span", 1),
    ("kernel_time_sum_us", "kernel_time_sum", 2),
    ("within_node_non_kernel_us", "within-node non-kernel", 2),
    ("between_node_gap_us", "gaps between nodes", 2),
    ("execute_outside_nodes_us", "Execute outside nodes", 1),
    ("model_run_outside_execute_us", "model_run outside Execute", 0),
    ("before_execute_us", "before Execute", 1),
    ("after_execute_us", "after Execute", 1),
]
BREAKDOWN_KEYS = [k for k, _, _ in BREAKDOWN_ROWS]

# torch.profiler (Kineto) Chrome-trace categories
GPU_OP_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
RUN_MARKER = "hase_ort_run"                # record_function around each timed session.run


# ---------------------------------------------------------------- ORT profile: pure functions

def load_profile_events(path) -> list:
    """ORT writes a JSON list of Chrome-trace events (some tools wrap it in {'traceEvents': [...]})."""
    path = Path(path)
    data = paths.read_json(path, "ORT profile")
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise HaseError("not an ORT profile (no event list)", path)
    return events


def end_us(ev: dict) -> float:
    return ev["ts"] + ev.get("dur", 0)


def split_node_event_name(name: str):
    """'conv1_kernel_time' -> ('conv1', '_kernel_time'); None for other events."""
    for part in NODE_PARTS:
        if name.endswith(part) and len(name) > len(part):
            return name[: -len(part)], part
    return None


def profile_format(events) -> str:
    for ev in events:
        parsed = split_node_event_name(ev.get("name", "")) if ev.get("cat") == "Node" else None
        if parsed and parsed[1] != "_kernel_time":
            return FORMAT_FENCE
    return FORMAT_KERNEL_TIME


def _node_records(node_events: list, fmt: str) -> list:
    """Node windows in one Execute: [{name, op, provider, start_us, end_us, kernel_us}], by start."""
    by_part = {}
    for ev in node_events:
        node, part = split_node_event_name(ev["name"])
        by_part.setdefault((node, part), []).append(ev)
    records = []
    for (node, part), kernels in by_part.items():
        if part != "_kernel_time":
            continue
        kernels.sort(key=lambda e: e["ts"])
        befores = sorted(by_part.get((node, "_fence_before"), []), key=lambda e: e["ts"])
        afters = sorted(by_part.get((node, "_fence_after"), []), key=lambda e: e["ts"])
        if fmt == FORMAT_FENCE and not (len(befores) == len(kernels) == len(afters)):
            raise HaseError(f"node '{node}': {len(befores)} fence_before, {len(kernels)} kernel_time, "
                            f"{len(afters)} fence_after events in one run")
        for i, k in enumerate(kernels):
            args = k.get("args", {})
            start, end = k["ts"], end_us(k)
            if fmt == FORMAT_FENCE:
                start, end = befores[i]["ts"], end_us(afters[i])
            records.append({"name": node, "op": args.get("op_name", ""), "provider": args.get("provider", ""),
                            "start_us": start, "end_us": end, "kernel_us": k.get("dur", 0)})
    records.sort(key=lambda r: (r["start_us"], -r["end_us"]))
    return _top_level(records)


def _top_level(records: list) -> list:
    """Drop nodes that run inside another node (If/Loop subgraphs): they are part of the parent's span."""
    kept = []
    for r in records:
        parent = kept[-1] if kept else None
        nested = (parent is not None and r["start_us"] < parent["end_us"] and r["end_us"] <= parent["end_us"]
                  and (r["end_us"] - r["start_us"]) < (parent["end_us"] - parent["start_us"]))
        if not nested:
            kept.append(r)
    return kept


ROUND_US = 2   # ts and dur of ORT's profile events are whole microseconds, rounded apart


def parse_profile(events: list, skip_runs: int = 0) -> list:
    """One breakdown dict per model_run event (time order), the first skip_runs dropped.

    Each dict has the BREAKDOWN_KEYS (microseconds), 'format', 'n_nodes', the run's and Execute's
    windows (model_run_start_us, execute_start_us, ...) and 'nodes' (top-level node windows).
    """
    fmt = profile_format(events)
    runs_ev = sorted((e for e in events if e.get("name") == RUN_EVENT and e.get("ph", "X") == "X"),
                     key=lambda e: e["ts"])
    exec_ev = sorted((e for e in events if str(e.get("name", "")).endswith(EXECUTE_SUFFIX)), key=lambda e: e["ts"])
    node_ev = sorted((e for e in events if e.get("cat") == "Node" and split_node_event_name(e.get("name", ""))),
                     key=lambda e: e["ts"])
    if not runs_ev:
        raise HaseError("no model_run events in the profile (was session.run called with profiling on?)")
    exec_starts = [e["ts"] for e in exec_ev]
    node_starts = [e["ts"] for e in node_ev]
    out = []
    for i, run in enumerate(runs_ev):
        if i < skip_runs:
            continue
        r0, r1 = run["ts"], end_us(run)
        # ORT writes ts and dur as whole microseconds, each rounded on its own: an event inside another may
        # appear to start or end up to ROUND_US outside it (a run of a few us lost its Execute event that way)
        inside = exec_ev[bisect.bisect_left(exec_starts, r0 - ROUND_US): bisect.bisect_right(exec_starts, r1)]
        inside = [e for e in inside if end_us(e) <= r1 + ROUND_US]
        if not inside:
            raise HaseError(f"model_run #{i} (ts={r0} us) holds no SequentialExecutor::Execute event")
        ex = max(inside, key=lambda e: e.get("dur", 0))  # the top-level one; subgraphs run shorter ones
        x0, x1 = ex["ts"], end_us(ex)
        nodes_raw = node_ev[bisect.bisect_left(node_starts, x0 - ROUND_US): bisect.bisect_right(node_starts, x1)]
        nodes = _node_records([e for e in nodes_raw if end_us(e) <= x1 + ROUND_US], fmt)
        out.append(breakdown_of_run(i, fmt, run, ex, nodes))
    return out


def breakdown_of_run(index: int, fmt: str, run: dict, ex: dict, nodes: list) -> dict:
    model_run_us, execute_us = run.get("dur", 0), ex.get("dur", 0)
    if nodes:
        span_us = nodes[-1]["end_us"] - nodes[0]["start_us"]
        kernel_us = sum(n["kernel_us"] for n in nodes)
        non_kernel_us = sum((n["end_us"] - n["start_us"]) - n["kernel_us"] for n in nodes)
        gap_us = sum(b["start_us"] - a["end_us"] for a, b in zip(nodes, nodes[1:]))
    else:
        span_us = kernel_us = non_kernel_us = gap_us = 0
    before_us = ex["ts"] - run["ts"]
    after_us = end_us(run) - end_us(ex)
    return {
        "run_index": index, "format": fmt, "n_nodes": len(nodes),
        "model_run_start_us": run["ts"], "model_run_end_us": end_us(run),
        "execute_start_us": ex["ts"], "execute_end_us": end_us(ex),
        "model_run_us": model_run_us, "execute_us": execute_us,
        "node_timeline_span_us": span_us, "kernel_time_sum_us": kernel_us,
        "within_node_non_kernel_us": non_kernel_us, "between_node_gap_us": gap_us,
        "execute_outside_nodes_us": execute_us - span_us,
        "model_run_outside_execute_us": model_run_us - execute_us,
        "before_execute_us": before_us, "after_execute_us": after_us,
        "nodes": nodes,
    }


def summarize(runs: list) -> dict:
    """Mean of every breakdown key over the runs, plus the median and spread of model_run."""
    if not runs:
        raise HaseError("no timed runs to summarize (fewer model_run events than --warmup?)")
    mean = {k: statistics.fmean(r[k] for r in runs) for k in BREAKDOWN_KEYS}
    model_run = [r["model_run_us"] for r in runs]
    return {
        "format": runs[0]["format"], "runs": len(runs), "n_nodes": runs[0]["n_nodes"],
        "mean_us": mean,
        "model_run_median_us": statistics.median(model_run),
        "model_run_min_us": min(model_run), "model_run_max_us": max(model_run),
    }


def format_breakdown(summary: dict) -> list:
    lines = []
    for key, label, indent in BREAKDOWN_ROWS:
        lines.append(f"{'  ' * indent + label:<32} = {summary['mean_us'][key] / 1000:10.5f} ms")
    return lines


# ---------------------------------------------------------------- GPU side: pure functions

def kineto_events(trace: dict, ort_start_ns: int) -> dict:
    """GPU ops, CUDA launch calls and run markers from a torch.profiler Chrome trace, in ORT's time
    base (us since ORT's profiling start).

    Kineto writes ts in us relative to baseTimeNanoseconds (absolute: ns since the Unix epoch on the
    system clock, the clock ORT's get_profiling_start_time_ns() uses).
    """
    base_ns = int(trace.get("baseTimeNanoseconds", 0))
    shift_us = (base_ns - int(ort_start_ns)) / 1000.0
    gpu_ops, launches, markers = [], {}, []
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") != "X" or "ts" not in ev:
            continue
        cat, args = ev.get("cat", ""), ev.get("args", {}) or {}
        ts_us = float(ev["ts"]) + shift_us
        dur_us = float(ev.get("dur", 0))
        if cat in GPU_OP_KINDS:
            gpu_ops.append({"name": ev.get("name", ""), "kind": GPU_OP_KINDS[cat], "start_us": ts_us,
                            "dur_us": dur_us, "correlation": args.get("correlation"),
                            "device": args.get("device", ev.get("pid")), "stream": args.get("stream", ev.get("tid"))})
        elif cat in LAUNCH_CATS and args.get("correlation") is not None:
            launches[args["correlation"]] = {"name": ev.get("name", ""), "ts_us": ts_us, "dur_us": dur_us,
                                             "tid": ev.get("tid")}
        elif cat == "user_annotation" and ev.get("name") == RUN_MARKER:
            markers.append({"start_us": ts_us, "end_us": ts_us + dur_us})
    gpu_ops.sort(key=lambda o: o["start_us"])
    markers.sort(key=lambda m: m["start_us"])
    return {"gpu_ops": gpu_ops, "launches": launches, "markers": markers}


def marker_alignment(runs: list, markers: list) -> dict:
    """Check of the clock mapping: each timed model_run must sit inside its record_function marker."""
    n = min(len(runs), len(markers))
    inside, slack = 0, []
    for r, m in zip(runs[:n], markers[:n]):
        lead = r["model_run_start_us"] - m["start_us"]
        tail = m["end_us"] - r["model_run_end_us"]
        inside += lead >= -1 and tail >= -1           # ORT truncates to whole us
        slack.append(min(lead, tail))
    return {"runs_checked": n, "runs_inside_marker": inside,
            "min_slack_us": min(slack) if slack else None}


def host_owner(run: dict, t_us: float) -> str:
    """Which part of one run a host timestamp falls in: a node name or a '(...)' bucket."""
    if t_us < run["model_run_start_us"]:
        return "(outside model_run)"
    if t_us < run["execute_start_us"]:
        return "(before Execute)"
    if t_us >= run["execute_end_us"] + 1:
        return "(after Execute)" if t_us < run["model_run_end_us"] + 1 else "(outside model_run)"
    nodes = run["nodes"]
    i = bisect.bisect_right([n["start_us"] for n in nodes], t_us) - 1
    if i >= 0 and t_us < nodes[i]["end_us"] + 1:   # ORT windows are truncated to whole us
        return nodes[i]["name"]
    return "(in Execute, outside nodes)"


def attribute_gpu_ops(runs: list, gpu_ops: list, launches: dict) -> list:
    """Each GPU op with its launch's host time, the timed run (index into runs) and the owner."""
    run_starts = [r["model_run_start_us"] for r in runs]
    out = []
    for op in gpu_ops:
        launch = launches.get(op["correlation"])
        rec = dict(op, launch_us=None, launch_name=None, run=None, owner="(no launch record)")
        if launch is None:  # still count it for its run (by GPU start; ORT syncs before model_run ends)
            i = bisect.bisect_right(run_starts, op["start_us"]) - 1
            if i >= 0 and op["start_us"] < runs[i]["model_run_end_us"] + 1:
                rec["run"] = i
        else:
            rec.update(launch_us=launch["ts_us"], launch_name=launch["name"], owner="(outside model_run)")
            i = bisect.bisect_right(run_starts, launch["ts_us"]) - 1
            if i >= 0 and launch["ts_us"] < runs[i]["model_run_end_us"] + 1:
                rec.update(run=i, owner=host_owner(runs[i], launch["ts_us"]))
        out.append(rec)
    return out


def union_us(intervals) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def gpu_breakdown(runs: list, ops: list) -> dict:
    """Per node and per model GPU numbers, averaged over the timed runs.

    Window of a run = Execute start -> max(Execute end, last GPU op end): the host issues work and then
    waits for the GPU (the 'Execute+sync' window). GPU ops are clipped to it; idle gaps before each op
    are charged to that op's node, so window = busy + sum(idle before ops) + tail idle.
    """
    n_runs = len(runs)
    per_node, model = {}, []
    order = [n["name"] for n in runs[0]["nodes"]] if runs else []
    for i, run in enumerate(runs):
        mine = sorted((o for o in ops if o["run"] == i), key=lambda o: o["start_us"])
        w0 = run["execute_start_us"]
        w1 = max([run["execute_end_us"]] + [o["start_us"] + o["dur_us"] for o in mine])
        prev_end, idle_total, first_start = w0, 0.0, {}
        for o in mine:
            s, e = max(o["start_us"], w0), min(o["start_us"] + o["dur_us"], w1)
            idle = max(0.0, s - prev_end)
            prev_end = max(prev_end, e)
            idle_total += idle
            st = per_node.setdefault(o["owner"], {"gpu_us": 0.0, "n_ops": 0, "idle_us": 0.0, "queue_us": []})
            st["gpu_us"] += o["dur_us"]
            st["n_ops"] += 1
            st["idle_us"] += idle
            if o["owner"] not in first_start and o["launch_us"] is not None:
                first_start[o["owner"]] = o["start_us"] - o["launch_us"]
                st["queue_us"].append(o["start_us"] - o["launch_us"])
        busy = union_us((max(o["start_us"], w0), min(o["start_us"] + o["dur_us"], w1)) for o in mine
                        if o["start_us"] + o["dur_us"] > w0 and o["start_us"] < w1)
        busy_run = union_us((o["start_us"], o["start_us"] + o["dur_us"]) for o in mine)
        model.append({"window_us": w1 - w0, "busy_us": busy, "idle_us": idle_total,
                      "tail_idle_us": w1 - prev_end, "execute_us": run["execute_us"],
                      "gpu_busy_all_us": busy_run, "model_run_us": run["model_run_us"]})
    host_us = {}
    for run in runs:
        for nd in run["nodes"]:
            host_us.setdefault(nd["name"], []).append(nd["end_us"] - nd["start_us"])
    ops_of = {n["name"]: n["op"] for n in runs[0]["nodes"]} if runs else {}
    names = order + sorted(k for k in per_node if k not in order)
    nodes = []
    for name in names:
        st = per_node.get(name, {"gpu_us": 0.0, "n_ops": 0, "idle_us": 0.0, "queue_us": []})
        nodes.append({"node": name, "op": ops_of.get(name, ""),
                      "host_us": statistics.fmean(host_us[name]) if name in host_us else 0.0,
                      "gpu_us": st["gpu_us"] / n_runs, "gpu_ops_per_run": st["n_ops"] / n_runs,
                      "gpu_idle_before_us": st["idle_us"] / n_runs,
                      "launch_to_gpu_start_us": statistics.median(st["queue_us"]) if st["queue_us"] else None})
    mean = {k: statistics.fmean(m[k] for m in model) for k in model[0]} if model else {}
    counts = {"gpu_ops_total": len(ops), "gpu_ops_in_timed_runs": sum(o["run"] is not None for o in ops),
              "gpu_ops_without_launch_record": sum(o["launch_us"] is None for o in ops)}
    return {"nodes": nodes, "model": mean, "counts": counts, "verdict": verdict(mean)}


def verdict(model: dict) -> dict:
    """Dispatch-bound when the host needs longer to issue the work (Execute) than the GPU needs to run it."""
    if not model or model.get("busy_us", 0) <= 0:
        return {"bound": "unknown", "text": "no GPU work attributed to the timed runs"}
    busy_frac = model["busy_us"] / model["window_us"] if model["window_us"] else 0.0
    ratio = model["busy_us"] / model["execute_us"] if model["execute_us"] else float("inf")
    if ratio >= 1.0:
        text = (f"GPU-bound: GPU busy {model['busy_us'] / 1000:.3f} ms is {ratio:.2f}x the host dispatch "
                f"(Execute {model['execute_us'] / 1000:.3f} ms); GPU busy {busy_frac:.1%} of the Execute+sync window")
        bound = "gpu"
    else:
        text = (f"dispatch-bound: host dispatch (Execute {model['execute_us'] / 1000:.3f} ms) is {1 / ratio:.2f}x "
                f"the GPU busy time {model['busy_us'] / 1000:.3f} ms; GPU idle {1 - busy_frac:.1%} of the "
                f"Execute+sync window")
        bound = "dispatch"
    return {"bound": bound, "gpu_over_dispatch": ratio, "gpu_busy_fraction": busy_frac, "text": text}


def merged_chrome_trace(ort_events: list, runs: list, ops: list, launches: dict, gpu_label: str) -> dict:
    """ORT events of the timed runs + CUDA launches + GPU ops, one time base (us since ORT profiling start)."""
    t0 = runs[0]["model_run_start_us"] if runs else 0
    t1 = runs[-1]["model_run_end_us"] if runs else 0
    pid_ort, pid_launch, pid_gpu = 1, 2, 3
    out = [{"ph": "M", "name": "process_name", "pid": pid_ort, "args": {"name": "ORT host (profiler)"}},
           {"ph": "M", "name": "process_name", "pid": pid_launch, "args": {"name": "CUDA launches (host)"}},
           {"ph": "M", "name": "process_name", "pid": pid_gpu, "args": {"name": gpu_label}}]
    for ev in ort_events:
        if ev.get("ph", "X") != "X" or ev.get("cat") not in ("Session", "Node"):
            continue
        if ev["ts"] < t0 or ev["ts"] > t1:
            continue
        args = {k: v for k, v in (ev.get("args") or {}).items() if k in ("op_name", "provider", "node_index")}
        out.append({"ph": "X", "name": ev["name"], "cat": "ort_" + ev["cat"].lower(), "pid": pid_ort,
                    "tid": ev.get("tid", 0), "ts": ev["ts"], "dur": ev.get("dur", 0), "args": args})
    used, streams = set(), set()
    for o in ops:
        if o["run"] is None:
            continue
        stream = o["stream"] if isinstance(o["stream"], int) else 0   # Perfetto wants integer tids
        streams.add(stream)
        out.append({"ph": "X", "name": o["name"], "cat": "gpu_" + o["kind"], "pid": pid_gpu,
                    "tid": stream, "ts": round(o["start_us"], 3), "dur": round(o["dur_us"], 3),
                    "args": {"ort_node": o["owner"], "correlation": o["correlation"]}})
        used.add(o["correlation"])
    out += [{"ph": "M", "name": "thread_name", "pid": pid_gpu, "tid": s, "args": {"name": f"stream {s}"}}
            for s in sorted(streams)]
    for corr, la in launches.items():
        if corr in used:
            out.append({"ph": "X", "name": la["name"], "cat": "cuda_launch", "pid": pid_launch,
                        "tid": la["tid"], "ts": round(la["ts_us"], 3), "dur": round(la["dur_us"], 3),
                        "args": {"correlation": corr}})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"time_base": "us since ORT profiling start (sess.get_profiling_start_time_ns())"}}


# ---------------------------------------------------------------- running the model

def torch_cuda_ok(device: str):
    """(ok, why): torch.profiler can see CUDA only with a CUDA torch on a machine with a GPU."""
    if device != "cuda":
        return False, "device is cpu"
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "torch.cuda is not available"
    return True, "ok"


def run_profiled(args, device: str, with_gpu: bool, log) -> dict:
    prefix = Path(args.profile_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    sess = make_session(args.model, device, profile_prefix=prefix, device_id=args.device_id)
    feed = dummy_feed(sess)
    log.info("warmup %d runs (profiled by ORT, dropped from the breakdown)", args.warmup)
    for _ in range(args.warmup):
        sess.run(None, feed)
    wall_s, kineto_trace = [], None
    if with_gpu:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function
        torch.cuda.set_device(args.device_id)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.loops):
                t = time.perf_counter()
                with record_function(RUN_MARKER):
                    sess.run(None, feed)
                wall_s.append(time.perf_counter() - t)
        fd, tmp = tempfile.mkstemp(suffix=".json", prefix="kineto_")
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            kineto_trace = json.loads(Path(tmp).read_text())
        finally:
            os.unlink(tmp)
    else:
        for _ in range(args.loops):
            t = time.perf_counter()
            sess.run(None, feed)
            wall_s.append(time.perf_counter() - t)
    start_ns = sess.get_profiling_start_time_ns()
    profile_path = Path(sess.end_profiling())
    return {"profile_path": profile_path, "ort_start_ns": start_ns, "wall_s": wall_s,
            "kineto_trace": kineto_trace, "providers": sess.get_providers()}


def print_gpu_report(gpu: dict, align: dict) -> None:
    clock = "ok" if align["runs_inside_marker"] == align["runs_checked"] else "SUSPECT"
    print(f"\nGPU ({align['runs_inside_marker']}/{align['runs_checked']} timed model_run events inside their "
          f"torch.profiler marker: clock mapping {clock})")
    print(f"{'node':<40} {'op':<18} {'host_us':>9} {'gpu_us':>9} {'ops':>5} {'gpu_idle_us':>11} {'launch->gpu_us':>14}")
    for n in gpu["nodes"]:
        q = "-" if n["launch_to_gpu_start_us"] is None else f"{n['launch_to_gpu_start_us']:.1f}"
        print(f"{n['node'][:40]:<40} {n['op'][:18]:<18} {n['host_us']:9.1f} {n['gpu_us']:9.1f} "
              f"{n['gpu_ops_per_run']:5.1f} {n['gpu_idle_before_us']:11.1f} {q:>14}")
    c = gpu["counts"]
    print(f"GPU ops recorded {c['gpu_ops_total']}, in timed runs {c['gpu_ops_in_timed_runs']}, "
          f"without a launch record {c['gpu_ops_without_launch_record']}")
    m = gpu["model"]
    if m:
        print(f"Execute+sync window = {m['window_us'] / 1000:.5f} ms: GPU busy {m['busy_us'] / 1000:.5f} ms, "
              f"idle between ops {m['idle_us'] / 1000:.5f} ms, idle after last op {m['tail_idle_us'] / 1000:.5f} ms")
        print(f"GPU busy in the whole model_run = {m['gpu_busy_all_us'] / 1000:.5f} ms "
              f"of {m['model_run_us'] / 1000:.5f} ms")
    print(f"verdict: {gpu['verdict']['text']}")


def main() -> int:
    p = argparse.ArgumentParser(description="ORT profiler breakdown of session.run (+ GPU kernels on CUDA)")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--warmup", type=int, default=50, help="untimed runs first (profiled, then dropped)")
    p.add_argument("--loops", type=int, default=50, help="timed runs averaged in the breakdown")
    p.add_argument("--profile-prefix", default=str(paths.home() / "debug" / "traces" / "ort_profile_kernel_sum"),
                   help="ORT profile file prefix (ORT appends _<date>.json)")
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument("--trace-out", type=Path, help="merged Chrome trace (ORT + GPU), opens in ui.perfetto.dev")
    p.add_argument("--json-out", type=Path, help="the printed breakdown as JSON")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args()
    if args.warmup < 0 or args.loops < 1:
        raise HaseError("--warmup must be >= 0 and --loops >= 1")
    log = get_logger("debug_profiler", args.log_level)
    device = resolve_device(args.device, args.device_id)
    with_gpu, why = torch_cuda_ok(device)

    res = run_profiled(args, device, with_gpu, log)
    events = load_profile_events(res["profile_path"])
    runs = parse_profile(events, skip_runs=args.warmup)
    if len(runs) != args.loops:
        log.warning("profile holds %d timed runs, expected %d", len(runs), args.loops)
    summary = summarize(runs)
    wall_us = statistics.fmean(res["wall_s"]) * 1e6

    print(f"profile: {res['profile_path']}")
    print(f"format: {FORMAT_TEXT[summary['format']]}")
    print(f"device: {device} ({res['providers'][0]}), {summary['runs']} timed runs after {args.warmup} warmup, "
          f"{summary['n_nodes']} nodes per run")
    for line in format_breakdown(summary):
        print(line)
    print(f"{'session.run wall (python)':<32} = {wall_us / 1000:10.5f} ms")
    out = {"model": str(args.model), "device": device, "warmup": args.warmup, "loops": args.loops,
           "profile": str(res["profile_path"]), "summary": summary, "session_run_wall_us": wall_us,
           "provenance": provenance(device, args.device_id)}

    if with_gpu:
        kin = kineto_events(res["kineto_trace"], res["ort_start_ns"])
        ops = attribute_gpu_ops(runs, kin["gpu_ops"], kin["launches"])
        gpu = gpu_breakdown(runs, ops)
        align = marker_alignment(runs, kin["markers"])
        if not kin["launches"]:
            log.warning("torch.profiler recorded no CUDA launch events: GPU ops cannot be assigned to nodes")
        print_gpu_report(gpu, align)
        out.update(gpu=gpu, clock_alignment=align)
    else:
        ops, kin = [], {"launches": {}}
        print(f"\nGPU breakdown skipped: {why}")
        out["gpu"] = None

    if args.trace_out:
        gpu_label = f"GPU {args.device_id}" if with_gpu else "GPU (not profiled)"
        trace = merged_chrome_trace(events, runs, ops, kin["launches"], gpu_label)
        paths.atomic_write_text(args.trace_out, json.dumps(trace) + "\n")
        print(f"merged trace: {args.trace_out}")
    if args.json_out:
        out["runs"] = [{k: v for k, v in r.items() if k != "nodes"} for r in runs]
        paths.atomic_write_text(args.json_out, json.dumps(out, indent=2, default=str) + "\n")
        print(f"json: {args.json_out}")
    return 0


if __name__ == "__main__":
    run_main(main)
