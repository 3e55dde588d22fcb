"""A one-minute, human-readable summary of a phase 4 results folder (seed 003's report).

  python benchmark/report.py [--device cuda] [--set out=nvidia-h200]     (the collector also writes it)

Reads benchmark/results/<slug>/ (kernels.csv, models.csv, resolved_config.json and, when present,
bandwidth_table.json, load_calibration.csv, noise/<run>/kernels.csv) and writes profiling_report.txt
there: configuration and provenance, rows per stress level and kernel type, failures, transfer
bandwidths, per-type latency by stress level, whole-model latency by load, load calibration and
run-to-run noise.
"""
import itertools
import json
from pathlib import Path


import pandas as pd  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import device_slug, resolve_device  # noqa: E402

REPORT = "profiling_report.txt"
LAT = "latency_device_ms_median"


def _read(path: Path):
    path = paths.csv_or_gz(path)
    return pd.read_csv(path) if path.exists() else None


def section(title: str, body: str) -> str:
    return f"== {title}\n{body.rstrip()}\n"


def config_section(res: Path) -> str:
    rc = res / "resolved_config.json"
    if not rc.exists():
        return section("configuration", "(no resolved_config.json)")
    data = json.loads(rc.read_text())
    prov, cfg = data.get("provenance", {}), data.get("config", {})
    lines = [f"device: {prov.get('gpu_name') or prov.get('cpu', '?')} ({prov.get('ep', '?')}), driver "
             f"{prov.get('gpu_driver', '-')}, onnxruntime {prov.get('ort_version', '?')}, {prov.get('date_utc', '?')}",
             "loads: " + ", ".join(f"{ld['name']}@{ld['level']:g}" for ld in data.get("loads", [])),
             f"runner: {cfg.get('runner')}, modes {cfg.get('modes')}, bg sample {cfg.get('bg_sample_ms')} ms, "
             f"settle {cfg.get('settle_s')} s"]
    return section("configuration", "\n".join(lines))


def kernels_sections(k: pd.DataFrame) -> list:
    out = []
    ok = k[k["status"] == "ok"]
    counts = ok.pivot_table(index="OpType", columns="stress_level", values="Kernel_ID", aggfunc="count", fill_value=0)
    counts.loc["ALL"] = counts.sum()
    failed = k[k["status"] != "ok"]
    body = counts.to_string()
    if len(failed):
        body += f"\nfailed rows: {len(failed)} (e.g. {failed['Kernel_ID'].iloc[0]}: {failed['error'].iloc[0]})"
    out.append(section("kernel rows per kernel type (rows) and stress level (columns)", body))
    lat = LAT if LAT in ok else "latency_ms"
    med = ok.pivot_table(index="OpType", columns="stress_level", values=lat, aggfunc="median")
    p90 = ok.pivot_table(index="OpType", columns="stress_level", values=lat, aggfunc=lambda s: s.quantile(0.9))
    table = med.map(lambda v: f"{v:.4f}") + " / " + p90.map(lambda v: f"{v:.4f}")
    out.append(section(f"kernel {lat} per type and stress level: median / p90 over kernels", table.to_string()))
    return out


def models_section(m: pd.DataFrame) -> str:
    ok = m[m["status"] == "ok"].copy()
    ok["load_at"] = ok["load"] + "@" + ok["stress_level"].map("{:g}".format)
    t = ok.pivot_table(index="model", columns="load_at", values="latency_e2e_ms_median", aggfunc="median")
    body = t.round(3).to_string()
    if "latency_sessions_p10_ms" in ok and ok["latency_sessions_p10_ms"].notna().any():
        # the label's spread across fresh sessions (collector's label_sessions); old rows have none
        ok["spread"] = (100 * (ok["latency_sessions_p90_ms"] - ok["latency_sessions_p10_ms"])
                        / ok["latency_ms"]).round(1)
        s = ok.pivot_table(index="model", columns="load_at", values="spread", aggfunc="median")
        n = ok["label_sessions"].dropna()
        body += (f"\nlatency_ms p90 - p10 across fresh sessions, % of latency_ms "
                 f"({int(n.min())}..{int(n.max())} sessions per row):\n" + s.to_string())
    return section("whole models: session.run median ms per load", body)


