"""Soak of the node agent (inference/node_agent.py): many probe ticks, scraped by a real Prometheus.

  python benchmark/soak_node_agent.py [--device cpu] [--set ticks=1000] [--set period_s=0.1] [--set out=DIR]

Starts the agent (as NodeAgent: a child that dies with this process) with a short period and a probe budget
that keep the duty-cycle rule (probe_budget_ms / (1000 * period_s) <= 0.1%), and a real `prometheus` (binary on
PATH, Debian package 'prometheus') scraping it every scrape_s on loopback. It runs until the agent's
hase_launch_probe_ticks_total reaches `ticks`, or max_s (bounded in time), and reports:
  - the agent's RSS (psutil) after its first tick and at the end, and every rss_every_s between: memory must
    stay flat (a per-tick leak of 1 KiB is 1 MiB per 1,000 ticks): growth <= rss_growth_max_mib overall and, in
    a soak of 2 minutes or more, a range <= rss_tail_range_max_mib over its second half (before the agent kept
    only a minute of metric samples, its RSS grew ~20 KiB/s for ten minutes: 1.99 MiB over that half);
  - the duty cycle as Prometheus measured it: the increase of hase_launch_probe_busy_seconds_total over the
    increase of time between the first and the last scrape, against MAX_DUTY (0.1%);
  - the ticks and scrapes seen (Prometheus' own up{} series and the samples it stored), and what ended the soak:
    `ticks` reached, or max_s. On a loaded host a probe tick costs more, and the agent spaces its ticks by
    busy / 0.1% (node_agent.next_tick_s): the measured duty cycle then sits at its bound and fewer ticks fit in
    max_s (a CI run on a loaded 2-core VM: 27 ticks in 236 s, duty 0.0996%). `duty_limited` says so.
Output: soak.json and soak.md in `out` (default benchmark/results/<device slug>/soak/), and one summary line.
The agent's idle reference is not what a soak judges: idle_busy_max 1 (it starts on a busy machine too).
Exit 1 when RSS grew more than rss_growth_max_mib or the duty cycle passed its bound.
"""
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


import psutil  # noqa: E402
import requests  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils import local_prometheus
from hase.utils.local_prometheus import free_port
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import device_slug, provenance, resolve_device  # noqa: E402

DEFAULTS = {"device": "cpu", "ticks": 1000, "period_s": 0.1, "probe_budget_ms": 0.08, "probe_max_runs": 20,
            "interval_s": 0.1, "scrape_s": 1.0, "max_s": 600.0, "rss_every_s": 5.0, "rss_growth_max_mib": 8.0,
            "rss_tail_range_max_mib": 0.5,
            "out": ""}


def start_prometheus(workdir: Path, target_port: int, scrape_s: float) -> tuple:
    """(process, url) of a real Prometheus scraping 127.0.0.1:target_port every scrape_s as job 'hase'."""
    if shutil.which("prometheus") is None:
        raise HaseError("the soak needs the prometheus binary on PATH (Debian package 'prometheus'; .ci/run installs it)")
    return local_prometheus.start_prometheus(workdir, target_port, "hase", scrape_s)


def query(url: str, promql: str, at=None):
    """The first value of an instant query (None: no series yet or not reachable)."""
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    try:
        res = requests.get(f"{url}/api/v1/query", params=params, timeout=5).json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError):
        return None
    return float(res[0]["value"][1]) if res else None


def samples(url: str, metric: str, start: float, end: float) -> list:
    """[(t, value)] of a counter as Prometheus stored it between start and end (its raw scrapes)."""
    try:
        r = requests.get(f"{url}/api/v1/query", timeout=5,
                         params={"query": f"{metric}[{int(end - start) + 2}s]", "time": f"{end:.3f}"}).json()
        vals = r["data"]["result"][0]["values"]
    except (requests.RequestException, ValueError, KeyError, IndexError):
        return []
    return [(float(t), float(v)) for t, v in vals if start <= float(t) <= end]


