"""Phase 4 study (issue 23 item 4): what moves host speed between processes on one machine.

  python benchmark/host_speed_study.py --device cuda --set 'models=[m1.onnx, m2.onnx]' --set reps=4 --set out=DIR
  python benchmark/host_speed_study.py --set analyse=DIR [--set report=benchmark/results/host_speed]

The GPU side of a session does not move between processes (CV 0.11%); the host side does (CV 14%), and it is
bimodal on the H200 machines (about 8.5 or 12.5 us per node in the calibration chains). This study starts one
fresh worker process per (condition, repetition), round-robin, so drift over the run lands on every condition
alike. Each worker calibrates (benchmark/host_calibration.py's chains: host_index_us), then times each model's
session.run (e2e, fresh CUDA EP session, warm-up first) and notes the CPU it ran on, that CPU's clock and
the load on the host.
  default       no binding: where the kernel scheduler puts the process
  gpu_node      the CPUs local to the GPU (its PCI device's local_cpulist; numactl --membind when present)
  other_node    CPUs of another NUMA node (skipped on a machine with one node)
  one_core      one CPU of the GPU's node, its SMT sibling left idle
  one_core_t1   the same, ORT's intra-op pool at 1 thread (its spinning threads share the one core otherwise)
  busy_sibling  one CPU, a busy loop on its SMT sibling (skipped without SMT)
  cpu<N>        pinned to CPU N (is one CPU slower than another?)
  host_load     no binding, a busy loop on every CPU
  awake         no binding, a busy loop on one other CPU (exam v22, machine ah: the host ran slow where the VM's
                load average was lowest; H100 machine o's batch-1 models ran 0.76-0.90x with one core spinning:
                do idle vCPUs wake the dispatch path late?)
  one_core_awake  one_core, and a busy loop on one other CPU (not its sibling)
Writes DIR/rows.csv (one row per worker x model), DIR/machine.json. `analyse` reads them and writes
summary.json (per condition: host index, spread between processes, latency against default) and a plot.
"""
import glob
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


import numpy as np  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402

DEFAULTS = {"device": "cuda", "device_id": 0, "models": [], "reps": 4, "warmup": 10, "budget_ms": 150.0,
            "min_loops": 20, "calib_budget_ms": 20.0, "conditions": ["default", "gpu_node", "other_node", "one_core",
                                                                      "one_core_t1", "busy_sibling", "host_load"],
            "out": "", "analyse": "", "report": ""}
SYS_CPU = Path("/sys/devices/system/cpu")


# ---------------------------------------------------------------- the host's layout

def cpulist(text: str) -> list:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]"""
    out = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out += range(int(lo), int(hi or lo) + 1)
    return out


def _read(p, default=""):
    try:
        return Path(p).read_text().strip()
    except OSError:
        return default


def gpu_pci_dir(device_id: int):
    try:
        import pynvml
        pynvml.nvmlInit()
        bus = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(device_id)).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        d = Path("/sys/bus/pci/devices") / bus.lower()[-12:]  # '00000000:19:00.0' -> '0000:19:00.0'
        return d if d.exists() else None
    except Exception:
        return None


def layout(device_id: int = 0) -> dict:
    """NUMA nodes and their CPUs, the GPU's local CPUs, SMT siblings, cpufreq and idle states."""
    allowed = sorted(os.sched_getaffinity(0))
    nodes = {int(p.name[4:]): cpulist(_read(p / "cpulist")) for p in sorted(Path("/sys/devices/system/node")
                                                                            .glob("node[0-9]*"))}
    pci = gpu_pci_dir(device_id)
    gpu_cpus = cpulist(_read(pci / "local_cpulist")) if pci else []
    gpu_node = int(_read(pci / "numa_node", "-1")) if pci else -1
    siblings = {c: cpulist(_read(SYS_CPU / f"cpu{c}/topology/thread_siblings_list", str(c))) for c in allowed}
    idle = [_read(p / "name") for p in sorted((SYS_CPU / "cpu0/cpuidle").glob("state*"))]
    return {"allowed_cpus": allowed, "numa_nodes": {str(k): v for k, v in nodes.items()},
            "gpu_numa_node": gpu_node, "gpu_local_cpus": [c for c in gpu_cpus if c in allowed],
            "smt_active": _read(SYS_CPU / "smt/active", "?"), "siblings": {str(k): v for k, v in siblings.items()},
            "governor": _read(SYS_CPU / "cpu0/cpufreq/scaling_governor", "none (no cpufreq in this machine)"),
            "driver": _read(SYS_CPU / "cpu0/cpufreq/scaling_driver", ""), "cpuidle_states": idle,
            "numactl": shutil.which("numactl") or "", "model": _cpu_model(), "nproc": os.cpu_count()}


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


