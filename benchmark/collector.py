"""Phase 4.3: collect the load -> latency data set.

  python benchmark/collector.py [--device cuda] [--max-minutes 60] [--set stress_levels=[0,0.5]]

For each load (stressor level or co-runner, benchmark/config.yaml): start it, settle, then for
every kernel of kernel_model/kernel_onnx/index.json: build its session, sample the BACKGROUND
metrics while the item is idle (bg_<FIELD>), warm up, time it in each mode, and read the metrics
of the measurement window [start_ts, end_ts] (<FIELD>, over all modes' loops). One CSV row per
(item, level, load), written whole and flushed at once. Whole models (model_zoo/models) go to
models.csv, with their ORT-profiler node times in node_times.csv.

A whole model's label is measured in `label_sessions` fresh InferenceSessions, one after another
(each built, warmed up and timed on its own: cuDNN's algorithm choice and the allocator differ
between sessions). Each latency column of models.csv is the median over sessions of that session's
statistic (latency_ms: of the per-session e2e median); latency_sessions_p10_ms / _p90_ms are the
p10 / p90 of the per-session e2e medians, latency_<mode>_ms_<mean|median>_sessions_p10 / _p90 the same
spread of the other statistics, label_sessions the session count, n_<mode> the timed runs of all
sessions together. Kernels are measured in one session. An old models.csv without these columns
gets them (empty) on the next run.

Output: benchmark/results/<device slug>/{kernels.csv, models.csv, node_times.csv,
resolved_config.json} (under HASE_HOME when set). A rerun skips what is done with status ok, so
Ctrl-C, kill -9 or --max-minutes lose at most the item in flight. A kernel that fails (OOM,
unsupported op) is a status=failed row; collection goes on.
"""
import csv
import fcntl
import fnmatch
import hashlib
import json
import math
import re
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


import numpy as np  # noqa: E402

from hase.utils.progress import progress  # noqa: E402

from hase.benchmark.corunners import CORUNNERS, CorunnerLoad  # noqa: E402
from hase.benchmark.gpu_metrics import busy_reading, make_source, not_idle, snapshot, wait_idle  # noqa: E402
from hase.benchmark.ort_kernel_runner import MODES, RUNNER_DEFAULTS, make_runner, profile_node_times, time_loop  # noqa: E402
from hase.benchmark.stressor import MODES as STRESS_MODES  # noqa: E402
from hase.benchmark.stressor import Stressor, check_intensity  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import dummy_feed  # noqa: E402
from hase.utils.ort_session import device_slug, make_session, provenance, resolve_device  # noqa: E402

