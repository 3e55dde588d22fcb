"""A real Prometheus on loopback, for tests and benchmarks that need one (the binary on PATH: Debian's
'prometheus' package, which .ci/run installs), and a free local port."""
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_prometheus(workdir, target_port: int, job: str = "hase", scrape_s: float = 1.0) -> tuple:
    """(process, base url) of a Prometheus scraping 127.0.0.1:target_port every scrape_s as `job`, its config and
    data under workdir. The caller terminates it."""
    workdir = Path(workdir)
    port = free_port()
    cfg = workdir / "prometheus.yml"
    cfg.write_text(f"global: {{scrape_interval: {scrape_s:g}s, evaluation_interval: {scrape_s:g}s}}\n"
                   f"scrape_configs:\n  - job_name: {job}\n"
                   f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"
