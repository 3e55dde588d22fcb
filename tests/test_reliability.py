"""Issue 26: what a new user hit on a clean clone. Each test names its item.

Real scripts in fresh processes (one-line errors, exit 2), real ORT sessions and a real psutil sampler; the
busy machine of item 1 is a real CPU stressor process. No wall-clock thresholds.
"""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

from hase.utils import config  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402
from test_phase4_benchmark import one_error_line  # noqa: E402

PY = sys.executable


def script(args: list, home, timeout: float = 300):
    import os
    env = dict(os.environ, HASE_HOME=str(home))
    return subprocess.run([PY, *map(str, args)], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


# ---- item 3: every config value is checked against its default's type and range ----------------------
@pytest.mark.parametrize("override, needle", [
    ("sample_s=abc", "config key 'sample_s' = \"abc\" is not valid (expected a number >= 0"),
    ("sample_s=-1", "config key 'sample_s' = -1 is not valid (expected a number >= 0"),
    ("sample_s=.nan", "config key 'sample_s' = nan is not valid (expected a number >= 0"),
    ("io_binding=1", "config key 'io_binding' = 1 is not valid (expected true or false"),
    ("top_kernels=[1]", "config key 'top_kernels' = [1] is not valid (expected a number >= 0"),
    ("probe.max_age_s=soon", "config key 'probe.max_age_s' = \"soon\" is not valid"),
    ("pin_dims=3", "config key 'pin_dims' must be a mapping"),
])
def test_config_values_checked_against_defaults(override, needle):
    from hase.inference.predict_model_latency import DEFAULTS
    with pytest.raises(HaseError) as e:
        config.resolve(DEFAULTS, None, [override])
    msg = str(e.value)
    assert msg.startswith(f"--set {override}: ") and needle in msg and "\n" not in msg


def test_config_file_values_checked_and_good_ones_kept(tmp_path):
    from hase.benchmark.collector import DEFAULTS
    bad = tmp_path / "c.yaml"
    bad.write_text("stress_levels: [0, high]\n")
    with pytest.raises(HaseError, match=rf"^{bad}: config key 'stress_levels' = \[0, \"high\"\] is not valid "
                                        r"\(expected a list of numbers"):
        config.resolve(DEFAULTS, bad)
    bad.write_text("runner: {budget_ms: fast}\n")
    with pytest.raises(HaseError, match=r"config key 'runner.budget_ms' = \"fast\""):
        config.resolve(DEFAULTS, bad)
    # what the defaults allow still resolves: ints for floats, a number for a string key, None defaults
    cfg = config.resolve(DEFAULTS, None, ["settle_s=1", "out=2024", "stress_levels=[0,0.6]", "max_minutes=0.5"])
    assert cfg["settle_s"] == 1 and cfg["out"] == "2024" and cfg["stress_levels"] == [0, 0.6]
    from hase.training.train_kernel_model import DEFAULTS as TD
    assert config.resolve(TD, None, ["random_forest.max_depth=8"])["random_forest"]["max_depth"] == 8


def test_shipped_configs_pass_their_checks():
    """Every phase's committed YAML resolves against its script's defaults."""
    import importlib
    pairs = {"hase.training.train_kernel_model": "training/config.yaml", "hase.graph_model.dag_critical_path": "graph_model/config.yaml",
             "hase.kernel_model.kernel_builder": "kernel_model/config.yaml", "hase.kernel_model.kernel_sampler": "kernel_model/sampler.yaml",
             "hase.benchmark.trace_run": "benchmark/trace_run.yaml", "hase.benchmark.multi_kernel_runner": "benchmark/multi_kernel.yaml",
             "hase.benchmark.peak_bench": "benchmark/peak_bench.yaml", "hase.benchmark.collector": "benchmark/config.yaml",
             "hase.inference.fit_cpu_timeline": "inference/cpu_timeline.yaml",
             "hase.inference.fit_measured_timeline": "inference/measured_timeline.yaml",
             "hase.inference.node_agent": "inference/node_agent.yaml", "hase.inference.fit_interference": "inference/interference.yaml",
             "hase.inference.judge_timeline": "inference/judge_timeline.yaml",
             "hase.inference.predict_model_latency": "inference/config.yaml", "hase.model_zoo.torchvision_exporter": "model_zoo/config.yaml",
             "hase.ort_analysis.fusion_detector": "ort_analysis/config.yaml", "hase.training.kernel_space_report":
             "training/kernel_space_report.yaml"}
    for mod, path in pairs.items():
        config.resolve(importlib.import_module(mod).DEFAULTS, REPO / path)


def test_bad_set_value_is_one_line_exit_2(tmp_path):
    """The issue's case: `--set sample_s=abc` ended in a ValueError traceback at the first sample."""
    r = script(["inference/predict_model_latency.py", "--device", "cpu", "--model", tmp_path / "m.onnx",
                "--set", "sample_s=abc"], tmp_path)
    assert "Traceback" not in r.stderr
    line = one_error_line(r)
    assert "config key 'sample_s' = \"abc\"" in line and "expected a number >= 0" in line


# ---- item 4: a config path that does not exist is an error in every script ----------------------------
@pytest.mark.parametrize("argv", [
    ["evaluator.py", "--device", "cpu", "--from-csv", "x.csv"],
    ["inference/predict_model_latency.py", "--device", "cpu", "--model", "x.onnx"],
    ["benchmark/collector.py", "--device", "cpu"],
])
def test_missing_config_file_is_an_error(tmp_path, argv):
    r = script(argv + ["--config", "/no_such.yaml"], tmp_path)
    assert one_error_line(r) == "error: /no_such.yaml: config file not found"


def test_evaluator_reads_a_given_config(tmp_path):
    """The evaluator read no config at all; a --config given is read (and checked) like --set."""
    bad = tmp_path / "ev.yaml"
    bad.write_text("label_sessions: many\n")
    r = script(["evaluator.py", "--device", "cpu", "--config", bad, "--from-csv", "x.csv"], tmp_path)
    assert one_error_line(r).startswith(f"error: {bad}: config key 'label_sessions' = \"many\" is not valid")


# ---- item 7: --device auto without a GPU prints nothing of the probe's ORT log --------------------------
def test_device_auto_probe_log_goes_to_the_debug_log(tmp_path):
    r = subprocess.run([PY, "-c", "from hase.utils.ort_session import resolve_device; print(resolve_device('auto'))"],
                       cwd=REPO, env={**__import__("os").environ, "HASE_HOME": str(tmp_path)}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() in ("cpu", "cuda")
    assert r.stderr == "", r.stderr   # before: three coloured ORT lines about libcublasLt / CUDAExecutionProvider
    probe_log = tmp_path / "logs" / "cuda_probe.log"
    if r.stdout.strip() == "cpu" and "CUDAExecutionProvider" in __import__("onnxruntime").get_available_providers():
        assert "CUDA" in probe_log.read_text()   # ORT said why CUDA did not load: kept for whoever debugs it


# ---- item 1: an idle reference taken under load is refused -----------------------------------------------
class Windows:
    """A metrics source whose successive windows are the given values (a neighbour that stops, or does not)."""
    name = "fixed"

    def __init__(self, values):
        self.values, self.n = list(values), 0

    def window(self, start, end):
        v = self.values[min(self.n, len(self.values) - 1)]
        self.n += 1
        return {"CPU_UTIL_PCT": v, "MEM_USED_MB": 1.0}


def test_wait_idle_waits_for_an_idle_window_then_refuses():
    from hase.benchmark.gpu_metrics import busy_reading, wait_idle
    src = Windows([96.8, 80.0, 4.0])           # the neighbour stops: the third window is the reference
    assert wait_idle(src, 0.1, 0.01, 5.0)["CPU_UTIL_PCT"] == 4.0 and src.n == 3
    with pytest.raises(HaseError) as e:         # it never stops: bounded, then one line naming field, value, threshold
        wait_idle(Windows([96.8]), 0.1, 0.01, 0.05, "idle_busy_max", "idle reference")
    msg = str(e.value)
    assert msg.startswith("not idle for the idle reference: CPU_UTIL_PCT = 96.8 % in each of ") and "\n" not in msg
    assert "> 10 % (idle_busy_max 0.1)" in msg
    assert wait_idle(Windows([96.8]), 1.0, 0.01, 0.0)["CPU_UTIL_PCT"] == 96.8   # busy_max 1: never refused
    assert busy_reading({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": math.nan, "DCGM_FI_DEV_GPU_UTIL": 40.0}) == \
        ("DCGM_FI_DEV_GPU_UTIL", 40.0, 0.4)


@pytest.fixture
def neighbour():
    """A real CPU neighbour: the plan's stressor at full intensity (one core busy)."""
    from hase.benchmark.stressor import Stressor
    with Stressor(1.0, "matmul", "cpu") as s:
        import time
        time.sleep(1.0)   # its first matmuls are under way
        yield s


def last_error_line(r) -> str:
    """The one-line error a script ends with (its log may come before it), exit 2, no traceback."""
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), r.stderr[-2000:]
    return line


def not_idle_line(r, what: str) -> str:
    line = last_error_line(r)
    assert line.startswith(f"error: not idle for the {what}: CPU_UTIL_PCT = "), line
    assert "> 10 % (idle_busy_max 0.1)" in line or "> 5 % (idle_busy_max 0.05)" in line, line
    return line


def test_collector_refuses_a_loaded_level_0(tmp_path, neighbour):
    from helpers import build_residual_model
    mdir = tmp_path / "model_zoo" / "models"
    mdir.mkdir(parents=True)
    build_residual_model(mdir / "tiny_bs1_16x16.onnx", "tiny", 8, 1, 16)
    r = script(["benchmark/collector.py", "--device", "cpu", "--set", "stress_levels=[0]", "--set", "kernel_glob=",
                "--set", "settle_s=0", "--set", "idle_window_s=0.3", "--set", "idle_wait_s=1.5"], tmp_path)
    line = not_idle_line(r, "idle reference (stressor-matmul at level 0)")
    assert "stop the neighbour, or raise idle_busy_max" in line
    models_csv = next((tmp_path / "benchmark" / "results").glob("*/models.csv"))
    assert len(models_csv.read_text().strip().splitlines()) == 1   # the header only: nothing was measured


def test_calibrate_loads_refuses_a_loaded_idle_row(tmp_path, neighbour):
    r = script(["benchmark/calibrate_loads.py", "--device", "cpu", "--set", "settle_s=0",
                "--set", "calibration.stressor_levels=[0]", "--set", "calibration.stressor_modes=[matmul]",
                "--set", "calibration.sample_s=0.3", "--set", "idle_window_s=0.3", "--set", "idle_wait_s=1"], tmp_path)
    not_idle_line(r, "idle row (the probe's idle reference)")
    assert not list((tmp_path / "benchmark" / "results").glob("*/load_calibration.csv"))


def test_node_agent_refuses_to_measure_its_idle_reference_under_load(tmp_path, neighbour):
    from helpers import free_port
    r = script(["inference/node_agent.py", "--device", "cpu", "--port", free_port(), "--set", "warmup=2",
                "--set", "idle_check_s=0.3", "--set", "idle_wait_s=1"], tmp_path, timeout=120)
    assert "(or set idle_probe_us)" in not_idle_line(r, "node agent's idle reference (or set idle_probe_us)")


def test_trace_run_refuses_to_measure_sessions_under_load(tmp_path, neighbour):
    """trace_run's sessions are the timeline fits' idle reference: next to a busy neighbour it waits, then stops
    with one line, and writes no session."""
    from helpers import build_residual_model
    mp = tmp_path / "tiny_bs1_16x16.onnx"
    build_residual_model(mp, "tiny", 8, 1, 16)
    r = script(["benchmark/trace_run.py", "--device", "cpu", "--set", f"models=[{mp}]", "--set", "sessions=1",
                "--set", "calibrate=false", "--set", "idle_window_s=0.3", "--set", "idle_wait_s=1"], tmp_path)
    not_idle_line(r, "trace_run (its sessions are an idle reference)")
    assert not list((tmp_path / "benchmark" / "results").glob("*/timeline/trace_sessions.csv"))


def test_timeline_fits_drop_sessions_recorded_under_load(tmp_path):
    """The fits read the recorded background load: sessions above idle_busy_max leave with their nodes (a
    warning), all of them is one line naming the field; sessions recorded before the column existed stay."""
    import pandas as pd
    from hase.benchmark.gpu_metrics import drop_busy_sessions
    from hase.inference.fit_cpu_timeline import read_tables
    from hase.inference.fit_measured_timeline import read_clean
    d = tmp_path / "machine_a"
    d.mkdir()
    s = pd.DataFrame({"model": ["m_bs1"] * 3, "session": [0, 1, 2], "threads": [2] * 3,
                      "e2e_median_ms": [1.0, 3.0, 1.1], "ort_node_sum_us": [900.0, 2900.0, 1000.0], "n_nodes": [2] * 3,
                      "bg_busy_field": ["CPU_UTIL_PCT"] * 3, "bg_busy_value": [3.0, 96.8, math.nan],
                      "bg_busy_frac": [0.03, 0.968, math.nan]})
    n = pd.DataFrame({"model": ["m_bs1"] * 6, "session": [0, 0, 1, 1, 2, 2], "node": ["a", "b"] * 3,
                      "op": ["Conv", "Relu"] * 3, "host_us": [1.0] * 6})
    s.to_csv(d / "trace_sessions.csv", index=False)
    n.to_csv(d / "trace_nodes.csv", index=False)
    ss, nn = read_tables([d], 2)
    assert sorted(ss["session"]) == [0, 2] and sorted(set(nn["session"])) == [0, 2] and len(nn) == 4
    ss, nn = read_tables([d], 2, busy_max=1.0)        # 1: every session counts
    assert len(ss) == 3 and len(nn) == 6
    with pytest.raises(HaseError) as e:
        drop_busy_sessions(s.iloc[1:2], 0.1, "CPU trace_run sessions")
    msg = str(e.value)
    assert msg.startswith("CPU trace_run sessions: no idle session: CPU_UTIL_PCT = 96.8 % before 1 of 1 sessions")
    assert "(idle_busy_max 0.1)" in msg and "\n" not in msg
    # the clean labels' own column (clean_bg_busy_*), as clean_labels.py records it
    pd.DataFrame({"model": ["m_bs1"] * 2, "session": [0, 1], "e2e_clean_median_ms": [1.0, 2.5],
                  "clean_calib_host_index_us": [7.0, 7.0], "clean_bg_busy_field": ["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] * 2,
                  "clean_bg_busy_value": [0.0, 0.6], "clean_bg_busy_frac": [0.0, 0.6]}).to_csv(
        d / "clean_sessions.csv", index=False)
    assert list(read_clean([d])["session"]) == [0]


def test_node_agent_refuses_busy_fixed_values(tmp_path):
    from helpers import free_port
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps({"CPU_UTIL_PCT": 96.8, "MEM_USED_MB": 4000}))
    r = script(["inference/node_agent.py", "--device", "cpu", "--port", free_port(), "--fixed", fixed,
                "--set", "warmup=2"], tmp_path, timeout=120)
    assert one_error_line(r) == ("error: not idle for the node agent's idle reference: CPU_UTIL_PCT = 96.8 % in the "
                                 "--fixed values > 5 % (idle_busy_max 0.05); set idle_probe_us")


# ---- item 2: local sampling long enough for the busy field's noise -----------------------------------------
def test_local_sampling_stops_on_the_busy_fields_noise():
    from hase.inference.predict_model_latency import DEFAULTS, sampled_enough
    cfg = dict(DEFAULTS)   # at least 1 s, then standard error <= 0.02, at most 5 s
    assert sampled_enough([0.5, 0.5], 0.5, cfg)[0] is False            # never before sample_s
    done, se = sampled_enough([0.50, 0.51, 0.49, 0.50], 1.0, cfg)
    assert done and se < 0.02
    swinging = [0.02, 0.97, 0.05, 0.95]                                  # a neighbour switching on and off
    assert sampled_enough(swinging, 1.0, cfg) == (False, pytest.approx(0.267, abs=1e-3))
    assert sampled_enough(swinging * 5, 5.0, cfg)[0] is True            # bounded
    assert sampled_enough([None] * 4, 1.0, cfg)[0] is True              # no busy field: sample_s


def test_the_cpu_background_leaves_out_this_process():
    """A background window (snapshot: the measuring process idle) is the other processes' load: ORT's intra-op
    threads spin after each run (80% of a core in the measuring process itself), and the main job's idle check
    refused on that on an idle 2-core machine. A window over the item's own run still counts the item."""
    import time
    from hase.benchmark.gpu_metrics import PsutilSampler, snapshot

    class FakePs:   # the machine: 60% of 2 cores busy, 100% of one core of them this process's
        def cpu_percent(self, interval=None):
            return 60.0

        def cpu_freq(self):
            return None

        def virtual_memory(self):
            return type("M", (), {"used": 1e9})()

    class Me:
        def cpu_percent(self, interval=None):
            return 100.0
    s = PsutilSampler(period_ms=10)
    s._ps, s._me, s._ncpu = FakePs(), Me(), 2
    s.start()
    try:
        t0 = time.time()
        time.sleep(0.1)
        assert s.window(t0, time.time())["CPU_UTIL_PCT"] == pytest.approx(60.0)   # the item's window: all of it
        assert snapshot(s, 0.1)["CPU_UTIL_PCT"] == pytest.approx(10.0)            # background: the others only
        s._me = type("Idle", (), {"cpu_percent": lambda self, interval=None: 0.0})()
        time.sleep(0.05)
        assert snapshot(s, 0.1)["CPU_UTIL_PCT"] == pytest.approx(60.0)            # a neighbour's load stays
    finally:
        s.stop()


def test_cpu_ep_words_for_the_absent_launch_wait():
    """Item 9: EP-appropriate words. Without the probe field a CPU EP prediction is made from the CPU fields, not
    'DCGM-only'; on CUDA the words stay."""
    import time
    from hase.inference.load_sources import launch_wait
    _, info, warning = launch_wait({"CPU_UTIL_PCT": 3.0}, "local sampling", 60.0, time.time(), "cpu")
    assert "CPU-metrics-only prediction" in warning and "DCGM" not in warning
    _, _, warning = launch_wait({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.1}, "local sampling", 60.0, time.time(), "cuda")
    assert "absent from local sampling: DCGM-only prediction" in warning


def test_spread_words_say_no_spread_where_there_is_none():
    """Issue 26 item 9: 'p10-p90 across fresh sessions 3.246-3.246' said nothing; a zero-width spread, measured or
    not, reads 'no spread measured for this machine'."""
    from hase.inference.runtime import spread_words
    base = {"interference_model": None, "neighbour_busy": 0.0}
    measured = dict(base, spread_source="measured across fresh sessions (host dispatch and copy terms)")
    assert spread_words(dict(measured, p10_ms=3.1, p90_ms=3.4)) == "p10-p90 across fresh sessions 3.100-3.400 ms"
    assert spread_words(dict(measured, p10_ms=3.246, p90_ms=3.2461)) == "no spread measured for this machine"
    own = dict(measured, spread_source=measured["spread_source"] + ", widened to the model's own error on ...")
    assert spread_words(dict(own, p10_ms=3.1, p90_ms=3.4)) == \
        "p10-p90 across fresh sessions and the model's own error 3.100-3.400 ms"
    assert spread_words(dict(base, spread_source="none (timeline model without a measured spread)", p10_ms=3.246,
                             p90_ms=3.246)) == "no spread measured for this machine"


# ---- the same items through `hase predict`, the Predictor API and the service ------------------------------------
# (the phase script inference/predict_model_latency.py is covered by test_phase7_pipeline; these entry points go
# through hase.api.Predictor.check_load / predict, which had none of items 1, 2 and 5: a regression of the merge)
XEON_TL = REPO / "inference" / "results" / "cpu-intel-r-xeon-r-processor" / "timeline_model.json"
XEON = "cpu-intel-r-xeon-r-processor"



def hase_predict(home, model, *extra, timeout: float = 300):
    """`hase predict` on the CPU EP with the committed Xeon CPU timeline (no phase 5 predictor needed)."""
    return script(["-m", "hase.cli", "predict", model, "--device", "cpu", "--set", f"timeline_model={XEON_TL}",
                   "--top", "1", *extra], home, timeout)


@pytest.mark.parametrize("field, value, said", [
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 97, "= 97 is out of range (expected ratio in [0, 1])"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", -5, "= -5 is out of range (expected ratio in [0, 1])"),
    ("bg_DCGM_FI_DEV_SM_CLOCK", 0, "= 0 is out of range (expected MHz > 0)"),
    ("DCGM_FI_DEV_GPU_UTIL", math.nan, "is NaN (not measured; expected % in [0, 100])"),
])
def test_hase_predict_checks_every_known_field_of_a_metrics_file(tmp_path, tiny_onnx, field, value, said):
    """Items 5 and 6 through `hase predict --metrics-file` (the issue's regression: exit 0 with DCGM 97 on the
    CPU EP): a known field the CPU predictor does not read is still checked; NaN is said as not measured."""
    snap = tmp_path / "f.json"
    snap.write_text(json.dumps({"CPU_UTIL_PCT": 10, field: value}))
    r = hase_predict(tmp_path, tiny_onnx, "--metrics-file", snap)
    assert one_error_line(r) == f"error: {snap}: field '{field.removeprefix('bg_')}' {said}"


def test_hase_predict_names_unknown_fields_in_one_warning(tmp_path, tiny_onnx):
    snap = tmp_path / "f.json"
    snap.write_text(json.dumps({"CPU_UTIL_PCT": 10, "FOO_BAR": 1, "bg_BAZ": 2}))
    r = hase_predict(tmp_path, tiny_onnx, "--metrics-file", snap)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "unknown load field" in ln]
    assert warn == [f"warning: {snap}: unknown load fields BAZ, FOO_BAR (not in gpu_metrics.FIELD_SPECS): "
                    f"ignored"], r.stderr


def test_predictor_api_checks_every_known_field(tiny_onnx):
    """Items 5 and 6 through hase.load_predictor(...).predict(model, load={...})."""
    import hase
    p = hase.load_predictor(XEON)
    assert p.fields == ["CPU_UTIL_PCT"]   # the CPU predictor reads no DCGM field
    for field, value, said in [("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 97, "= 97 is out of range"),
                               ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", -5, "= -5 is out of range"),
                               ("DCGM_FI_DEV_SM_CLOCK", math.nan, "is NaN (not measured; expected MHz > 0)")]:
        with pytest.raises(HaseError) as e:
            p.predict(tiny_onnx, load={"CPU_UTIL_PCT": 10.0, field: value})
        assert str(e.value).startswith(f"load: field '{field}' {said}"), str(e.value)
    res = p.predict(tiny_onnx, load={"CPU_UTIL_PCT": 10.0, "FOO_BAR": 1, "bg_BAZ": 2})
    assert [w for w in res.warnings if "unknown" in w] == [
        "load: unknown load fields BAZ, FOO_BAR (not in gpu_metrics.FIELD_SPECS): ignored"]


@pytest.fixture(scope="module")
def service_client():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient
    from hase.service import create_app
    return TestClient(create_app("", XEON), raise_server_exceptions=False)


def test_service_checks_every_known_field_of_a_load(service_client, tiny_onnx):
    """Items 5 and 6 through `hase serve`'s /v1/predict body: an error naming 'load', or one warning."""
    import hase
    rec = hase.load_predictor(XEON).analyse(tiny_onnx)
    for field, value, said in [("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 97, "= 97 is out of range (expected ratio"),
                               ("DCGM_FI_DEV_SM_CLOCK", math.nan, "is NaN (not measured; expected MHz > 0)")]:
        r = service_client.post("/v1/predict", content=json.dumps(
            {"record": rec, "load": {"CPU_UTIL_PCT": 10, field: value}}, allow_nan=True),
            headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == "load", r.text
        assert f"field '{field}' {said}" in r.json()["error"], r.text
    r = service_client.post("/v1/predict", json={"record": rec, "load": {"CPU_UTIL_PCT": 10, "FOO_BAR": 1}})
    assert r.status_code == 200, r.text
    assert [w for w in r.json()["warnings"] if "unknown" in w] == [
        "load: unknown load field FOO_BAR (not in gpu_metrics.FIELD_SPECS): ignored"]


def idle_under_load_timeline(tmp_path) -> Path:
    """The committed Xeon timeline as if its idle reference had been measured next to a 97%-busy neighbour."""
    model = json.loads(XEON_TL.read_text())
    model["idle_load"]["bg_CPU_UTIL_PCT"] = 96.8
    model["params"]["alpha"] = 1.0   # the load matters
    bad = tmp_path / "timeline_model.json"
    bad.write_text(json.dumps(model))
    return bad


def test_idle_above_loaded_warns_in_the_api_and_hase_predict(tmp_path, tiny_onnx):
    """Item 1's last clause through the Predictor API and `hase predict`: the idle figure above the loaded one
    by more than the spread is a warning naming the idle reference's busy field; a sound reference gives none."""
    import hase
    bad = idle_under_load_timeline(tmp_path)
    res = hase.load_predictor("cpu", timeline_model=bad).predict(tiny_onnx, load={"CPU_UTIL_PCT": 2.0})
    assert res.idle_ms - res.total_ms > res.p90_ms - res.p10_ms
    odd = [w for w in res.warnings if "exceeds the one under the current load" in w]
    assert len(odd) == 1 and "its idle_load has bg_CPU_UTIL_PCT = 96.8" in odd[0], res.warnings
    sound = hase.load_predictor("cpu", timeline_model=XEON_TL).predict(tiny_onnx, load={"CPU_UTIL_PCT": 2.0})
    assert not [w for w in sound.warnings if "exceeds" in w], sound.warnings
    snap = tmp_path / "f.json"
    snap.write_text(json.dumps({"CPU_UTIL_PCT": 2.0}))
    r = script(["-m", "hase.cli", "predict", tiny_onnx, "--device", "cpu", "--set", f"timeline_model={bad}",
                "--metrics-file", snap], tmp_path)
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "exceeds the one under the current load" in ln]
    assert len(warn) == 1 and warn[0].startswith("warning: the idle prediction "), r.stderr


def test_hase_predict_names_its_local_sampling_window(tmp_path, tiny_onnx):
    """Item 2 through `hase predict` without a load source: the output names the window and the busy field's
    noise (it sampled at least sample_s, longer while that noise was above sample_busy_se)."""
    out = tmp_path / "p.json"
    r = hase_predict(tmp_path, tiny_onnx, "--json", out)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("  load from local sampling over ")]
    assert len(line) == 1 and "windows of 0.25 s; CPU_UTIL_PCT standard error" in line[0], r.stdout
    d = json.loads(out.read_text())["details"]
    assert 1.0 <= d["load_window_s"] and d["load_windows"] >= 4 and d["load_busy_field"] == "CPU_UTIL_PCT"


@pytest.mark.parametrize("bad, said", [
    ([1], "config must be a mapping {key: value}, not list"),
    ("sample_s=abc", "config must be a mapping {key: value}, not str"),
    ({"sample_s": "abc"}, "config: config key 'sample_s' = \"abc\" is not valid (expected a number >= 0"),
])
def test_predictor_api_config_checked(bad, said):
    """Item 3 through hase.load_predictor(config=...): a one-line HaseError, not a TypeError."""
    import hase
    with pytest.raises(HaseError) as e:
        hase.load_predictor(XEON, config=bad)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_named_predictor_dir_that_does_not_exist_is_an_error(tmp_path, tiny_onnx):
    """Item 4 through the API and `hase predict`: a predictor_dir given (--set, or load_predictor's argument) that
    does not exist was passed over in silence where the timeline needs no kernel predictor (a CPU line table)."""
    import hase
    for kw in (dict(predictor_dir=tmp_path / "no_such"), dict(config={"predictor_dir": str(tmp_path / "no_such")})):
        with pytest.raises(HaseError) as e:
            hase.load_predictor(XEON, **kw)
        assert str(e.value) == f"{tmp_path / 'no_such'}: predictor_dir: not found"
    (tmp_path / "empty").mkdir()
    with pytest.raises(HaseError, match="predictor_dir: no manifest.json"):
        hase.load_predictor(XEON, predictor_dir=tmp_path / "empty")
    r = hase_predict(tmp_path, tiny_onnx, "--set", f"predictor_dir={tmp_path / 'no_such'}", "--metrics-file",
                     REPO / "tests" / "no_such_either.json")
    assert one_error_line(r) == f"error: {tmp_path / 'no_such'}: predictor_dir: not found"
