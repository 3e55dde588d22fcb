"""Phase 4 (kernel space): measure many kernels per session, packed as disjoint subgraphs of one model.

  python benchmark/multi_kernel_runner.py --device cpu --record ort_analysis/ort_kernel_record/sampled/kspace_s0.cpu.json
      [--record 'ort_analysis/ort_kernel_record/*.cpu.json'] [--set chunk=192] [--max-minutes 8]

The collector (collector.py) builds one session per kernel: 4.3 kernel measurements/s on the H200,
most of it session creation. Here `chunk` kernels of the records (phase 2 zoo records and/or the
sampler's, kernel_model/kernel_sampler.py) become ONE ONNX model whose nodes share nothing: each node is
kernel_builder.kernel_to_onnx's node with its own inputs, weights and outputs, named by its Kernel_ID.
One session per pack: `warmup` runs, then `runs` runs with ORT's profiler on (one session.run per timed
loop), and each kernel's time is taken from its own node:
  CPU EP   ORT's profiler '<node>_kernel_time' events: the node's compute (as trace_run.py on CPU);
  CUDA EP  the same runs under CUPTI (torch.profiler, trace_run.cupti_pass): every GPU op goes to the
           node whose host window holds its launch (debug/ort_profiler_kernel_sum.attribute_gpu_ops,
           the correlation-id attribution trace_run uses); a kernel's time is the sum of its ops' GPU
           durations in a run. ORT's own '_kernel_time' (host dispatch there) is kept as host_us.
Then, profiler off, `wall_loops` plain runs of the pack give pack_wall_ms (Σ kernels + ORT's per-run cost).

What the label is: the kernel's node time inside a session (GPU time on CUDA), NOT the standalone
session.run time of collector.py's kernels.csv (which adds a session's fixed cost and, in e2e mode,
copies): phase 5 trains on it with --set data_csv=<this kernels.csv> --set target=latency_node_ms_median
(latency_ms is the same median). Mixing it with standalone rows in one fit would mix two quantities;
measure the zoo's records through this runner too (pass them with --record) for one consistent set.
Caveat of packing: a kernel's inputs are not in cache from its own previous run (the other kernels ran
in between), as they are in a standalone loop: nearer to a kernel inside a real model.

Output, benchmark/results/<device slug>/<out>/: kernels.csv (collector.py's kernel columns, one row per
kernel with its own Kernel_ID, mode 'node', plus timing/host_us/pack columns), throughput.json (kernel
measurements/s, seconds per phase, per invocation), resolved_config.json. Resumable: Kernel_IDs with
status ok in kernels.csv are skipped; a pack's rows are written together once it is measured. A pack
that fails to build or run is measured kernel by kernel; a kernel that still fails is a status=failed row.
Idle only (stress_level 0, load idle): measuring under loads is collector.py's job for now.
"""
import json
import math
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import compose, helper  # noqa: E402

from hase.benchmark.collector import DEFAULTS as COLLECTOR_DEFAULTS  # noqa: E402
from hase.benchmark.collector import KERNEL_COLS, RUN_COLS, TAIL_COLS, CsvLog, kernel_features, latency_cols  # noqa: E402
from hase.benchmark.collector import lock_dir, one_line, read_rows  # noqa: E402
from hase.benchmark.gpu_metrics import make_source, snapshot  # noqa: E402
from hase.benchmark.ort_kernel_runner import make_runner, stats, time_loop  # noqa: E402
from hase.debug.ort_profiler_kernel_sum import attribute_gpu_ops, kineto_events, load_profile_events, parse_profile  # noqa: E402
from hase.kernel_model.kernel_builder import kernel_filename, kernel_id, kernel_to_onnx, load_record  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import dummy_feed  # noqa: E402
from hase.utils.ort_session import device_slug, make_session, provenance, resolve_device  # noqa: E402
from hase.utils.progress import progress  # noqa: E402
from hase.utils.tables import read_csv_checked  # noqa: E402

CONFIG = paths.REPO / "benchmark" / "multi_kernel.yaml"
MODE = "node"
EXTRA_COLS = ["timing", "host_us_median", "pack", "pack_size", "pack_wall_ms", "source", "gpu_ops_per_run",
              "gpu_main_kernel"]