def cpu_mhz(cpu: int) -> float:
    """This CPU's clock now: cpufreq where the machine exposes it, else /proc/cpuinfo's 'cpu MHz'."""
    f = _read(SYS_CPU / f"cpu{cpu}/cpufreq/scaling_cur_freq")
    if f:
        return int(f) / 1e3
    seen = -1
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("processor"):
            seen = int(line.split(":")[1])
        elif line.startswith("cpu MHz") and seen == cpu:
            return float(line.split(":")[1])
    return float("nan")


def current_cpu() -> int:
    try:  # field 39 of /proc/self/stat
        return int(_read("/proc/self/stat").rsplit(")", 1)[1].split()[36])
    except (IndexError, ValueError):
        return -1


def busy_cpu_pct(window_s: float = 0.2) -> float:
    def snap():
        v = [int(x) for x in _read("/proc/stat").splitlines()[0].split()[1:]]
        return sum(v), v[3] + v[4]
    (t0, i0), _ = snap(), time.sleep(window_s)
    t1, i1 = snap()
    return 100.0 * (1 - (i1 - i0) / max(t1 - t0, 1))


# ---------------------------------------------------------------- conditions

def plan(lay: dict, conditions: list) -> dict:
    """condition -> {cpus: binding or None, membind: node or None, load: CPUs to keep busy, threads}; a
    condition this machine cannot express is left out (with why)."""
    allowed, local = lay["allowed_cpus"], lay["gpu_local_cpus"] or lay["allowed_cpus"]
    nodes = {int(k): [c for c in v if c in allowed] for k, v in lay["numa_nodes"].items()}
    gnode = lay["gpu_numa_node"] if lay["gpu_numa_node"] in nodes else min(nodes, default=0)
    sib = {int(k): v for k, v in lay["siblings"].items()}
    one = next((c for c in local if len(sib.get(c, [c])) > 1), local[0])  # a CPU with a sibling if there is one
    other_sib = [c for c in sib.get(one, [one]) if c != one]
    out, skipped = {}, {}
    for name in conditions:
        c = {"cpus": None, "membind": None, "load": [], "threads": 0}
        if name == "gpu_node":
            c.update(cpus=local, membind=gnode if len(nodes) > 1 else None)
        elif name == "other_node":
            others = [n for n in nodes if n != gnode and nodes[n]]
            if not others:
                skipped[name] = "one NUMA node"
                continue
            c.update(cpus=nodes[others[0]], membind=others[0])
        elif name in ("one_core", "one_core_t1"):
            c.update(cpus=[one], threads=1 if name.endswith("t1") else 0)
        elif name == "busy_sibling":
            if not other_sib:
                skipped[name] = "no SMT sibling"
                continue
            c.update(cpus=[one], load=other_sib)
        elif name == "host_load":
            c.update(load=list(allowed))
        elif name in ("awake", "one_core_awake"):   # one other CPU kept busy: the host's CPUs never all idle
            spare = [x for x in reversed(allowed) if x != one and x not in sib.get(one, [])]
            if not spare:
                skipped[name] = "no CPU besides the worker's"
                continue
            c.update(load=spare[:1], cpus=[one] if name == "one_core_awake" else None)
        elif name.startswith("cpu") and name[3:].isdigit():  # one named CPU: is one CPU slower than another?
            if int(name[3:]) not in allowed:
                skipped[name] = "not an allowed CPU"
                continue
            c.update(cpus=[int(name[3:])])
        elif name != "default":
            raise HaseError(f"unknown condition '{name}'", "conditions")
        out[name] = c
    return {"conditions": out, "skipped": skipped}


