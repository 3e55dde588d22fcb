"""Latency of `hase serve` as a scheduler sees it: POST /v1/predict of an analysed model at a fixed request rate, and
POST /v1/place over 8 GPUs whose load comes from a real Prometheus (scraping a stand-in exporter of 8 GPUs' DCGM
fields). Needs the `prometheus` binary (Debian package 'prometheus'), fastapi and uvicorn.

  python -m hase.benchmark.serve_bench [--rate 50] [--seconds 30] [--place 200] [--out benchmark/results/serve]

The server runs in its own process (`hase serve`, one uvicorn worker); requests are open-loop at --rate (each sent
at its scheduled time by a pool of client threads, latency = response time of that request). Writes
<out>/serve_bench.json and <out>/report.md with the machine it ran on.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


import numpy as np  # noqa: E402
import requests  # noqa: E402

from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.local_prometheus import free_port, start_prometheus  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECORDS = REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200" / "records.json.xz"
BUSY = (0.9, 0.1, 0.55, 0.0, 0.75, 0.3, 0.65, 0.2)


def wait_until(fn, timeout_s: float, what: str):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if fn():
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise HaseError(f"{what} not ready within {timeout_s:.0f} s")


def quantiles(ms: list) -> dict:
    a = np.array(ms)
    return {"n": int(len(a)), "p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max()), "mean_ms": float(a.mean())}


def open_loop(url: str, body: dict, rate: float, seconds: float, threads: int = 16) -> tuple:
    """Requests at `rate`/s for `seconds`, each sent at its scheduled time; (latencies ms, errors, lag ms p99)."""
    local = threading.local()
    n = int(rate * seconds)
    t0 = time.perf_counter() + 0.2
    lat, lag, errors = [None] * n, [None] * n, []

    def one(i):
        s = getattr(local, "s", None) or requests.Session()
        local.s = s
        due = t0 + i / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        start = time.perf_counter()
        r = s.post(url, json=body, timeout=30)
        lat[i] = (time.perf_counter() - start) * 1e3
        lag[i] = (start - due) * 1e3
        if r.status_code != 200:
            errors.append(r.text[:200])
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, range(n)))
    return lat, errors, float(np.percentile(lag, 99))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--place", type=int, default=200, help="sequential /v1/place requests")
    p.add_argument("--model", default="resnet50_bs16_224x224", help="a model of the committed H200 records")
    p.add_argument("--target", default="nvidia-h200", help="the GPU kind of every candidate")
    p.add_argument("--out", type=Path, default=REPO / "benchmark" / "results" / "serve")
    args = p.parse_args()
    import shutil
    if shutil.which("prometheus") is None:
        raise HaseError("the prometheus binary is needed (Debian package 'prometheus')")
    from prometheus_client import CollectorRegistry, Gauge, start_http_server
    from hase.graph_model.dag_critical_path import records_in_file
    record = records_in_file(str(RECORDS))[args.model]
    tmp = Path(tempfile.mkdtemp(prefix="hase_bench_"))
    reg = CollectorRegistry()
    g = {f: Gauge(f, f, ["gpu", "Hostname"], registry=reg) for f in
         ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_DRAM_ACTIVE")}
    for i, b in enumerate(BUSY):
        g["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].labels(str(i), "node1").set(b)
        g["DCGM_FI_DEV_SM_CLOCK"].labels(str(i), "node1").set(1980)
        g["DCGM_FI_PROF_DRAM_ACTIVE"].labels(str(i), "node1").set(b / 4)
    exp_port = free_port()
    exporter, _ = start_http_server(exp_port, addr="127.0.0.1", registry=reg)
    prom, prom_url = start_prometheus(tmp, exp_port, job="dcgm")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "hase.cli", "serve", "--port", str(port), "--prometheus", prom_url,
                               "--preload", args.target, "--target", args.target], cwd=REPO, env=dict(os.environ, HASE_HOME=str(tmp / "home")),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: requests.get(f"{prom_url}/api/v1/query", params={
            "query": "count_over_time(DCGM_FI_DEV_SM_CLOCK[1m])"}, timeout=2).json()["data"]["result"], 60, "prometheus")
        time.sleep(3)
        wait_until(lambda: requests.get(f"{url}/healthz", timeout=2).status_code == 200, 120, "hase serve")
        r = requests.post(f"{url}/v1/predict", json={"record": record, "breakdown": False}, timeout=60)
        r.raise_for_status()
        aid = r.json()["analysis_id"]
        load = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.4, "DCGM_FI_DEV_SM_CLOCK": 1980.0, "DCGM_FI_PROF_DRAM_ACTIVE": 0.1}
        res = {}
        for name, body in (("predict_breakdown", {"analysis_id": aid, "load": load}),
                           ("predict_no_breakdown", {"analysis_id": aid, "load": load, "breakdown": False})):
            open_loop(f"{url}/v1/predict", body, args.rate, 2.0)   # warm-up
            lat, errors, lag = open_loop(f"{url}/v1/predict", body, args.rate, args.seconds)
            res[name] = {**quantiles(lat), "rate_per_s": args.rate, "errors": len(errors), "client_lag_p99_ms": lag}
            print(name, json.dumps(res[name]))
        cands = [{"target": args.target, "selector": f'gpu="{i}",Hostname="node1"', "name": f"gpu{i}"}
                 for i in range(len(BUSY))]
        s = requests.Session()
        lat, order = [], None
        for i in range(args.place + 5):
            t = time.perf_counter()
            r = s.post(f"{url}/v1/place", json={"analysis_id": aid, "candidates": cands}, timeout=60)
            if i >= 5:
                lat.append((time.perf_counter() - t) * 1e3)
            r.raise_for_status()
            order = [c["name"] for c in r.json()["ranked"]]
            bad = [c for c in r.json()["ranked"] if "error" in c]
            if bad:
                raise HaseError(f"/v1/place: {bad[0]['name']}: {bad[0]['error']}")
        res["place_8_gpus_prometheus"] = {**quantiles(lat), "ranked": order, "sequential": True}
        print("place", json.dumps(res["place_8_gpus_prometheus"]))
    finally:
        server.terminate()
        prom.terminate()
        exporter.shutdown()
        for proc in (server, prom):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    import psutil
    machine = {"cpu_cores_logical": psutil.cpu_count(), "cpu": platform.processor() or platform.machine(),
               "load_avg_1m_at_end": os.getloadavg()[0], "python": platform.python_version(),
               "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    out = {"machine": machine, "model": args.model, "kernels": len(record["kernels"]), "results": res,
           "targets": {"predict_p99_ms": 50, "place_8_gpus_p99_ms": 200}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "serve_bench.json").write_text(json.dumps(out, indent=1) + "\n")
    rows = [f"| {k} | {v['n']} | {v.get('rate_per_s', 'sequential')} | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} | "
            f"{v['max_ms']:.1f} |" for k, v in res.items()]
    (args.out / "report.md").write_text(
        f"# `hase serve` latency ({machine['date_utc']}, {machine['cpu_cores_logical']} logical cores, load average "
        f"{machine['load_avg_1m_at_end']:.1f} at the end)\n\n"
        f"`python -m hase.benchmark.serve_bench` (server: one uvicorn worker; model {args.model}, {len(record['kernels'])} "
        f"kernels, analysed once; the {args.target} shipped predictor). /v1/place reads 8 GPUs' load from a real Prometheus "
        f"scraping a stand-in exporter.\n\n| request | n | rate/s | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows) + "\n\nTargets: /v1/predict p99 <= 50 ms at 50 req/s; /v1/place over 8 GPUs p99 <= 200 ms.\n")
    return 0


if __name__ == "__main__":
    run_main(main)