def check(cfg: dict) -> None:
    from hase.inference.node_agent import MAX_DUTY
    for k in ("ticks", "period_s", "probe_budget_ms", "interval_s", "scrape_s", "max_s", "rss_every_s"):
        if not float(cfg[k]) > 0:
            raise HaseError(f"{k} must be > 0, got {cfg[k]!r}")
    duty = float(cfg["probe_budget_ms"]) / (1e3 * float(cfg["period_s"]))
    if duty > MAX_DUTY:
        raise HaseError(f"probe_budget_ms / period_s is a duty cycle of {duty:.3%} > {MAX_DUTY:.1%}")


def soak(cfg: dict, device: str, log) -> dict:
    from hase.inference.node_agent import MAX_DUTY, NodeAgent
    port = free_port()
    sets = [f"period_s={cfg['period_s']:g}", f"probe_budget_ms={cfg['probe_budget_ms']:g}",
            f"probe_max_runs={int(cfg['probe_max_runs'])}", f"interval_s={cfg['interval_s']:g}", "idle_busy_max=1",
            "idle_check_s=0.2", "idle_budget_ms=50", "warmup=20"]
    rss = []
    with tempfile.TemporaryDirectory(prefix="hase-soak-") as tmp, NodeAgent(device, port, sets) as agent:
        prom, url = start_prometheus(Path(tmp), port, float(cfg["scrape_s"]))
        try:
            proc = psutil.Process(agent.pid)
            t0 = time.monotonic()
            deadline = t0 + float(cfg["max_s"])
            first = None
            while time.monotonic() < deadline and first is None:   # the first scrape that saw a tick
                first = query(url, "hase_launch_probe_ticks_total") or None
                time.sleep(0.2)
            if first is None:
                raise HaseError(f"Prometheus at {url} never scraped a probe tick of the agent within {cfg['max_s']:g} s")
            t_first = time.time()
            rss.append((0.0, proc.memory_info().rss))
            ticks, base, next_rss = first, None, time.monotonic() + float(cfg["rss_every_s"])
            # counted from the first sample Prometheus stored inside the window (the report's ticks are the stored
            # samples' difference; counting from `first`, scraped just before the window, fell a tick short)
            while time.monotonic() < deadline and (base is None or ticks < base + int(cfg["ticks"])):
                time.sleep(min(float(cfg["scrape_s"]), 1.0))
                if not agent.alive():
                    raise HaseError("the node agent died during the soak")
                ticks = query(url, "hase_launch_probe_ticks_total") or ticks
                if base is None:
                    stored = samples(url, "hase_launch_probe_ticks_total", t_first, time.time())
                    base = stored[0][1] if stored else None
                if time.monotonic() >= next_rss:
                    rss.append((time.time() - t_first, proc.memory_info().rss))
                    next_rss += float(cfg["rss_every_s"])
            time.sleep(2 * float(cfg["scrape_s"]))    # the last ticks scraped
            t_last = time.time()
            rss.append((t_last - t_first, proc.memory_info().rss))
            busy = samples(url, "hase_launch_probe_busy_seconds_total", t_first, t_last)
            tick_s = samples(url, "hase_launch_probe_ticks_total", t_first, t_last)
            scrapes = query(url, f'count_over_time(up{{job="hase"}}[{int(t_last - t_first) + 1}s])', t_last)
        finally:
            prom.terminate()
            prom.wait(timeout=10)
    if len(busy) < 2 or len(tick_s) < 2:
        raise HaseError("Prometheus stored fewer than two scrapes of the probe counters")
    duty = (busy[-1][1] - busy[0][1]) / (busy[-1][0] - busy[0][0])
    growth_mib = (rss[-1][1] - rss[0][1]) / 2**20
    half = [r for t, r in rss if t >= rss[-1][0] / 2]
    out = {"device": device, "config": cfg, "ticks": int(tick_s[-1][1] - tick_s[0][1]),
           "ticks_total": int(tick_s[-1][1]), "soak_s": round(t_last - t_first, 1),
           "scrapes": int(scrapes or 0), "scrape_s": cfg["scrape_s"],
           "rss_start_mib": round(rss[0][1] / 2**20, 2), "rss_end_mib": round(rss[-1][1] / 2**20, 2),
           "rss_growth_mib": round(growth_mib, 2),
           "rss_second_half_range_mib": round((max(half) - min(half)) / 2**20, 2),
           "rss_mib_series": [[round(t, 1), round(r / 2**20, 2)] for t, r in rss],
           "duty_cycle": duty, "duty_cycle_bound": MAX_DUTY,
           "configured_duty_cycle": float(cfg["probe_budget_ms"]) / (1e3 * float(cfg["period_s"])),
           "busy_s": busy[-1][1] - busy[0][1], "provenance": provenance(device),
           "stopped_by": "ticks" if tick_s[-1][1] - tick_s[0][1] >= int(cfg["ticks"]) else "max_s",
           # fewer ticks because each cost more, not because the agent stalled: the duty rule kept the pace
           "duty_limited": bool(duty >= 0.5 * MAX_DUTY)}
    # flat: bounded growth overall (the sampler keeps its last minute of samples, so RSS fills for a minute), and,
    # in a soak of two minutes or more, no growth left over its second half
    flat_tail = (max(half) - min(half)) / 2**20
    out["ok"] = bool(duty <= MAX_DUTY and growth_mib <= float(cfg["rss_growth_max_mib"])
                     and (out["soak_s"] < 120 or flat_tail <= float(cfg["rss_tail_range_max_mib"])))
    return out