def bandwidth_section(res: Path) -> str:
    p = res / "bandwidth_table.json"
    if not p.exists():
        return section("transfer bandwidth", "(no bandwidth_table.json: run benchmark/bandwidth.py)")
    t = json.loads(p.read_text())
    lines = [f"method: {t.get('method')}, measured {t.get('measured_at')}"]
    for d, v in t["directions"].items():
        f = v["fit"]
        lines.append(f"{d}: {f['bandwidth_GBps']:.2f} GB/s, fixed {f['fixed_us']:.1f} us "
                     f"(latency_ms = {f['a_ms_per_byte']:.3e} * bytes + {f['b_ms']:.4f}; "
                     f"fit mean rel err {100 * f['mean_rel_err']:.0f}%)")
    return section("transfer bandwidth (latency = a * bytes + b)", "\n".join(lines))


def calibration_section(res: Path) -> str:
    c = _read(res / "load_calibration.csv")
    if c is None:
        return section("load calibration", "(no load_calibration.csv: run benchmark/calibrate_loads.py)")
    cols = [x for x in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                        "DCGM_FI_DEV_SM_CLOCK", "CPU_UTIL_PCT") if x in c]
    return section("load calibration (each load alone)", c[["load", "level", *cols]].round(3).to_string(index=False))


def noise_section(res: Path) -> str:
    runs = {d.name: pd.read_csv(paths.csv_or_gz(d / "kernels.csv")).set_index("Kernel_ID")
            for d in sorted((res / "noise").glob("*")) if paths.csv_or_gz(d / "kernels.csv").exists()}
    if len(runs) < 2:
        return section("run-to-run noise", "(fewer than two runs under noise/: not measured)")
    lines = []
    for a, b in itertools.combinations(runs, 2):
        common = runs[a].index.intersection(runs[b].index)
        for mode in ("device", "e2e"):
            col = f"latency_{mode}_ms_median"
            if col not in runs[a]:
                continue
            d = ((runs[a].loc[common, col] - runs[b].loc[common, col]).abs() / runs[b].loc[common, col] * 100)
            lines.append(f"{a} vs {b} ({len(common)} kernels, {mode}): median |diff| {d.median():.1f}%, "
                         f"p90 {d.quantile(0.9):.1f}%, max {d.max():.1f}%")
    for name, df in runs.items():
        ts = df["start_ts"].astype(float)
        if len(ts) > 1:
            lines.append(f"{name}: {len(df)} kernels in {ts.max() - ts.min():.1f} s = "
                         f"{(len(df) - 1) / (ts.max() - ts.min()):.2f} kernel measurements/s")
    return section("run-to-run noise (same kernels, idle) and collection throughput", "\n".join(lines))