MAIN_KERNEL_CHARS = 120   # CUTLASS/cuDNN names run to 1,000+ chars: the head names the algorithm family
KERNELS_CSV, THROUGHPUT_JSON = "kernels.csv", "throughput.json"
TIMING = {"cpu": "ort_profiler_node", "cuda": "cupti_gpu"}
IDLE = {"stress_level": 0, "load": "idle"}
DEFAULTS = {"device": "auto", "device_id": 0, "records": [], "chunk": 192, "max_pack_mb": 8000, "warmup": 3,
            "runs": 10, "wall_loops": 10, "io": "device", "opt_level": "disable", "threads": 0, "seed": 0,
            "max_kernels": 0, "max_minutes": 0, "only_ids": "", "skip_categories": ["transfer"], "out": "kernel_space",
            "bg_sample_ms": 20, "cudnn_conv_algo_search": "EXHAUSTIVE", "prefetch": True,
            "metrics": json.loads(json.dumps(COLLECTOR_DEFAULTS["metrics"]))}


# ---- pure parts ------------------------------------------------------------------------------------

def gather_kernels(records: list, skip_categories=()) -> list:
    """Unique kernels of the records, first occurrence kept: [(kernel, opsets, source)]."""
    seen, out = set(), []
    for rec in records:
        for k in rec["kernels"]:
            kid = kernel_id(k)
            if kid in seen or k["category"] in skip_categories:
                continue
            seen.add(kid)
            out.append((k, rec["opsets"], rec.get("model", "")))
    return out


def kernel_mb(k: dict) -> float:
    return (float(k.get("bytes_read") or 0) + float(k.get("bytes_written") or 0)) / 1e6


def plan_packs(items: list, chunk: int, max_pack_mb: float = 0) -> list:
    """Packs of at most `chunk` kernels and (max_pack_mb > 0) at most max_pack_mb of tensors (inputs,
    weights, outputs: all live at once in a pack); a kernel larger than that is a pack of its own.
    Kernels of records with other opsets never share a pack."""
    groups = {}
    for it in items:
        groups.setdefault(json.dumps(it[1], sort_keys=True), []).append(it)
    packs = []
    for group in groups.values():
        cur, mb = [], 0.0
        for it in group:
            size = kernel_mb(it[0])
            if cur and (len(cur) >= chunk or (max_pack_mb and mb + size > max_pack_mb)):
                packs.append(cur)
                cur, mb = [], 0.0
            cur.append(it)
            mb += size
        if cur:
            packs.append(cur)
    return packs


def pack_kernels(kernels: list, opsets: dict, seed: int = 0) -> onnx.ModelProto:
    """One model of disjoint one-node subgraphs: kernel j's tensors are prefixed 'k<j>_', its node is
    named by its Kernel_ID (the name ORT's profiler reports)."""
    nodes, inputs, outputs, inits = [], [], [], []
    for j, k in enumerate(kernels):
        m = kernel_to_onnx(k, opsets, seed + j)
        compose.add_prefix(m, f"k{j}_", inplace=True)
        g = m.graph
        g.node[0].name = kernel_id(k)
        nodes += list(g.node)
        inputs += list(g.input)
        outputs += list(g.output)
        inits += list(g.initializer)
    graph = helper.make_graph(nodes, "hase_pack", inputs, outputs, initializer=inits)
    imports = [helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=imports, producer_name="hase.multi_kernel_runner")
    model.ir_version = 8
    return model


def node_times_cpu(runs: list) -> dict:
    """{node: [its '_kernel_time' us in each run]} from parse_profile runs (a node run twice: summed)."""
    out = {}
    for i, r in enumerate(runs):
        for nd in r["nodes"]:
            lst = out.setdefault(nd["name"], [0.0] * len(runs))
            lst[i] += nd["kernel_us"]
    return out


def node_times_gpu(runs: list, ops: list) -> dict:
    """{node: [Σ GPU op duration (us) in each run]} from attribute_gpu_ops' records: an op counts for
    the node whose host window holds its launch; ops of buckets ('(before Execute)', copies, no launch
    record) count for no kernel. Nodes of the runs that launched nothing get zeros."""
    out = {nd["name"]: [0.0] * len(runs) for r in runs for nd in r["nodes"]}
    for o in ops:
        if o.get("run") is None or o["owner"] not in out:
            continue
        out[o["owner"]][o["run"]] += o["dur_us"]
    return out