DEFAULTS = {
    "device": "auto", "device_id": 0,
    "stress_levels": [0, 0.3, 0.6, 0.9], "stressor_mode": "matmul",
    "stressor": {"period_ms": 20, "size": 0}, "loads": [], "settle_s": 3.0,
    "kernel_glob": "*.onnx", "max_kernels": 0, "kernel_opt_level": "disable",
    "models_glob": "*.onnx", "model_opt_level": "all", "label_sessions": 3, "profile_runs": 10, "threads": 0,
    "runner": dict(RUNNER_DEFAULTS), "modes": ["e2e", "device"], "bg_sample_ms": 100,
    "metrics": {"source": "auto", "fields": [], "sample_ms": 20, "gpm_interval_ms": 100,
                "prometheus": {"url": "http://127.0.0.1:9090", "step_s": 1.0, "timeout_s": 5.0,
                               "lag_s": 0.0, "queries": {}}},
    "max_minutes": 0, "out": "",
    # level 0 is the idle reference: its busy field (GR engine / GPU util, CPU util on CPU) must stay <= idle_busy_max
    # (a fraction; 1 = never refuse) over an idle_window_s window; else wait up to idle_wait_s, then stop
    "idle_busy_max": 0.1, "idle_window_s": 1.0, "idle_wait_s": 30.0,
    # benchmark/bandwidth.py and benchmark/calibrate_loads.py read their own sections
    "bandwidth": {"sizes_kb": [4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576],
                  "warmup": 3, "budget_ms": 200.0, "min_loops": 5, "max_loops": 2000, "max_bytes": 0},
    "calibration": {"stressor_levels": [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
                    "stressor_modes": ["matmul", "memcpy"], "corunners": {}, "sample_s": 3.0, "probe_ms": 300},
}
KERNELS_CSV, MODELS_CSV, NODES_CSV = "kernels.csv", "models.csv", "node_times.csv"
KERNEL_COLS = ["Kernel_ID", "OpType", "category", "op_type", "Input_Shape", "input_shapes", "output_shapes",
               "weight_shapes", "attributes", "N", "C", "H", "W", "Cout", "Hout", "Wout", "kernel_h", "kernel_w",
               "stride_h", "groups", "flops", "bytes_read", "bytes_written"]
MODEL_COLS = ["model", "arch", "batch", "height", "width"]
RUN_COLS = ["stress_level", "load", "status", "error"]
TAIL_COLS = ["start_ts", "end_ts", "gpu_name", "gpu_driver", "ort_version", "device"]
NODE_COLS = ["model", "stress_level", "load", "node_name", "op_name", "kernel_time_us"]
STATS = ("mean", "median", "p10", "p90")
SESSION_STATS = ("mean", "median")   # statistics whose spread across sessions models.csv keeps
NAN = math.nan


# ---- config -> plan ------------------------------------------------------------------------------
def parse_loads(cfg: dict) -> list:
    """Validated loads: [{kind, name, level, mode|corunner}]; default = stressor at stress_levels."""
    entries = cfg["loads"] or [{"kind": "stressor", "level": x} for x in cfg["stress_levels"]]
    if not isinstance(entries, list) or not entries:
        raise HaseError("loads / stress_levels must be a non-empty list")
    out = []
    for e in entries:
        if not isinstance(e, dict):
            raise HaseError(f"loads entry {e!r} must be a mapping like {{kind: stressor, level: 0.3}}")
        kind = e.get("kind", "stressor")
        if kind == "stressor":
            mode = e.get("mode", cfg["stressor_mode"])
            if mode not in STRESS_MODES:
                raise HaseError(f"unknown stressor mode '{mode}' ({' or '.join(STRESS_MODES)})")
            out.append({"kind": kind, "name": f"stressor-{mode}", "mode": mode,
                        "level": check_intensity(e.get("level"), "stress level")})
        elif kind == "corunner":
            name = e.get("name")
            if name not in CORUNNERS:
                raise HaseError(f"unknown co-runner '{name}' (one of: {', '.join(CORUNNERS)})")
            out.append({"kind": kind, "name": f"corunner-{name}", "corunner": name,
                        "level": check_intensity(e.get("knob", e.get("level")), f"co-runner '{name}' knob")})
        else:
            raise HaseError(f"unknown load kind '{kind}' (stressor or corunner)")
    return out


def make_load(load: dict, device: str, cfg: dict):
    if load["kind"] == "stressor":
        s = cfg["stressor"]
        return Stressor(load["level"], load["mode"], device, s.get("period_ms", 20), s.get("size", 0), cfg["device_id"])
    return CorunnerLoad(load["corunner"], load["level"], device, cfg["device_id"])


def load_kernel_index(device: str) -> tuple:
    d = paths.kernel_onnx_dir()
    idx_path = d / "index.json"
    if not idx_path.exists():
        raise HaseError("no kernel index (run phase 3: kernel_model/kernel_builder.py)", idx_path)
    index = paths.read_json(idx_path, "kernel index")
    if index.get("device") not in (None, device):
        raise HaseError(f"kernels were built for {index['device']}, target is {device} "
                        f"(rebuild them with kernel_builder.py --device {device})", idx_path)
    return d, index.get("kernels", {})


def select_kernels(kernels: dict, glob: str, max_kernels: int) -> list:
    picked = [e for f, e in sorted(kernels.items()) if fnmatch.fnmatch(f, glob)]
    return picked[:max_kernels] if max_kernels else picked


def select_models(glob: str) -> list:
    """[(path, {arch, batch, height, width})] of whole models; the manifest gives their shape."""
    d = paths.models_dir()
    if not glob or not d.is_dir():
        return []
    manifest = {}
    mp = d / "manifest.json"
    if mp.exists():
        try:
            manifest = json.loads(mp.read_text()).get("files", {})
        except (OSError, json.JSONDecodeError):
            manifest = {}
    out = []
    for p in sorted(d.glob(glob)):
        if ".opt." in p.name or p.suffix != ".onnx":
            continue
        m = manifest.get(p.name, {})
        rx = re.match(r"(.+)_bs(\d+)_(\d+)x(\d+)$", p.stem)
        meta = {"arch": m.get("model", rx.group(1) if rx else p.stem),
                "batch": m.get("batch", int(rx.group(2)) if rx else NAN),
                "height": m.get("height", int(rx.group(3)) if rx else NAN),
                "width": m.get("width", int(rx.group(4)) if rx else NAN)}
        out.append((p, meta))
    return out


# ---- features --------------------------------------------------------------------------------------
def _pad4(shape) -> list:
    s = list(shape or [])[:4]
    return s + [NAN] * (4 - len(s))


def kernel_features(e: dict) -> dict:
    acts = [x for x in e["inputs"] if x and x.get("role") == "activation"]
    weights = [x["shape"] for x in e["inputs"] if x and x.get("role") == "weight"]
    a0 = acts[0]["shape"] if acts else []
    o0 = e["outputs"][0]["shape"] if e.get("outputs") else []
    attrs = e.get("attributes", {})
    ks, st = attrs.get("kernel_shape") or [], attrs.get("strides") or []
    n, c, h, w = _pad4(a0)
    _, cout, hout, wout = _pad4(o0)
    return {"Kernel_ID": Path(e["file"]).stem, "OpType": e["type"], "category": e["category"],
            "op_type": e["op_type"], "Input_Shape": "x".join(map(str, a0)) if a0 else "",
            "input_shapes": json.dumps([x["shape"] for x in acts]),
            "output_shapes": json.dumps([o["shape"] for o in e.get("outputs", [])]),
            "weight_shapes": json.dumps(weights), "attributes": json.dumps(attrs, sort_keys=True),
            "N": n, "C": c, "H": h, "W": w, "Cout": cout, "Hout": hout, "Wout": wout,
            "kernel_h": ks[0] if ks else NAN, "kernel_w": ks[1] if len(ks) > 1 else NAN,
            "stride_h": st[0] if st else NAN,
            "groups": attrs.get("group", 1 if e["category"] == "conv" else NAN),
            "flops": e.get("flops", NAN), "bytes_read": e.get("bytes_read", NAN),
            "bytes_written": e.get("bytes_written", NAN)}


def latency_cols(modes) -> list:
    cols = []
    for m in modes:
        cols += [f"latency_{m}_ms_{s}" for s in STATS] + [f"n_{m}"]
    return cols + ["latency_ms"]


def session_cols(modes) -> list:
    """models.csv's columns of the whole-model label across fresh sessions."""
    cols = ["label_sessions", "latency_sessions_p10_ms", "latency_sessions_p90_ms"]
    for m in modes:
        cols += [f"latency_{m}_ms_{s}_sessions_{q}" for s in SESSION_STATS for q in ("p10", "p90")]
    return cols


def columns(kind: str, modes, fields) -> list:
    head = KERNEL_COLS if kind == "kernel" else MODEL_COLS
    extra = ["ort_kernel_time_sum_ms"] + session_cols(modes) if kind == "model" else []
    return (head + RUN_COLS + latency_cols(modes) + extra + list(fields) + [f"bg_{f}" for f in fields]
            + TAIL_COLS)


def level_key(x) -> str:
    return f"{float(x):.6g}"


# ---- CSV: append-only, whole rows, resumable ------------------------------------------------------
def repair_tail(path: Path) -> None:
    """Drop a half-written last line (a kill -9 inside a write); whole rows stay."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def read_rows(path: Path) -> list:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def done_keys(path: Path, id_col: str) -> set:
    return {(r[id_col], level_key(r["stress_level"]), r["load"]) for r in read_rows(path)
            if r.get("status") == "ok"}


def add_columns(path: Path, cols: list) -> None:
    """Rewrite a CSV under the header `cols` (a superset of its own): the new columns are empty."""
    rows = read_rows(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, cols, restval="")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


class CsvLog:
    """Append rows to a CSV whose header must match `cols`; each row is flushed at once.

    `added`: columns newer than the file may be (models.csv's session columns): a header that is
    `cols` without them is upgraded in place, its rows keep their values and leave those empty."""

    def __init__(self, path: Path, cols: list, added=()):
        self.path, self.cols = Path(path), cols
        repair_tail(self.path)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:
            with open(self.path, newline="") as f:
                header = next(csv.reader(f), [])
            if added and header != cols and header == [c for c in cols if c not in set(added)]:
                add_columns(self.path, cols)
                header = cols
            if header != cols:
                raise HaseError("holds other columns than this run writes (metrics or modes changed); "
                                "use --set out=NAME or move it", self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a", newline="")
        self.w = csv.DictWriter(self.f, cols, restval="", extrasaction="raise")
        if new:
            self.w.writeheader()
            self.f.flush()

    def write(self, row: dict) -> None:
        self.w.writerow(row)
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def drop_orphan_nodes(nodes_path: Path, models_done: set) -> None:
    """node_times rows of a model whose models.csv row never landed (killed in between) go."""
    rows = read_rows(nodes_path)
    keep = [r for r in rows if (r["model"], level_key(r["stress_level"]), r["load"]) in models_done]
    if len(keep) != len(rows):
        tmp = nodes_path.with_name(nodes_path.name + ".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, NODE_COLS)
            w.writeheader()
            w.writerows(keep)
        tmp.replace(nodes_path)


# ---- one measurement -------------------------------------------------------------------------------
def one_line(e: Exception) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]


def measure_item(path: Path, device: str, opt_level: str, cfg: dict, source, fields, sessions=None) -> dict:
    """Latency stats per mode + window and background metrics; status=failed on a kernel error.

    Order: build session -> background sample (item built but idle) -> warm up -> timed loops ->
    window metrics. The background is sampled before the warm-up, not after it, because after
    runs ORT's intra-op threads spin-wait for tens of ms, which CPU-wide metrics would count as
    background load.

    sessions: None = one session (a kernel row); N >= 1 = a whole-model label: N fresh sessions one
    after another (the previous one released first), each warmed up and timed in every mode; the
    background is sampled once, with the first session built; each latency column is the median over
    sessions of the session's statistic, plus the session_cols() spread and label_sessions.
    """
    rc, modes = cfg["runner"], cfg["modes"]
    out = {f"bg_{f}": NAN for f in fields}
    out.update({f: NAN for f in fields})
    n_sessions = 1 if sessions is None else int(sessions)
    if n_sessions < 1:
        raise HaseError(f"label_sessions must be >= 1, got {sessions}")

    def failed(e):
        return {**out, "status": "failed", "error": one_line(e), "_feed": None}

    per = {m: [] for m in modes}   # each mode's time_loop result per session
    t_build = t_bg = t_time = 0.0
    feed = None
    for i in range(n_sessions):
        t0 = time.perf_counter()
        try:
            sess = make_session(path, device, opt_level, threads=cfg["threads"], device_id=cfg["device_id"])
            feed = dummy_feed(sess)
            runners = {m: make_runner(sess, feed, m, cfg["device_id"]) for m in modes}
        except Exception as e:  # any failure to build this item: a failed row, not a stop
            return failed(e)
        t1 = time.perf_counter()
        t_build += t1 - t0
        if i == 0:
            # metric errors are not caught: they are configuration errors and stop the run
            out.update({f"bg_{k}": v for k, v in snapshot(source, cfg["bg_sample_ms"] / 1e3).items()})
        t2 = time.perf_counter()
        t_bg += t2 - t1
        try:
            for fn in runners.values():
                for _ in range(int(rc["warmup"])):
                    fn()
            for m, fn in runners.items():
                per[m].append(time_loop(fn, None, rc["budget_ms"], rc["min_loops"], rc["max_loops"]))
        except Exception as e:  # OOM or a runtime error (unsupported op) while running
            return failed(e)
        t_time += time.perf_counter() - t2
        runners = sess = None   # released before the next session is built (its memory, its threads)
    res = [r for rs in per.values() for r in rs]
    start, end = min(r["start_ts"] for r in res), max(r["end_ts"] for r in res)
    out.update(source.window(start, end))
    for m, rs in per.items():
        for s in STATS:
            out[f"latency_{m}_ms_{s}"] = float(np.median([r[f"{s}_ms"] for r in rs]))
        out[f"n_{m}"] = sum(r["n"] for r in rs)
        if sessions is not None:
            for s in SESSION_STATS:
                vals = [r[f"{s}_ms"] for r in rs]
                out[f"latency_{m}_ms_{s}_sessions_p10"] = float(np.percentile(vals, 10))
                out[f"latency_{m}_ms_{s}_sessions_p90"] = float(np.percentile(vals, 90))
    first = "e2e" if "e2e" in per else modes[0]
    label = [r["median_ms"] for r in per[first]]
    out.update({"latency_ms": float(np.median(label)), "start_ts": f"{start:.6f}", "end_ts": f"{end:.6f}",
                "status": "ok", "error": "", "_feed": feed, "_session_labels_ms": label,
                "_cost_s": {"build": t_build, "background": t_bg, "timing": t_time}})
    if sessions is not None:
        out.update({"label_sessions": n_sessions, "latency_sessions_p10_ms": float(np.percentile(label, 10)),
                    "latency_sessions_p90_ms": float(np.percentile(label, 90))})
    return out


def profile_model(path: Path, device: str, cfg: dict, row: dict, run: dict, nlog) -> None:
    """ORT-profiler node times of one model under the current load -> node_times.csv + row sum."""
    try:
        prof = profile_node_times(path, device, int(cfg["profile_runs"]), 3, cfg["model_opt_level"], row["_feed"])
    except Exception as e:  # profiling run failed (OOM under load): the item is retried next run
        row.update({"status": "failed", "error": "profile: " + one_line(e)})
        return
    row["ort_kernel_time_sum_ms"] = prof["kernel_time_sum_us"] / 1e3
    for nd in prof["nodes"]:
        nlog.write({"model": path.stem, **run, "node_name": nd["node_name"], "op_name": nd["op_name"],
                    "kernel_time_us": nd["kernel_time_us"]})


def lock_dir(out_dir: Path):
    """One collector per results folder: two would interleave rows and break resume."""
    # the lock lives in the temp dir so no stray file lands in (committed) results
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha1(str(out_dir.resolve()).encode()).hexdigest()[:12]
    f = open(Path(tempfile.gettempdir()) / f"hase-collector-{tag}.lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise HaseError("another collector is writing here", out_dir)
    return f


def public(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("_")}


# ---- main ------------------------------------------------------------------------------------------
def validate(cfg: dict) -> None:
    modes = cfg["modes"]
    if not modes or any(m not in MODES for m in modes):
        raise HaseError(f"modes must be a non-empty subset of {list(MODES)}, got {modes}")
    for k in ("warmup", "budget_ms", "min_loops", "max_loops"):
        if not isinstance(cfg["runner"].get(k), (int, float)) or cfg["runner"][k] < 0:
            raise HaseError(f"runner.{k} must be a number >= 0")
    for k in ("settle_s", "bg_sample_ms", "max_minutes", "max_kernels", "profile_runs", "idle_busy_max",
              "idle_window_s", "idle_wait_s"):
        if not isinstance(cfg[k], (int, float)) or cfg[k] < 0:
            raise HaseError(f"{k} must be a number >= 0")
    check_label_sessions(cfg["label_sessions"])


def check_label_sessions(n) -> int:
    """label_sessions: a whole number >= 1 (fresh sessions per whole-model label)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise HaseError(f"label_sessions must be a whole number >= 1, got {n!r}")
    return n


def plan_items(loads, kitems, mitems, kdone: set, mdone: set) -> list:
    """[(load, [(kind, item)])] of what is not done yet; loads with nothing left are dropped."""
    plan = []
    for ld in loads:
        key = (level_key(ld["level"]), ld["name"])
        todo = [("kernel", e) for e in kitems if (Path(e["file"]).stem, *key) not in kdone]
        todo += [("model", m) for m in mitems if (m[0].stem, *key) not in mdone]
        if todo:
            plan.append((ld, todo))
    return plan


def wait_idle_cfg(source, cfg: dict, what: str) -> dict:
    """gpu_metrics.wait_idle with the config's idle_busy_max, idle_window_s and idle_wait_s."""
    return wait_idle(source, float(cfg["idle_busy_max"]), float(cfg["idle_window_s"]), float(cfg["idle_wait_s"]),
                     "idle_busy_max", what)


def measure_idle_checked(ctx: SimpleNamespace, path: Path, opt_level: str, level: float, sessions=None) -> dict:
    """measure_item; at level 0 (the idle reference) the item's own background window must be idle too: else
    wait (at most idle_wait_s in all) for an idle window and measure it again; still busy -> HaseError."""
    cfg = ctx.cfg
    busy_max = float(cfg["idle_busy_max"])
    deadline = time.monotonic() + float(cfg["idle_wait_s"])
    while True:
        row = measure_item(path, ctx.device, opt_level, cfg, ctx.source, ctx.fields, sessions=sessions)
        field, value, frac = busy_reading(row, "bg_")
        if level > 0 or row["status"] != "ok" or frac is None or frac <= busy_max or busy_max >= 1:
            return row
        if time.monotonic() >= deadline:
            raise HaseError("not idle at stress level 0: " + not_idle(
                field, value, busy_max, "idle_busy_max", f"in its {cfg['bg_sample_ms']:g} ms background window")
                + f" after {cfg['idle_wait_s']:g} s of waiting; stop the neighbour, or raise idle_busy_max", path)
        wait_idle_cfg(ctx.source, {**cfg, "idle_wait_s": max(deadline - time.monotonic(), 0.0)},
                      f"idle reference (stress level 0, {path.name})")


def run_item(ctx: SimpleNamespace, kind: str, item, run: dict) -> dict:
    """Measure one kernel or model under the running load and append its row(s)."""
    cfg = ctx.cfg
    if kind == "kernel":
        row = measure_idle_checked(ctx, ctx.kdir / item["file"], cfg["kernel_opt_level"], run["stress_level"])
        ctx.klog.write({**kernel_features(item), **run, **public(row), **ctx.tail})
        return row
    path, meta = item
    row = measure_idle_checked(ctx, path, cfg["model_opt_level"], run["stress_level"], sessions=cfg["label_sessions"])
    row["ort_kernel_time_sum_ms"] = NAN
    if row["status"] == "ok" and cfg["profile_runs"]:
        profile_model(path, ctx.device, cfg, row, run, ctx.nlog)
    ctx.mlog.write({"model": path.stem, **meta, **run, **public(row), **ctx.tail})
    return row


def collect(ctx: SimpleNamespace, plan: list, deadline: float, log) -> int:
    """Run the plan load by load; returns how many items were measured before the deadline."""
    n_done = 0
    cost, t_items = {}, 0.0   # where an item's time goes (the throughput benchmark of the issue)
    with progress(total=sum(len(t) for _, t in plan), desc="collect", unit="item") as bar:
        for ld, todo in plan:
            if time.monotonic() >= deadline:
                break
            with make_load(ld, ctx.device, ctx.cfg) as load:
                time.sleep(ctx.cfg["settle_s"])
                if ld["level"] == 0:  # the idle reference: refuse a busy machine before measuring anything
                    wait_idle_cfg(ctx.source, ctx.cfg, f"idle reference ({ld['name']} at level 0)")
                for kind, item in todo:
                    if time.monotonic() >= deadline:
                        break
                    if ld["level"] > 0 and not load.alive():
                        raise HaseError(f"load {ld['name']} at {ld['level']:g} died during collection")
                    bar.set_postfix_str(f"{ld['name']}@{ld['level']:g}")
                    t0 = time.perf_counter()
                    row = run_item(ctx, kind, item, {"stress_level": ld["level"], "load": ld["name"]})
                    if kind == "kernel" and "_cost_s" in row:
                        t_items += time.perf_counter() - t0
                        for k, v in row["_cost_s"].items():
                            cost[k] = cost.get(k, 0.0) + v
                        cost["n"] = cost.get("n", 0) + 1
                    if row["status"] != "ok":
                        name = item["file"] if kind == "kernel" else item[0].name
                        log.warning("%s failed under %s %g: %s", name, ld["name"], ld["level"], row["error"])
                    n_done += 1
                    bar.update(1)
    if cost.get("n"):
        n = cost["n"]
        parts = {k: v for k, v in cost.items() if k != "n"}
        log.info("kernels: %d measured, %.2f per second of item time; per item %s, rest (CSV, window "
                 "metrics) %.0f ms", n, n / t_items, ", ".join(f"{k} {1e3 * v / n:.0f} ms" for k, v in parts.items()),
                 1e3 * (t_items - sum(parts.values())) / n)
    return n_done


def main() -> int:
    p = base_parser("Phase 4.3: collect kernel and model latencies under load", "benchmark")
    p.add_argument("--max-minutes", type=float, default=None, help="stop cleanly after this long; rerun continues")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    if args.max_minutes is not None:
        cfg["max_minutes"] = args.max_minutes
    # every input check comes before any output, so a bad call changes nothing on disk
    validate(cfg)
    loads = parse_loads(cfg)
    device = resolve_device(cfg["device"], cfg["device_id"])
    # kernel_glob "" = whole models only: no kernel index needed
    kdir, kernels = load_kernel_index(device) if cfg["kernel_glob"] else (None, {})
    kitems = select_kernels(kernels, cfg["kernel_glob"], int(cfg["max_kernels"])) if kernels else []
    mitems = select_models(cfg["models_glob"])
    source = make_source(cfg["metrics"], device, cfg["device_id"])
    source.check()  # unreachable Prometheus / bad query
    fields = source.fields
    out_dir = paths.bench_results_dir() / (cfg["out"] or device_slug(device, cfg["device_id"]))
    lock = lock_dir(out_dir)  # noqa: F841 (held until exit)
    kcols, mcols = columns("kernel", cfg["modes"], fields), columns("model", cfg["modes"], fields)
    kernels_csv, models_csv, nodes_csv = out_dir / KERNELS_CSV, out_dir / MODELS_CSV, out_dir / NODES_CSV
    klog, mlog = CsvLog(kernels_csv, kcols), CsvLog(models_csv, mcols, added=session_cols(cfg["modes"]))
    models_done = done_keys(models_csv, "model")
    drop_orphan_nodes(nodes_csv, models_done)
    nlog = CsvLog(nodes_csv, NODE_COLS)

    log = get_logger("benchmark", args.log_level)
    if not kitems and cfg["kernel_glob"]:
        log.warning("kernel_glob '%s' matches none of the %d kernels in %s", cfg["kernel_glob"], len(kernels), kdir)
    prov = provenance(device, cfg["device_id"])
    save_resolved(cfg, out_dir, extra={"provenance": prov, "loads": loads, "metric_fields": list(fields),
                                       "kernel_columns": kcols, "model_columns": mcols})
    tail = {"gpu_name": prov.get("gpu_name", ""), "gpu_driver": prov.get("gpu_driver", ""),
            "ort_version": prov["ort_version"], "device": device}
    plan = plan_items(loads, kitems, mitems, done_keys(kernels_csv, "Kernel_ID"), models_done)
    n_todo = sum(len(t) for _, t in plan)
    log.info("%d kernels, %d models, %d loads -> %d items to measure (%d done) into %s", len(kitems), len(mitems),
             len(loads), n_todo, (len(kitems) + len(mitems)) * len(loads) - n_todo, out_dir)
    ctx = SimpleNamespace(cfg=cfg, device=device, source=source, fields=fields, kdir=kdir, tail=tail,
                          klog=klog, mlog=mlog, nlog=nlog)
    deadline = time.monotonic() + cfg["max_minutes"] * 60 if cfg["max_minutes"] else math.inf
    source.start()
    try:
        n_done = collect(ctx, plan, deadline, log)
    finally:
        source.stop()
        for lg in (klog, mlog, nlog):
            lg.close()
    if n_done < n_todo:
        log.info("time budget reached after %d of %d items; run again to continue", n_done, n_todo)
    from hase.benchmark.report import write_report
    log.info("wrote %s, %s, %s and %s", kernels_csv, models_csv, nodes_csv, write_report(out_dir))
    return 0


if __name__ == "__main__":
    run_main(main)