def report_md(r: dict) -> str:
    return "\n".join([
        f"# Node agent soak ({r['device']}, {r['provenance']['cpu']}, {r['provenance']['date_utc']})", "",
        "`python benchmark/soak_node_agent.py` (config below): the agent on CPU EP with a real Prometheus "
        f"scraping it every {r['scrape_s']:g} s on loopback.", "",
        "| what | value |", "|---|---|",
        f"| probe ticks (scraped) | {r['ticks']} in {r['soak_s']} s (ended by {r.get('stopped_by', 'ticks')}"
        f"{'; paced by the duty rule' if r.get('duty_limited') else ''}) |",
        f"| Prometheus scrapes of the agent | {r['scrapes']} |",
        f"| RSS after the first tick / at the end | {r['rss_start_mib']} / {r['rss_end_mib']} MiB "
        f"(growth {r['rss_growth_mib']:+.2f} MiB; range over the second half {r['rss_second_half_range_mib']} MiB) |",
        f"| duty cycle measured (Δ busy_seconds_total / Δ t, Prometheus) | {r['duty_cycle']:.4%} "
        f"(bound {r['duty_cycle_bound']:.1%}; configured {r['configured_duty_cycle']:.3%}) |",
        f"| within bounds | {'yes' if r['ok'] else 'NO'} |", "",
        "RSS (MiB) every few seconds: " + ", ".join(f"{t:g} s {m}" for t, m in r["rss_mib_series"]), "",
        "Config: `" + json.dumps(r["config"]) + "`", ""])


def main() -> int:
    p = base_parser("Soak the node agent: probe ticks scraped by a real Prometheus; RSS and duty cycle", "benchmark")
    p.set_defaults(config=None)
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    check(cfg)
    log = get_logger("soak", args.log_level)
    device = resolve_device(cfg["device"])
    r = soak(cfg, device, log)
    out = Path(cfg["out"]) if cfg["out"] else paths.bench_results_dir() / device_slug(device) / "soak"
    paths.atomic_write_text(out / "soak.json", json.dumps(r, indent=1) + "\n")
    paths.atomic_write_text(out / "soak.md", report_md(r))
    print(f"soak: {r['ticks']} ticks in {r['soak_s']} s, {r['scrapes']} scrapes; RSS {r['rss_start_mib']} -> "
          f"{r['rss_end_mib']} MiB; duty cycle {r['duty_cycle']:.4%} (bound {r['duty_cycle_bound']:.1%}); "
          f"{'ok' if r['ok'] else 'OUT OF BOUNDS'}; wrote {out}/soak.md")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_main(main)