def node_ops_summary(runs: list, ops: list) -> dict:
    """{node: (median GPU ops per run, name of the op with the most GPU time over the runs)} from
    attribute_gpu_ops' records: which kernels cuDNN/cuBLAS chose for a node, and how many (a grouped conv run
    as one launch per group shows as many ops)."""
    counts, time_by_name = {}, {}
    for o in ops:
        if o.get("run") is None or o["owner"].startswith("("):
            continue
        counts.setdefault(o["owner"], [0] * len(runs))[o["run"]] += 1
        names = time_by_name.setdefault(o["owner"], {})
        names[o["name"]] = names.get(o["name"], 0.0) + o["dur_us"]
    return {nd: (float(np.median(c)), max(time_by_name[nd].items(), key=lambda kv: kv[1])[0][:MAIN_KERNEL_CHARS])
            for nd, c in counts.items()}


def only_ids(path) -> set:
    """Kernel_IDs to measure from a CSV with a Kernel_ID column (re-measuring chosen kernels of a record);
    None when no file is given."""
    if not path:
        return None
    return set(read_csv_checked(Path(path), ["Kernel_ID"], "Kernel_ID list", prefix="only_ids: ")["Kernel_ID"].astype(str))


def kernel_row(k: dict, times_us: list, host_us: list, device: str, pack: int, pack_size: int,
               pack_wall_ms: float, source: str) -> dict:
    """A kernels.csv row (collector.py's kernel columns) of one kernel from its per-run times (us)."""
    st = stats([t / 1e3 for t in times_us])
    row = {**kernel_features({**k, "file": kernel_filename(k)}), **IDLE, "error": ""}
    for s in ("mean", "median", "p10", "p90"):
        row[f"latency_{MODE}_ms_{s}"] = st[f"{s}_ms"]
    row[f"n_{MODE}"] = st["n"]
    row["latency_ms"] = st["median_ms"]
    no_work = device == "cuda" and not any(t > 0 for t in times_us)
    row["status"] = "no_gpu_work" if no_work else "ok"
    row.update({"timing": TIMING[device], "host_us_median": float(np.median(host_us)) if host_us else math.nan,
                "pack": pack, "pack_size": pack_size, "pack_wall_ms": pack_wall_ms, "source": source})
    return row


def failed_row(k: dict, err: str, pack: int, source: str, device: str) -> dict:
    return {**kernel_features({**k, "file": kernel_filename(k)}), **IDLE, "status": "failed", "error": err,
            "timing": TIMING[device], "pack": pack, "pack_size": 1, "source": source}


def columns(fields) -> list:
    return (KERNEL_COLS + RUN_COLS + latency_cols([MODE]) + list(fields) + [f"bg_{f}" for f in fields]
            + TAIL_COLS + EXTRA_COLS)


def done_ids(path: Path) -> set:
    return {r["Kernel_ID"] for r in read_rows(path) if r.get("status") in ("ok", "no_gpu_work")}


# ---- measuring -------------------------------------------------------------------------------------

def build_blob(items: list, seed: int) -> tuple:
    """(serialized packed model, seconds it took)."""
    t = time.perf_counter()
    blob = pack_kernels([it[0] for it in items], items[0][1], seed).SerializeToString()
    return blob, time.perf_counter() - t