def spin(cpus: list) -> list:
    """A busy loop pinned to each CPU (another job's host load)."""
    code = "import os,sys; os.sched_setaffinity(0,{int(sys.argv[1])})\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code, str(c)]) for c in cpus]


# ---------------------------------------------------------------- the worker (one fresh process)

def worker(spec: dict) -> list:
    """Calibrate, then time each model; rows tagged with the CPU and clock the process ran at."""
    from hase.benchmark.host_calibration import Calibrator, host_index
    from hase.benchmark.ort_kernel_runner import make_runner, time_loop
    from hase.utils.onnx_io import dummy_feed
    from hase.utils.ort_session import make_session
    dev, did, threads = spec["device"], spec["device_id"], spec["threads"]
    cpu0, mhz0, busy0 = current_cpu(), cpu_mhz(max(current_cpu(), 0)), busy_cpu_pct()
    cal = Calibrator(dev, did, threads)
    host = cal.host(spec["calib_budget_ms"])
    base = {**spec["tags"], "pid": os.getpid(), "cpu_start": cpu0, "mhz_start": mhz0, "busy_pct_start": busy0,
            "host_index_us": host_index(host), **{f"calib_{k}_us": v for k, v in host.items()}}
    rows = []
    for m in spec["models"]:
        sess = make_session(m, dev, threads=threads, device_id=did)
        run = make_runner(sess, dummy_feed(sess, seed=0), "e2e", did)
        for _ in range(spec["warmup"]):
            run()
        r = time_loop(run, None, spec["budget_ms"], spec["min_loops"], 5000)
        c = current_cpu()
        rows.append({**base, "model": Path(m).stem, "latency_ms": r["median_ms"], "p10_ms": r["p10_ms"],
                     "p90_ms": r["p90_ms"], "loops": len(r["samples_ms"]), "cpu": c, "mhz": cpu_mhz(max(c, 0))})
        del run, sess
    host2 = cal.host(spec["calib_budget_ms"])  # the state may flip within a process: read it again at the end
    for row in rows:
        row["host_index_end_us"] = host_index(host2)
        row["cpu_end"] = current_cpu()
    return rows


def run_worker(cond: dict, spec: dict, lay: dict, timeout_s: float = 300.0) -> list:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    if cond["membind"] is not None and lay["numactl"]:
        cmd = [lay["numactl"], f"--membind={cond['membind']}", *cmd]
    env = paths.child_env()
    load = spin(cond["load"])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                           preexec_fn=(lambda: os.sched_setaffinity(0, cond["cpus"])) if cond["cpus"] else None)
    finally:
        for q in load:
            q.kill()
        for q in load:
            q.wait()
    if p.returncode != 0:
        raise HaseError(f"worker failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-1:]}",
                        spec["tags"]["condition"])
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- analysis

def pair_spread_pct(values) -> float:
    """Median |a - b| / mean over pairs of processes: the session-to-session spread the issue asks to halve."""
    v = [x for x in values if x == x]
    d = [abs(a - b) / ((a + b) / 2) * 100 for a, b in itertools.combinations(v, 2)]
    return float(np.median(d)) if d else float("nan")


def group_of(condition: str) -> str:
    """Conditions that bind the process to one CPU are one setting (which CPU did not matter)."""
    if condition.endswith("_awake"):   # pinned, but with another CPU busy: its own setting
        return condition
    return "one_cpu" if condition.startswith("cpu") or condition.startswith("one_core") else condition