def kernel_space_section(res: Path) -> str:
    """The packed kernel-space collection (multi_kernel_runner.py, kernel_space/): tables, throughput per
    invocation, re-measured kernels, the peak microbenchmark (peaks.json)."""
    ks = res / "kernel_space"
    tables = sorted(ks.glob("kernels*.csv*")) if ks.is_dir() else []
    if not tables:
        return section("kernel space", "(no kernel_space/: run benchmark/run_gpu_kernel_space.sh or multi_kernel_runner.py)")
    lines, ids = [], set()
    for t in tables:
        d = pd.read_csv(t, usecols=lambda c: c in ("Kernel_ID", "OpType", "status"))
        ok = d[d["status"].astype(str) == "ok"] if "status" in d else d
        ids |= set(ok["Kernel_ID"])
        lines.append(f"{t.name}: {len(ok)} kernels ok of {len(d)}, {ok['OpType'].nunique()} types")
    lines.append(f"all tables: {len(ids)} distinct kernels")
    tp = ks / "throughput.json"
    if tp.exists():
        for i in json.loads(tp.read_text()).get("invocations", []):
            tag = " ".join(str(i[k]) for k in ("role", "name") if i.get(k)) or "first"
            lines.append(f"collection ({tag}, {i.get('date_utc', '')[:16]}, {i.get('chunk')} per pack, prefetch "
                         f"{bool(i.get('prefetch'))}): {i['kernels_measured']} kernels in {i['wall_s']:.0f} s = "
                         f"{i['kernels_per_s']:.1f} kernel measurements/s")
    if sorted(ks.glob("repeat_*.csv*")):
        from hase.benchmark.import_kernel_space import repeat_difference
        a = pd.concat([pd.read_csv(t, usecols=["Kernel_ID", "latency_node_ms_median"]) for t in tables])
        first = a.drop_duplicates("Kernel_ID").set_index("Kernel_ID")["latency_node_ms_median"]
    for r in sorted(ks.glob("repeat_*.csv*")):
        n = repeat_difference(first, r)
        lines.append(f"{r.name}: {n['kernels']} kernels re-measured, mean |diff| {n['mean_abs_diff_pct']:.1f}%, median "
                     f"{n['median_abs_diff_pct']:.1f}%, over 10% {100 * n['share_over_10pct']:.1f}%")
    pk = res / "peaks.json"
    if pk.exists():
        p = json.loads(pk.read_text())
        lines.append(f"peaks (benchmark/peak_bench.py): {p['peak_tflops']:.1f} TFLOP/s, {p['peak_tb_per_s']:.2f} TB/s")
    return section("kernel space (packed kernels, CUPTI GPU time) and its collection throughput", "\n".join(lines))


def corpus_section(res: Path) -> str:
    """The measured corpus (benchmark/run_gpu_corpus.sh, corpus/machine_*): models, sessions and the whole-model
    trace speed per model-session (the trace stage's wall time over its model-sessions, session creation and
    cuDNN's algorithm search included; target <= 2 s)."""
    import re
    machines = sorted(d for d in (res / "corpus").glob("machine_*") if d.is_dir()) if (res / "corpus").is_dir() else []
    if not machines:
        return section("corpus", "(no corpus/: run benchmark/run_gpu_corpus.sh)")
    lines = []
    for d in machines:
        s = pd.read_csv(paths.csv_or_gz(d / "trace_sessions.csv"), usecols=["model", "session"])
        log = (d / "log.txt").read_text() if (d / "log.txt").exists() else ""
        st = {m.group(1): int(m.group(2)) for m in re.finditer(r"^stage (\w+) (\d+)$", log, re.M)}
        line = f"{d.name}: {s['model'].nunique()} models, {len(s)} model-sessions"
        if "trace" in st and "done" in st:
            secs = st["done"] - st["trace"]
            line += f", trace stage {secs} s = {secs / len(s):.2f} s per model-session"
        lines.append(line)
    return section("corpus (whole-model traces, CUPTI per node) and its trace speed", "\n".join(lines))


def write_report(res: Path) -> Path:
    if not res.is_dir():
        raise HaseError("no results folder (run benchmark/collector.py first)", res)
    try:
        where = res.resolve().relative_to(paths.home().resolve())
    except ValueError:
        where = res
    parts = [f"Hase phase 4 profiling report: {where}\n", config_section(res)]
    k, m = _read(res / "kernels.csv"), _read(res / "models.csv")
    if k is not None and len(k):
        parts += kernels_sections(k)
    if m is not None and len(m):
        parts.append(models_section(m))
    parts += [bandwidth_section(res), calibration_section(res), noise_section(res), kernel_space_section(res),
              corpus_section(res)]
    path = res / REPORT
    paths.atomic_write_text(path, "\n".join(parts))
    return path


def main() -> int:
    from hase.benchmark.collector import DEFAULTS
    p = base_parser("Write profiling_report.txt for a phase 4 results folder", "benchmark")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("benchmark", args.log_level)
    slug = cfg["out"] or device_slug(resolve_device(cfg["device"], cfg["device_id"]), cfg["device_id"])
    path = write_report(paths.bench_results_dir() / slug)
    print(path.read_text())
    log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    run_main(main)
