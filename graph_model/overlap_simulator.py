"""Phase 6.2: what ORT really does per session.run, as a two-resource timeline.

  python graph_model/overlap_simulator.py --record X.json --times T.json [--trace out.json]

CUDA EP (seeds 000/001): ORT's sequential executor walks the kernels in topological order on the
host; each node costs host time h_i (shape checks, allocation, the launch) and queues its kernel on
the one CUDA stream, which runs the queue in order (GPU time g_i). So

    dispatch_end_i = dispatch_end_{i-1} + h_i
    gpu_start_i    = max(dispatch_end_i + wait, gpu_end_{i-1})  # wait for the launch, or for the stream
    gpu_end_i      = gpu_start_i + g_i

and session.run = fixed overhead + H2D input copy + timeline end + D2H output copy, each copy
a*bytes + b. Small kernels make a model dispatch-bound (total ~ sum h), big ones GPU-bound
(total ~ sum g). A MemcpyToHost node blocks the host until the stream reaches it; a node placed on
the CPU EP runs on the host (h_i + g_i there). Independent branches do not overlap: one stream.

CPU EP: host and compute are the same thread: total = overhead + sum(h_i + g_i).

The critical path is traced back from the end through what set each event's start; its segments
say which resource bounds each stretch (host, gpu, copy). Times are in us inside, total in ms.
"""
import json
import math
import numbers
from pathlib import Path


import networkx as nx  # noqa: E402

from hase.graph_model.dag_critical_path import (DEFAULTS, build_dag, execution_order, load_dag,  # noqa: E402
                                           load_record)
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402

PARAMS = dict(DEFAULTS["overlap"])
RESOURCE = {"overhead": "host", "dispatch": "host", "cpu_node": "host", "kernel": "gpu", "h2d": "copy", "d2h": "copy"}
TID = {"host": 1, "gpu": 2}
CPU_EP = "CPUExecutionProvider"


def as_dag(dag_or_record) -> nx.DiGraph:
    """A DAG, a record dict, or a path to either's JSON."""
    if isinstance(dag_or_record, nx.DiGraph):
        return dag_or_record
    if isinstance(dag_or_record, dict):
        return build_dag(dag_or_record)
    path = Path(dag_or_record)
    data = paths.read_json(path, "record or DAG")
    return build_dag(load_record(path)) if isinstance(data, dict) and "kernels" in data else load_dag(path)


def per_node(values, nodes: list, what: str) -> dict:
    """{node: us} from a mapping, one number for every node, or None (zero)."""
    if values is None:
        return {n: 0.0 for n in nodes}
    if isinstance(values, numbers.Number):
        values = {n: values for n in nodes}
    out = {}
    for n in nodes:
        if n not in values:
            raise HaseError(f"{what}: no time for kernel '{n}'")
        v = float(values[n])
        if not math.isfinite(v) or v < 0:
            raise HaseError(f"{what}: time of kernel '{n}' is not a non-negative number: {v}")
        out[n] = v
    return out


def resolve_params(params, dag: nx.DiGraph) -> dict:
    p = dict(PARAMS)
    for k, v in (params or {}).items():
        if k not in PARAMS:
            raise HaseError(f"unknown simulator parameter '{k}' (known: {', '.join(PARAMS)})")
        p[k] = v
    if p["ep"] == "auto":
        p["ep"] = dag.graph.get("device") or "cuda"
    if p["ep"] not in ("cpu", "cuda"):
        raise HaseError(f"simulator ep must be cpu, cuda or auto, got '{p['ep']}'")
    return p


def _event(events, name, kind, start, dur, cause, node=None):
    events.append({"name": name, "kind": kind, "track": "gpu" if RESOURCE[kind] in ("gpu", "copy") else "host",
                   "resource": RESOURCE[kind], "start_us": start, "end_us": start + dur, "node": node,
                   "cause": cause})
    return len(events) - 1