def analyse(rows, slow_ratio: float = 1.2) -> dict:
    """Per setting: spread between processes, the share of (process, model) runs in the slow host state (over
    slow_ratio x the model's fastest unloaded process), the median latency against the fastest, and how well
    the process's calibration (at its start and end) tracks its slowdown."""
    import pandas as pd
    df = pd.DataFrame(rows)
    df["proc"] = df.get("machine", "") + "/" + df.pid.astype(str)
    df["setting"] = df.condition.map(group_of)
    best = df[df.setting != "host_load"].groupby(["machine", "model"] if "machine" in df else "model").latency_ms.min()
    key = [df.machine, df.model] if "machine" in df else [df.model]
    df["ratio"] = df.latency_ms.values / best.reindex(pd.MultiIndex.from_arrays(key) if len(key) > 1 else key[0]).values
    out = {}
    for setting, g in df.groupby("setting", sort=False):
        spread = [pair_spread_pct(v) for _, v in g.groupby(["machine", "model"] if "machine" in g else "model").latency_ms]
        bs1 = g.model.str.contains("_bs1_")
        w = g.groupby("proc").agg(hi=("host_index_us", "first"), he=("host_index_end_us", "first"),
                                  r=("ratio", lambda x: float(np.exp(np.log(x).mean()))))
        out[setting] = {"processes": int(len(w)), "conditions": sorted(g.condition.unique()),
                        "latency_spread_pct": float(np.nanmedian(spread)),
                        "slow_share_pct": float(100 * (g[bs1].ratio > slow_ratio).mean()),
                        "latency_vs_fastest": float(g[bs1].ratio.median()),
                        "gpu_bound_vs_fastest": float(g[~bs1].ratio.median()),
                        "host_index_median_us": float(w.hi.median()),
                        "host_index_spread_pct": pair_spread_pct(w.hi),
                        "spearman_calib_start_vs_slowdown": float(w.hi.corr(w.r, method="spearman")),
                        "spearman_calib_end_vs_slowdown": float(w.he.corr(w.r, method="spearman"))}
    return out


