"""benchmark/paired_labels.py: slowdowns whose idle runs are taken in the same session, the neighbour paused."""
import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def run_tool(args: list, home, timeout: float = 300):
    env = dict(os.environ, HASE_HOME=str(home))
    return subprocess.run([PY, "benchmark/paired_labels.py", "--device", "cpu", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_pause_is_checked_on_a_real_process():
    from hase.benchmark.paired_labels import Pausable, process_state
    p = subprocess.Popen([PY, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        nb = Pausable(p.pid)
        nb.pause(0.0)
        assert process_state(p.pid) == "T"
        nb.check_paused()
        nb.resume(0.05)
        assert process_state(p.pid) in ("R", "S")
        with pytest.raises(Exception, match=f"neighbour pid {p.pid} is not stopped before an idle block"):
            nb.check_paused()
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait()
    assert process_state(p.pid) == ""   # gone (reaped)


def test_paired_run_alternates_blocks_and_leaves_the_neighbour_running():
    from hase.benchmark.paired_labels import Pausable, paired_run, process_state
    p = subprocess.Popen([PY, "-c", "import time\nwhile True: time.sleep(0.01)"])
    seen = []
    try:
        nb = Pausable(p.pid)

        def run():   # a "model" whose run time depends on the neighbour's state: 1 ms paused, 3 ms running
            stopped = process_state(p.pid) == "T"
            seen.append(stopped)
            time.sleep(0.001 if stopped else 0.003)
        cfg = {"rounds": 2, "block_ms": 30.0, "min_loops": 3, "max_loops": 1000, "pause_settle_s": 0.0,
               "resume_settle_s": 0.02}
        r = paired_run(run, nb, cfg)
        assert process_state(p.pid) in ("R", "S")   # resumed at the end
    finally:
        p.kill()
        p.wait()
    assert len(r["per_round"]) == 2 and any(seen) and not all(seen)
    assert len(r["idle"]) + len(r["loaded"]) == len(seen)
    for s in r["per_round"]:
        assert 1.8 < s < 4.0   # 3 ms against 1 ms, sleep overheads aside


def test_paired_labels_cli_on_cpu(tmp_path, tiny_onnx):
    from hase.benchmark.paired_labels import load_tag
    from hase.inference.fit_interference import canonical_load
    out = tmp_path / "paired.csv"
    args = ["--set", f"models=[{tiny_onnx}]", "--set", "loads=[host_spin:1.0]", "--set", "sessions=2",
            "--set", "rounds=2", "--set", "block_ms=20", "--set", "warmup=2", "--set", "threads=1",
            "--set", f"out={out}"]
    r = run_tool(args, tmp_path)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(out)))
    assert [(x["load"], x["session"]) for x in rows] == [("host_spin@1", "0"), ("host_spin@1", "1")]
    assert load_tag("host_spin", 1.0) == canonical_load("host_spin@1.0")   # fit_interference reads the same name
    for x in rows:
        assert float(x["slowdown"]) == pytest.approx(float(x["loaded_mean_ms"]) / float(x["idle_mean_ms"]), rel=1e-3)
        assert len(x["round_slowdowns"].split(";")) == 2 and int(x["idle_n"]) >= 6 and int(x["loaded_n"]) >= 6
        assert x["neighbour_pid"] != x["pid"]
        from hase.benchmark.paired_labels import process_state
        assert process_state(int(x["neighbour_pid"])) == ""   # the neighbour is gone after its load
    again = run_tool(args, tmp_path)   # resumable: nothing left to do
    assert again.returncode == 0 and "wrote 0 rows" in again.stderr
    assert len(list(csv.DictReader(open(out)))) == 2


@pytest.mark.parametrize("override, needle", [
    ("loads=[cnn_train]", "config loads: 'cnn_train' is not name:knob with a knob in (0, 1]"),
    ("loads=[cnn_train:1.5]", "config loads: 'cnn_train:1.5' is not name:knob with a knob in (0, 1]"),
    ("loads=[]", "config loads: no neighbour given"),
    ("rounds=0", "config rounds: must be at least 1, got 0"),
])
def test_paired_labels_bad_config_is_one_line(tmp_path, tiny_onnx, override, needle):
    base = {"models": f"[{tiny_onnx}]", "loads": "[host_spin:0.5]", "out": str(tmp_path / "x.csv")}
    k, v = override.split("=", 1)
    base[k] = v
    r = run_tool([a for kv in base.items() for a in ("--set", f"{kv[0]}={kv[1]}")], tmp_path, timeout=120)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr
