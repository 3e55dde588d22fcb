"""Shared by the test files: run a Hase script in a fresh process, wait for a real Prometheus."""
import os
import subprocess
import sys
import time

import requests


def run_script(args: list, home, check: bool = True, timeout: float = 900, cwd=None):
    """[script, *args] with the project's Python and HASE_HOME=home; AssertionError with the output tail."""
    env = dict(os.environ, HASE_HOME=str(home))
    p = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{args[:1]} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p


def wait_for_series(url: str, query: str, min_value: float = None, timeout_s: float = 60) -> bool:
    """Poll Prometheus' HTTP API until `query` has a result (at least min_value when given)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            res = requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=2).json()["data"]["result"]
            if res and (min_value is None or float(res[0]["value"][1]) >= min_value):
                return True
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.5)
    return False