def plot(rows, path: Path) -> None:
    """Each process's slowdown (geomean over models of latency / fastest) per setting and machine."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    df = pd.DataFrame(rows)
    df = df[df.model.str.contains("_bs1_")]  # the GPU-bound control is in the summary, not here
    df["setting"] = df.condition.map(group_of)
    df["ratio"] = df.latency_ms / df.groupby(["machine", "model"]).latency_ms.transform(
        lambda v: v[df.loc[v.index, "setting"] != "host_load"].min())
    w = df.groupby(["machine", "setting", "pid"]).ratio.apply(lambda x: float(np.exp(np.log(x).mean()))).reset_index()
    settings, machines = list(dict.fromkeys(w.setting)), list(dict.fromkeys(w.machine))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for j, m in enumerate(machines):
        for i, s in enumerate(settings):
            v = w[(w.machine == m) & (w.setting == s)].ratio
            x = i + (j - (len(machines) - 1) / 2) * 0.25 + np.linspace(-0.05, 0.05, len(v))
            ax.scatter(x, v, s=12, color=f"C{j}", label=m if i == 0 else None)
    ax.set_xticks(range(len(settings)), settings)
    ax.set_ylabel("process slowdown (x fastest)")
    ax.set_title("Host speed between fresh processes, batch-1 models")
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)


def analyse_dir(srcs, report: str, log) -> int:
    """srcs: folders of rows.csv + machine.json, one per machine (their rows are pooled per setting)."""
    import pandas as pd
    srcs = [Path(s) for s in (srcs if isinstance(srcs, (list, tuple)) else [srcs])]
    frames, machines = [], {}
    for s in srcs:
        if not (s / "rows.csv").exists():
            raise HaseError("no rows.csv (run the study first)", s)
        frames.append(pd.read_csv(s / "rows.csv").assign(machine=s.name))
        machines[s.name] = json.loads((s / "machine.json").read_text())
    common = set.intersection(*(set(f.model) for f in frames))  # the same models on every machine
    rows = pd.concat(frames)
    rows = rows[rows.model.isin(common)].to_dict("records")
    summary = {"models": sorted(common), "machines": {k: {f: v.get(f) for f in ("model", "nproc", "numa_nodes", "smt_active", "governor",
                                                          "cpuidle_states", "skipped", "provenance")}
                            for k, v in machines.items()},
               "by_setting": analyse(rows),
               "by_machine": {m: analyse([r for r in rows if r["machine"] == m]) for m in machines}}
    dest = Path(report) if report else srcs[0]
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1, default=float))
    tmp.replace(dest / "summary.json")
    plot(rows, dest / "host_speed.png")
    for c, s in summary["by_setting"].items():
        log.info(f"{c:10s} {s['processes']:3d} processes  latency spread {s['latency_spread_pct']:5.1f}%  slow "
                 f"{s['slow_share_pct']:5.1f}%  x{s['latency_vs_fastest']:.3f} of fastest  host index "
                 f"{s['host_index_median_us']:.2f} us (calibration vs slowdown: start "
                 f"{s['spearman_calib_start_vs_slowdown']:.2f}, end {s['spearman_calib_end_vs_slowdown']:.2f})")
    return 0


# ---------------------------------------------------------------- main

def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2])), default=float))
        return 0
    p = base_parser("Phase 4 study: what moves host speed between processes", "benchmark", "host_speed_study.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("benchmark", args.log_level)
    if cfg["analyse"]:
        a = cfg["analyse"]
        return analyse_dir(sorted(glob.glob(a)) if isinstance(a, str) else [x for p in a for x in sorted(glob.glob(p))],
                           cfg["report"], log)
    models = [m for pat in cfg["models"] for m in sorted(glob.glob(str(pat)))]
    if not models:
        raise HaseError("no model files match", "models")
    if not cfg["out"]:
        raise HaseError("give an output folder", "out")
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    lay = layout(cfg["device_id"])
    pl = plan(lay, cfg["conditions"])
    from hase.utils.ort_session import provenance
    (out / "machine.json").write_text(json.dumps({**lay, "skipped": pl["skipped"], "plan": pl["conditions"],
                                                  "provenance": provenance(cfg["device"], cfg["device_id"]),
                                                  "models": [Path(m).stem for m in models]}, default=str))
    log.info(f"{lay['model']}: {len(lay['allowed_cpus'])} CPUs, NUMA nodes {list(lay['numa_nodes'])}, GPU node "
             f"{lay['gpu_numa_node']}, SMT {lay['smt_active']}, governor {lay['governor']}; skipped {pl['skipped']}")
    done = out / "rows.jsonl"
    have = {(r["condition"], r["rep"]) for r in map(json.loads, done.read_text().splitlines())} if done.exists() else set()
    todo = [(rep, c) for rep in range(cfg["reps"]) for c in pl["conditions"] if (c, rep) not in have]
    for i, (rep, c) in enumerate(todo):  # round-robin: every condition sees the same drift
        spec = {"device": cfg["device"], "device_id": cfg["device_id"], "models": models, "warmup": cfg["warmup"],
                "budget_ms": cfg["budget_ms"], "min_loops": cfg["min_loops"], "calib_budget_ms": cfg["calib_budget_ms"],
                "threads": pl["conditions"][c]["threads"], "tags": {"condition": c, "rep": rep}}
        t0 = time.time()
        rows = run_worker(pl["conditions"][c], spec, lay)
        with done.open("a") as f:
            for r in rows:
                f.write(json.dumps(r, default=float) + "\n")
        log.info(f"[{i + 1}/{len(todo)}] {c} rep {rep}: host index {rows[0]['host_index_us']:.2f} us, "
                 f"cpu {rows[0]['cpu_start']}, {statistics.median(r['latency_ms'] for r in rows):.3f} ms median, "
                 f"{time.time() - t0:.1f} s")
    import pandas as pd
    pd.DataFrame([json.loads(x) for x in done.read_text().splitlines()]).to_csv(out / "rows.csv", index=False)
    return analyse_dir(out, cfg["report"], log)


if __name__ == "__main__":
    run_main(main)