def measure_pack(items: list, device: str, cfg: dict, source, built=None) -> dict:
    """Build (unless `built` = build_blob's result), run and attribute one pack. Returns {rows per kernel
    id: (times, host)}, cost, metrics."""
    cost = {}
    kernels = [it[0] for it in items]
    blob, cost["build_s"] = built if built is not None else build_blob(items, cfg["seed"])
    tmp = Path(tempfile.mkdtemp(prefix="hase_pack_"))
    try:
        t = time.perf_counter()
        cuda_opts = {"cudnn_conv_algo_search": cfg["cudnn_conv_algo_search"]} if device == "cuda" else None
        sess = make_session(blob, device, cfg["opt_level"], profile_prefix=tmp / "ort", threads=cfg["threads"],
                            device_id=cfg["device_id"], cuda_options=cuda_opts)
        feed = dummy_feed(sess, seed=cfg["seed"])
        fn = make_runner(sess, feed, cfg["io"], cfg["device_id"])
        cost["session_s"] = time.perf_counter() - t
        bg = snapshot(source, cfg["bg_sample_ms"] / 1e3)
        t = time.perf_counter()
        for _ in range(int(cfg["warmup"])):
            fn()
        cost["warmup_s"] = time.perf_counter() - t
        t = time.perf_counter()
        start_ts = time.time()
        kin = None
        if device == "cuda":
            from hase.benchmark.trace_run import cupti_pass, rename_marker
            kin = rename_marker(cupti_pass(fn, int(cfg["runs"]), cfg["device_id"]))
        else:
            for _ in range(int(cfg["runs"])):
                fn()
        end_ts = time.time()
        start_ns = sess.get_profiling_start_time_ns()
        prof = Path(sess.end_profiling())
        cost["profiled_s"] = time.perf_counter() - t
        t = time.perf_counter()
        runs = parse_profile(load_profile_events(prof), skip_runs=int(cfg["warmup"]))
        host = node_times_cpu(runs)
        if device == "cuda":
            kp = kineto_events(kin, start_ns)
            ops = attribute_gpu_ops(runs, kp["gpu_ops"], kp["launches"])
            times, op_info = node_times_gpu(runs, ops), node_ops_summary(runs, ops)
        else:
            times, op_info = host, {}
        cost["parse_s"] = time.perf_counter() - t
        t = time.perf_counter()
        wall = time_loop(fn, loops=int(cfg["wall_loops"])) if cfg["wall_loops"] else {"median_ms": math.nan}
        cost["wall_s"] = time.perf_counter() - t
        window = source.window(start_ts, end_ts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    missing = [kernel_id(k) for k in kernels if kernel_id(k) not in times]
    if len(kernels) == 1 and missing and times:
        # ORT ran the node as other nodes (CPU EP inlines HardSwish's function body: HardSigmoid + Mul):
        # alone in its pack, every node of the run is this kernel's
        kid = missing[0]
        times = {kid: [sum(v[i] for v in times.values()) for i in range(len(runs))]}
        host = {kid: [sum(v[i] for v in host.values()) for i in range(len(runs))]}
        missing, summed = [], [kid]
    else:
        summed = []
    return {"missing": missing, "summed": summed, "times": times, "host": host, "ops": op_info, "wall_ms": wall["median_ms"],
            "cost": cost, "bg": bg, "window": window,
            "start_ts": start_ts, "end_ts": end_ts}


def measure_items(items: list, pack_no: int, device: str, cfg: dict, source, tail: dict, log, built=None) -> tuple:
    """Rows of one pack; on a pack failure, each kernel alone (pack of 1). Returns (rows, cost)."""
    try:
        res = measure_pack(items, device, cfg, source, built)
    except Exception as e:  # one bad kernel (or OOM) must not lose the pack: measure them one by one
        if len(items) == 1:
            # a kernel alone gets one more try: on a loaded CPU ORT's profile of a few-us run sometimes
            # lacks a run's Execute event (seen 1 in 12 runs next to two CPU burners); a bad kernel fails again
            try:
                res = measure_pack(items, device, cfg, source)
            except Exception as e2:
                k, _, src = items[0]
                return [{**failed_row(k, one_line(e2), pack_no, src, device), **tail}], {}
            return rows_of(items, res, pack_no, device, cfg, source, tail, log)
        log.warning("pack %d (%d kernels) failed (%s); measuring its kernels one by one", pack_no, len(items),
                    one_line(e)[:160])
        rows, cost = [], {}
        for it in items:
            r, c = measure_items([it], pack_no, device, cfg, source, tail, log)
            rows += r
            for kk, v in c.items():
                cost[kk] = cost.get(kk, 0.0) + v
        return rows, cost
    return rows_of(items, res, pack_no, device, cfg, source, tail, log)


def rows_of(items: list, res: dict, pack_no: int, device: str, cfg: dict, source, tail: dict, log) -> tuple:
    """Rows of a measured pack (measure_pack's result); kernels ORT ran as other nodes are measured alone."""
    rows, cost = [], dict(res["cost"])
    for k, _, src in items:
        kid = kernel_id(k)
        if kid in res["missing"]:   # not a node of the profile: measured alone, below
            continue
        row = kernel_row(k, res["times"][kid], res["host"].get(kid, []), device, pack_no, len(items),
                         res["wall_ms"], src)
        if kid in res.get("ops", {}):
            row["gpu_ops_per_run"], row["gpu_main_kernel"] = res["ops"][kid]
        row.update({f"bg_{f}": v for f, v in res["bg"].items()})
        row.update(res["window"])
        row.update({"start_ts": f"{res['start_ts']:.6f}", "end_ts": f"{res['end_ts']:.6f}", **tail})
        if kid in res["summed"]:
            row["timing"] += "_sum"   # the sum of the nodes ORT ran for it
        rows.append(row)
    alone = [it for it in items if kernel_id(it[0]) in res["missing"]]
    if alone and len(items) > 1:
        log.info("pack %d: %d kernels are no node of ORT's profile (ORT ran them as other nodes); measured alone",
                 pack_no, len(alone))
        for it in alone:
            r, c = measure_items([it], pack_no, device, cfg, source, tail, log)
            rows += r
            for kk, v in c.items():
                cost[kk] = cost.get(kk, 0.0) + v
    elif alone:
        k, _, src = alone[0]
        rows.append({**failed_row(k, "ORT's profile has no node of this kernel", pack_no, src, device), **tail})
    return rows, cost


def throughput_summary(n_ok: int, n_failed: int, n_packs: int, wall_s: float, cost: dict, rows: list) -> dict:
    sums = [r for r in rows if r.get("status") == "ok"]
    packs = {}
    for r in sums:
        p = packs.setdefault(r["pack"], {"sum_ms": 0.0, "wall_ms": r["pack_wall_ms"]})
        p["sum_ms"] += r["latency_ms"]
    ratios = [p["wall_ms"] / p["sum_ms"] for p in packs.values()
              if p["sum_ms"] > 0 and isinstance(p["wall_ms"], float) and math.isfinite(p["wall_ms"])]
    return {"kernels_measured": n_ok, "kernels_failed": n_failed, "packs": n_packs, "wall_s": round(wall_s, 3),
            "kernels_per_s": round(n_ok / wall_s, 3) if wall_s > 0 else None,
            "seconds": {k: round(v, 3) for k, v in cost.items()},
            "pack_wall_over_kernel_sum_median": float(np.median(ratios)) if ratios else None}


def write_throughput(path: Path, entry: dict) -> dict:
    data = {"invocations": []}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = {"invocations": []}
    data["invocations"].append(entry)
    data["last"] = entry
    paths.atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return data


def validate(cfg: dict) -> None:
    for k in ("chunk", "runs"):
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise HaseError(f"{k} must be a whole number >= 1, got {v!r}")
    for k in ("warmup", "wall_loops", "max_kernels", "threads", "bg_sample_ms", "max_minutes", "max_pack_mb"):
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise HaseError(f"{k} must be a number >= 0, got {v!r}")
    if not isinstance(cfg["prefetch"], bool):
        raise HaseError(f"prefetch must be true or false, got {cfg['prefetch']!r}")
    if cfg["io"] not in ("e2e", "device"):
        raise HaseError(f"io must be e2e or device, got {cfg['io']!r}")


def main() -> int:
    p = base_parser("Measure many kernels per session: packed disjoint subgraphs, per-node attribution", "benchmark")
    p.set_defaults(config=CONFIG)
    p.add_argument("--record", action="append", default=None, help="kernel record JSON or glob (repeatable)")
    p.add_argument("--max-minutes", type=float, default=None, help="stop between packs after this long; rerun continues")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    if args.max_minutes is not None:
        cfg["max_minutes"] = args.max_minutes
    if args.record:
        cfg["records"] = list(args.record)
    validate(cfg)
    log = get_logger("multi_kernel", args.log_level)
    if not cfg["records"]:
        raise HaseError("no records (--record PATH, or --set records=[...]): the sampler's and/or the zoo's")
    device = resolve_device(cfg["device"], cfg["device_id"])
    records = []
    for rp in paths.expand_globs(cfg["records"]):
        rec = load_record(rp)
        if rec.get("device") != device:
            raise HaseError(f"record is for {rec.get('device')}, target is {device}", rp)
        records.append(rec)
    items = gather_kernels(records, cfg["skip_categories"])
    source = make_source(cfg["metrics"], device, cfg["device_id"])
    source.check()
    fields = source.fields
    out_dir = paths.bench_results_dir() / device_slug(device, cfg["device_id"]) / cfg["out"]
    lock = lock_dir(out_dir)  # noqa: F841 (held until exit)
    csv_path = out_dir / KERNELS_CSV
    klog = CsvLog(csv_path, columns(fields))
    done = done_ids(csv_path)
    todo = [it for it in items if kernel_id(it[0]) not in done]
    wanted = only_ids(cfg["only_ids"])
    if wanted is not None:
        todo = [it for it in todo if kernel_id(it[0]) in wanted]
    if cfg["max_kernels"]:
        todo = todo[:int(cfg["max_kernels"])]
    packs = plan_packs(todo, int(cfg["chunk"]), float(cfg["max_pack_mb"]))
    prov = provenance(device, cfg["device_id"])
    save_resolved(cfg, out_dir, extra={"provenance": prov, "kernel_columns": columns(fields)})
    tail = {"gpu_name": prov.get("gpu_name", ""), "gpu_driver": prov.get("gpu_driver", ""),
            "ort_version": prov["ort_version"], "device": device}
    log.info("%d unique kernels in %d records, %d done, %d to measure in %d packs of <= %d -> %s", len(items),
             len(records), len(items) - len([it for it in items if kernel_id(it[0]) not in done]), len(todo),
             len(packs), cfg["chunk"], csv_path)
    deadline = time.monotonic() + cfg["max_minutes"] * 60 if cfg["max_minutes"] else math.inf
    t0 = time.perf_counter()
    cost, all_rows, n_packs = {}, [], 0
    # CUDA: the next pack is built (Python + protobuf, CPU only) while this one runs; its GPU times do not
    # depend on the host. CPU EP: never (the node times there ARE the host's compute)
    pool = ThreadPoolExecutor(max_workers=1) if cfg["prefetch"] and device == "cuda" else None
    source.start()
    try:
        with progress(total=len(todo), desc="kernels", unit="kernel") as bar:
            nxt = pool.submit(build_blob, packs[0], cfg["seed"]) if pool and packs else None
            for i, pack in enumerate(packs):
                if time.monotonic() >= deadline:
                    log.info("time budget reached after %d of %d packs; run again to continue", i, len(packs))
                    break
                built = None
                if nxt is not None:
                    try:
                        built = nxt.result()
                    except Exception:   # noqa: BLE001 (measure_items builds it again and reports per kernel)
                        built = None
                    nxt = pool.submit(build_blob, packs[i + 1], cfg["seed"]) if i + 1 < len(packs) else None
                rows, c = measure_items(pack, i, device, cfg, source, tail, log, built)
                for r in rows:
                    klog.write({k: v for k, v in r.items() if not k.startswith("_")})
                for k, v in c.items():
                    cost[k] = cost.get(k, 0.0) + v
                all_rows += rows
                n_packs += 1
                el = time.perf_counter() - t0
                bar.update(len(pack))
                bar.set_postfix_str(f"{sum(r['status'] != 'failed' for r in all_rows) / el:.1f} kernels/s")
    finally:
        if pool:
            pool.shutdown(wait=False, cancel_futures=True)
        source.stop()
        klog.close()
    wall = time.perf_counter() - t0
    n_ok = sum(r["status"] in ("ok", "no_gpu_work") for r in all_rows)
    n_failed = sum(r["status"] == "failed" for r in all_rows)
    entry = {"device": device, "gpu_name": prov.get("gpu_name", ""), "ort_version": prov["ort_version"],
             "date_utc": prov.get("date_utc", ""), "chunk": cfg["chunk"], "runs": cfg["runs"], "warmup": cfg["warmup"],
             "prefetch": bool(cfg["prefetch"] and device == "cuda"),
             "timing": TIMING[device], **throughput_summary(n_ok, n_failed, n_packs, wall, cost, all_rows)}
    write_throughput(out_dir / THROUGHPUT_JSON, entry)
    log.info("%d kernels measured (%d failed) in %d packs, %.1f s: %s kernel measurements/s; seconds %s",
             n_ok, n_failed, n_packs, wall, entry["kernels_per_s"], entry["seconds"])
    return 0


if __name__ == "__main__":
    run_main(main)