def _timeline_cuda(dag, order, h, g, p) -> tuple:
    ev, bound = [], {}
    i_ov = _event(ev, "session overhead", "overhead", 0.0, p["session_overhead_us"], None)
    h2d = p["h2d_us_per_byte"] * dag.graph.get("input_bytes", 0) + p["h2d_fixed_us"]
    # pageable numpy input: a synchronous copy, host and stream both wait for it
    last_host = last_gpu = _event(ev, "H2D inputs", "h2d", ev[i_ov]["end_us"], h2d, i_ov)
    cuda_record = dag.graph.get("device") == "cuda"   # a CPU record forced to ep=cuda: all on the GPU
    for n in order:
        node = dag.nodes[n]
        if cuda_record and node.get("ep") == CPU_EP:   # CPU-placed node in a CUDA session: runs on the host
            last_host = _event(ev, n, "cpu_node", ev[last_host]["end_us"], h[n] + g[n], last_host, n)
            bound[n] = "host"
            continue
        i_d = _event(ev, n, "dispatch", ev[last_host]["end_us"], h[n], last_host, n)
        host_first = ev[i_d]["end_us"] >= ev[last_gpu]["end_us"]   # the stream waited for this launch
        cause = i_d if host_first else last_gpu
        # under a neighbour, a launch onto an idle stream first waits for the neighbour's kernel
        wait = p["launch_wait_us"] if host_first else 0.0
        i_k = _event(ev, n, "kernel", ev[cause]["end_us"] + wait, g[n], cause, n)
        bound[n] = "host" if host_first else "gpu"
        last_gpu = i_k
        # a copy to host synchronises: the host waits until the stream has reached it
        last_host = i_k if node.get("op_type") == "MemcpyToHost" else i_d
    d2h = p["d2h_us_per_byte"] * dag.graph.get("output_bytes", 0) + p["d2h_fixed_us"]
    cause = last_gpu if ev[last_gpu]["end_us"] >= ev[last_host]["end_us"] else last_host
    _event(ev, "D2H outputs", "d2h", ev[cause]["end_us"], d2h, cause)
    return ev, bound


def _timeline_cpu(order, h, g, p) -> tuple:
    ev = []
    last = _event(ev, "session overhead", "overhead", 0.0, p["session_overhead_us"], None)
    for n in order:
        last = _event(ev, n, "cpu_node", ev[last]["end_us"], h[n] + g[n], last, n)
    return ev, {n: "host" for n in order}


def trace_critical_path(events: list) -> list:
    """Walk back from the last-ending event through each event's cause; merge runs of the same
    resource into segments (they tile [0, total] because every start is its cause's end, except
    for a launch wait behind a neighbour, which stays a gap before its kernel)."""
    if not events:
        return []
    i = max(range(len(events)), key=lambda j: (events[j]["end_us"], j))
    chain = []
    while i is not None:
        events[i]["critical"] = True
        chain.append(events[i])
        i = events[i]["cause"]
    segments = []
    for e in reversed(chain):
        if segments and segments[-1]["resource"] == e["resource"]:
            s = segments[-1]
            s["end_us"] = e["end_us"]
        else:
            s = {"resource": e["resource"], "start_us": e["start_us"], "end_us": e["end_us"], "nodes": [],
                 "kinds": []}
            segments.append(s)
        if e["node"] is not None:
            s["nodes"].append(e["node"])
        if e["kind"] not in s["kinds"]:
            s["kinds"].append(e["kind"])
    for s in segments:
        s["dur_ms"] = (s["end_us"] - s["start_us"]) / 1e3
    return segments


def simulate(dag_or_record, host_us, gpu_us=None, params=None) -> dict:
    """Predicted session.run of one model.

    host_us / gpu_us: {kernel id: us} (or one number for all kernels; gpu_us None = 0).
    params: overrides of config overlap (ep, session_overhead_us, h2d/d2h_us_per_byte, *_fixed_us).
    Returns total_ms, timeline (events in us), critical_path (segments: resource host|gpu|copy),
    bound_by {kernel: host|gpu}, gpu_busy_fraction (GPU kernel time / total), breakdown.
    """
    dag = as_dag(dag_or_record)
    p = resolve_params(params, dag)
    order = execution_order(dag)
    h = per_node(host_us, order, "host_us")
    g = per_node(gpu_us, order, "gpu_us")
    if p["ep"] == "cuda":
        events, bound = _timeline_cuda(dag, order, h, g, p)
    else:
        events, bound = _timeline_cpu(order, h, g, p)
    total_us = max(e["end_us"] for e in events)
    segments = trace_critical_path(events)
    gpu_sum = sum(e["end_us"] - e["start_us"] for e in events if e["kind"] == "kernel")
    by_kind = {}
    for e in events:
        by_kind[e["kind"]] = by_kind.get(e["kind"], 0.0) + e["end_us"] - e["start_us"]
    return {
        "model": dag.graph.get("model"), "ep": p["ep"], "params": p, "total_ms": total_us / 1e3,
        "timeline": events, "critical_path": segments, "bound_by": bound,
        "gpu_busy_fraction": gpu_sum / total_us if total_us > 0 else 0.0,
        "breakdown": {"overhead_ms": by_kind.get("overhead", 0.0) / 1e3, "h2d_ms": by_kind.get("h2d", 0.0) / 1e3,
                      "d2h_ms": by_kind.get("d2h", 0.0) / 1e3, "host_sum_ms": sum(h.values()) / 1e3,
                      "gpu_sum_ms": sum(g.values()) / 1e3,
                      "host_bound_kernels": sum(v == "host" for v in bound.values()),
                      "gpu_bound_kernels": sum(v == "gpu" for v in bound.values())},
    }


