"""The host speed study (issue 23 item 4): its plan of settings, its spread statistic, and a real run of fresh
worker processes on the CPU EP (real ORT sessions) whose analysis writes a summary and a plot."""
import json
from pathlib import Path

import numpy as np
import pytest

from hase.benchmark import host_speed_study as hs
from hase.utils.errors import HaseError
from helpers import run_script

REPO = Path(__file__).resolve().parent.parent


def test_cpulist_and_pair_spread():
    assert hs.cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert hs.pair_spread_pct([1.0, 1.0, 1.0]) == 0.0
    # pairs: |1-2|/1.5, |1-1|, |2-1|/1.5 -> median 66.7%
    assert hs.pair_spread_pct([1.0, 2.0, 1.0]) == pytest.approx(100 / 1.5)
    assert np.isnan(hs.pair_spread_pct([1.0]))


def test_plan_skips_what_the_machine_cannot_express():
    lay = {"allowed_cpus": [0, 1, 2, 3], "numa_nodes": {"0": [0, 1], "1": [2, 3]}, "gpu_numa_node": 1,
           "gpu_local_cpus": [2, 3], "siblings": {"0": [0], "1": [1], "2": [2, 3], "3": [2, 3]}}
    p = hs.plan(lay, ["default", "gpu_node", "other_node", "one_core", "busy_sibling", "host_load", "cpu1", "cpu9"])
    c = p["conditions"]
    assert c["gpu_node"]["cpus"] == [2, 3] and c["gpu_node"]["membind"] == 1
    assert c["other_node"]["cpus"] == [0, 1]
    assert c["one_core"]["cpus"] == [2] and c["busy_sibling"]["load"] == [3]   # a CPU with a sibling, loaded
    assert c["host_load"]["load"] == [0, 1, 2, 3] and c["cpu1"]["cpus"] == [1]
    assert p["skipped"] == {"cpu9": "not an allowed CPU"}
    a = hs.plan(lay, ["awake", "one_core_awake"])["conditions"]   # one other CPU busy, never the worker's or its sibling
    assert a["awake"]["cpus"] is None and a["awake"]["load"] == [1]
    assert a["one_core_awake"]["cpus"] == [2] and a["one_core_awake"]["load"] == [1]
    lone = {"allowed_cpus": [0], "numa_nodes": {"0": [0]}, "gpu_numa_node": 0, "gpu_local_cpus": [0], "siblings": {"0": [0]}}
    assert hs.plan(lone, ["awake"])["skipped"] == {"awake": "no CPU besides the worker's"}
    one = dict(lay, numa_nodes={"0": [0, 1, 2, 3]}, siblings={str(i): [i] for i in range(4)})
    assert set(hs.plan(one, ["other_node", "busy_sibling"])["skipped"]) == {"other_node", "busy_sibling"}
    with pytest.raises(HaseError, match="conditions"):
        hs.plan(lay, ["nope"])


def test_group_pools_one_cpu_settings():
    assert {hs.group_of(c) for c in ("cpu3", "one_core", "one_core_t1")} == {"one_cpu"}
    assert hs.group_of("default") == "default"
    assert hs.group_of("one_core_awake") == "one_core_awake" and hs.group_of("awake") == "awake"


def test_study_runs_fresh_workers_on_cpu_ep(tmp_path):
    import torch
    m = tmp_path / "chain_bs1_16x16.onnx"
    torch.onnx.export(torch.nn.Sequential(*[torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(4)]).eval(),
                      torch.zeros(1, 4, 16, 16), str(m), opset_version=17, dynamo=False)
    out = tmp_path / "study"
    run_script([REPO / "benchmark/host_speed_study.py", "--device", "cpu", "--set", f"models=[{m}]",
                "--set", "reps=2", "--set", "budget_ms=20", "--set", "min_loops=5", "--set", "warmup=2",
                "--set", "conditions=[default, cpu0]", "--set", f"out={out}"], tmp_path, timeout=300)
    rows = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted((r["condition"], r["rep"]) for r in rows) == [("cpu0", 0), ("cpu0", 1), ("default", 0), ("default", 1)]
    assert len({r["pid"] for r in rows}) == 4                      # a fresh process each
    assert all(r["latency_ms"] > 0 and r["host_index_us"] > 0 for r in rows)
    assert {r["cpu"] for r in rows if r["condition"] == "cpu0"} == {0}   # the binding held
    s = json.loads((out / "summary.json").read_text())
    assert set(s["by_setting"]) == {"default", "one_cpu"} and (out / "host_speed.png").stat().st_size > 1000
    # resumes: a second run with the same folder starts no worker
    p = run_script([REPO / "benchmark/host_speed_study.py", "--device", "cpu", "--set", f"models=[{m}]",
                    "--set", "reps=2", "--set", "conditions=[default, cpu0]", "--set", f"out={out}"], tmp_path)
    assert "rep 0" not in p.stderr + p.stdout


def test_no_models_is_a_one_line_error(tmp_path):
    p = run_script([REPO / "benchmark/host_speed_study.py", "--device", "cpu", "--set", "models=[/no/such/*.onnx]",
                    "--set", f"out={tmp_path}"], tmp_path, check=False)
    assert p.returncode != 0 and "no model files match" in p.stderr and "Traceback" not in p.stderr