# ---- Chrome trace (chrome://tracing, ui.perfetto.dev) -----------------------------------------

def chrome_trace(result: dict) -> dict:
    title = f"hase predicted session.run: {result.get('model') or 'model'} ({result['ep']})"
    ev = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": title}},
          {"name": "thread_name", "ph": "M", "pid": 1, "tid": TID["host"], "args": {"name": "host dispatch"}},
          {"name": "thread_name", "ph": "M", "pid": 1, "tid": TID["gpu"],
           "args": {"name": "GPU stream" if result["ep"] == "cuda" else "(no GPU: CPU EP)"}}]
    for e in result["timeline"]:
        ev.append({"name": e["name"], "cat": e["kind"], "ph": "X", "pid": 1, "tid": TID[e["track"]],
                   "ts": round(e["start_us"], 3), "dur": round(e["end_us"] - e["start_us"], 3),
                   "args": {"kind": e["kind"], "critical": bool(e.get("critical")),
                            "bound_by": result["bound_by"].get(e["node"]) if e["node"] else None}})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"total_ms": result["total_ms"], "gpu_busy_fraction": result["gpu_busy_fraction"]}}


def write_chrome_trace(result: dict, path) -> Path:
    path = Path(path)
    paths.atomic_write_text(path, json.dumps(chrome_trace(result)) + "\n")
    return path


# ---- CLI -------------------------------------------------------------------------------------

def read_times(path) -> tuple:
    """(host_us, gpu_us) from JSON {'host_us': {id: us} | number, 'gpu_us': {id: us} | number}."""
    path = Path(path)
    data = paths.read_json(path, "times JSON")
    if not isinstance(data, dict) or "host_us" not in data:
        raise HaseError("times JSON needs 'host_us' (and 'gpu_us' on CUDA)", path)
    return data["host_us"], data.get("gpu_us")


def main() -> int:
    p = base_parser("Phase 6.2: simulate host dispatch / GPU stream overlap of one model", "graph_model")
    p.add_argument("--record", type=Path, required=True, help="kernel record (or model_DAG) JSON")
    p.add_argument("--times", type=Path, required=True, help="JSON with host_us and gpu_us per kernel id")
    p.add_argument("--trace", type=Path,
                   help="Chrome-trace output (default model_DAG/<model>.<device>[.as-<ep>].trace.json)")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("graph_model", args.log_level)
    dag = as_dag(args.record)
    host_us, gpu_us = read_times(args.times)
    res = simulate(dag, host_us, gpu_us, cfg["overlap"])
    b = res["breakdown"]
    print(f"{res['model']} ({res['ep']}): predicted session.run {res['total_ms']:.4f} ms; "
          f"sum host {b['host_sum_ms']:.4f} ms, sum gpu {b['gpu_sum_ms']:.4f} ms, "
          f"GPU busy {res['gpu_busy_fraction'] * 100:.1f}%; kernels host-bound {b['host_bound_kernels']}, "
          f"gpu-bound {b['gpu_bound_kernels']}")
    for s in res["critical_path"]:
        what = "+".join(s["kinds"]) + (f" ({len(s['nodes'])} kernels)" if s["nodes"] else "")
        print(f"  critical {s['resource']:<5} {s['start_us'] / 1e3:9.4f} -> {s['end_us'] / 1e3:9.4f} ms  {what}")
    dev = dag.graph.get("device")
    tag = "" if res["ep"] == dev else f".as-{res['ep']}"   # a record simulated on another EP
    trace = args.trace or paths.dag_dir() / f"{res['model']}.{dev}{tag}.trace.json"
    write_chrome_trace(res, trace)
    log.info("trace written to %s (open in ui.perfetto.dev)", trace)
    return 0


if __name__ == "__main__":
    run_main(main)
