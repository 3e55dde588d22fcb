"""The installable `hase`: the Predictor API on the shipped predictors, the compact forests, `hase predict`.

GPU predictions run from committed phase 2 CUDA records (ort_analysis/ort_kernel_record/nvidia-h200/records.json.xz):
no GPU is needed to predict for one.
"""
import json
import threading
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent

from hase.utils.errors import HaseError  # noqa: E402
from helpers import build_residual_model, hase_cli  # noqa: E402

RECORDS = REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200" / "records.json.xz"
XEON = REPO / "inference" / "results" / "cpu-intel-r-xeon-r-processor" / "timeline_model.json"


@pytest.fixture(scope="module")
def records():
    from hase.graph_model.dag_critical_path import records_in_file
    return records_in_file(str(RECORDS))


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HASE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_compact_forest_matches_xgboost(tmp_path):
    """The numpy evaluation of the shipped forests gives XGBoost's own predictions (missing values included)."""
    xgb = pytest.importorskip("xgboost")
    from hase.training.kernel_predictor import CompactForest, forest_arrays, load_forests, save_forests
    rng = np.random.default_rng(1)
    X = rng.standard_normal((400, 6)).astype(np.float32)
    y = X[:, 0] * 2 + np.sin(X[:, 1]) + (X[:, 2] > 0.3) + rng.standard_normal(400) * 0.1
    X[::9, 2] = np.nan
    m = xgb.XGBRegressor(n_estimators=60, max_depth=5, learning_rate=0.2).fit(X, y)
    save_forests({"global": forest_arrays(m.get_booster())}, tmp_path / "f.npz.xz")
    f = load_forests(tmp_path / "f.npz.xz")["global"]
    assert isinstance(f, CompactForest)
    Xt = rng.standard_normal((300, 6)).astype(np.float32)
    Xt[::5, 1] = np.nan
    assert np.max(np.abs(f.predict(Xt) - m.predict(Xt))) < 1e-4
    assert f.run(None, {"input": Xt[:3]})[0].shape == (3, 1)


@pytest.mark.parametrize("gpu", ["nvidia-h200", "nvidia-h100"])
def test_shipped_predictor_for_each_gpu(gpu, records):
    """A fresh clone predicts for each GPU with committed data: default timeline found without flags, its predictor
    committed (<= 10 MB): each GPU's own corpus node model (inference/fit_corpus_timeline.py on its corpus sessions);
    idle <= loaded, p10 <= central <= p90."""
    import hase
    p = hase.load_predictor(gpu)
    assert Path(p.timeline_path).parts[-3:] == (gpu, "default", "timeline_model.json")
    assert sum(f.stat().st_size for f in p.predictor_dir.iterdir()) <= 10e6
    assert p.predictor_dir == REPO / "inference" / "results" / gpu / "corpus" / "node_model"
    assert p.predictor.manifest["format"] == "hase.node_model/1"
    assert p.model["calibration_ref"]["host_index_us"] > 0
    rec = records["resnet50_bs16_224x224"]
    idle = p.predict(rec)
    assert idle.p10_ms <= idle.total_ms <= idle.p90_ms and idle.total_ms > 0
    assert idle.idle_ms == pytest.approx(idle.total_ms)
    assert len(idle.breakdown) == len(rec["kernels"])
    assert idle.provenance["load_source"].startswith("idle")
    busy = p.predict(rec, load={"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.6, "DCGM_FI_DEV_SM_CLOCK": 1980.0,
                                "DCGM_FI_PROF_DRAM_ACTIVE": 0.1})
    assert busy.total_ms > idle.total_ms * 1.2
    assert busy.idle_ms == pytest.approx(idle.total_ms)
    assert json.loads(json.dumps(busy.to_dict(), default=float))["target"] == gpu


def test_predictor_rejects_bad_loads_naming_the_field(records):
    import hase
    p = hase.load_predictor("nvidia-h200")
    rec = records["resnet18_bs1_224x224"]
    with pytest.raises(HaseError, match="load.DCGM_FI_DEV_SM_CLOCK is missing"):
        p.predict(rec, load={"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.3})
    with pytest.raises(HaseError, match="DCGM_FI_PROF_GR_ENGINE_ACTIVE.*out of range"):
        p.predict(rec, load={"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 97, "DCGM_FI_DEV_SM_CLOCK": 1980})
    with pytest.raises(HaseError, match="load.DCGM_FI_DEV_SM_CLOCK must be a number"):
        p.predict(rec, load={"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.3, "DCGM_FI_DEV_SM_CLOCK": "fast"})
    with pytest.raises(HaseError, match="options.threads is not a session option"):
        p.predict(rec, options={"threads": 4})
    with pytest.raises(HaseError, match="no predictor for 'nvidia-a100'"):
        hase.load_predictor("nvidia-a100")


def test_predict_many_in_threads_equals_serial(records):
    """Thread-safe: the same predictions from 4 threads at once as one after another."""
    import hase
    p = hase.load_predictor("nvidia-h200")
    items = [(records[m], {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": u, "DCGM_FI_DEV_SM_CLOCK": 1980.0})
             for m in ("resnet18_bs1_224x224", "mobilenet_v2_bs16_224x224", "vit_b_16_bs16_224x224")
             for u in (0.0, 0.5)]
    serial = [r.total_ms for r in p.predict_many(items)]
    out, errors = {}, []

    def work(i):
        try:
            out[i] = [r.total_ms for r in p.predict_many(items)]
        except Exception as e:   # surfaced below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors
    assert all(v == serial for v in out.values())


def test_gpu_analysis_without_a_cuda_ep_is_one_line(tmp_path):
    """An ONNX file for a GPU target on a machine without a CUDA EP: the offline analysis if installed, else a
    one-line error saying what is needed."""
    import hase
    from hase.api import cuda_here
    if cuda_here():
        pytest.skip("a CUDA EP works here")
    build_residual_model(tmp_path / "m.onnx", "m", 8, 2, 16)
    p = hase.load_predictor("nvidia-h200")
    try:
        import hase.ort_analysis.offline_cuda  # noqa: F401
    except ImportError:
        with pytest.raises(HaseError, match="needs a working CUDA EP here or the offline CUDA-EP analysis"):
            p.predict(tmp_path / "m.onnx")
    else:
        assert p.predict(tmp_path / "m.onnx").total_ms > 0


def test_cli_predict_cpu_and_gpu_record(tmp_path, home, records):
    """`hase predict`: CPU EP on a small ONNX model with the committed Xeon timeline; a GPU from a record, at idle
    with a warning, and from a metrics file; bad input: one line naming the file or field, exit 2."""
    build_residual_model(tmp_path / "m.onnx", "m", 8, 2, 16)
    r = hase_cli("predict", tmp_path / "m.onnx", "--device", "cpu", "--set", f"timeline_model={XEON}",
                 "--metrics-file", tmp_path / "none.json", home=home)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "none.json" in r.stderr
    (tmp_path / "cpu_load.json").write_text(json.dumps({"CPU_UTIL_PCT": 10.0}))
    r = hase_cli("predict", tmp_path / "m.onnx", "--device", "cpu", "--set", f"timeline_model={XEON}",
                 "--metrics-file", tmp_path / "cpu_load.json", "--json", tmp_path / "cpu.json", home=home)
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "cpu.json").read_text())
    assert out["model"] == "m" and out["p10_ms"] <= out["total_ms"] <= out["p90_ms"]
    assert "predicted session.run" in r.stdout
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(records["resnet18_bs1_224x224"]))
    r = hase_cli("predict", rec, "--gpu", "nvidia-h200", "--json", tmp_path / "g.json", "--trace", tmp_path / "t.json",
                 home=home)
    assert r.returncode == 0, r.stderr
    assert "predicted at idle" in r.stderr
    idle = json.loads((tmp_path / "g.json").read_text())["total_ms"]
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    (tmp_path / "busy.json").write_text(json.dumps({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5, "DCGM_FI_DEV_SM_CLOCK": 1980}))
    r = hase_cli("predict", rec, "--gpu", "nvidia-h200", "--metrics-file", tmp_path / "busy.json",
                 "--json", tmp_path / "b.json", home=home)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "b.json").read_text())["total_ms"] > idle
    (tmp_path / "bad.json").write_text(json.dumps({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 50, "DCGM_FI_DEV_SM_CLOCK": 1980}))
    r = hase_cli("predict", rec, "--gpu", "nvidia-h200", "--metrics-file", tmp_path / "bad.json", home=home)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in r.stderr and "bad.json" in r.stderr
    r = hase_cli("predict", rec, "--gpu", "nvidia-a100", home=home)
    assert r.returncode == 2 and "no predictor for 'nvidia-a100'" in r.stderr


def test_cli_cpu_without_predictor_uses_the_corpus_trees_scaled_here(tmp_path, home):
    """This machine's CPU EP (a fresh clone, before the main job): the shipped CPU corpus's node trees, scaled by a
    calibration (here a committed profile of a 2-vCPU Xeon, made current), with a warning that says so;
    --no-calibrate: the corpus CPU's speed. By default a local calibration is tried: scaled where it could be read,
    and where the machine is too busy to read one (a loaded CI machine) the warning says not scaled. A missing
    metrics file is still one line, exit 2."""
    import time
    build_residual_model(tmp_path / "m.onnx", "m", 8, 2, 16)
    r = hase_cli("predict", tmp_path / "m.onnx", "--device", "cpu", "--metrics-file", tmp_path / "x.json", home=home)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "x.json" in r.stderr
    (tmp_path / "x.json").write_text(json.dumps({"CPU_UTIL_PCT": 5.0}))
    prof = json.loads((REPO / "benchmark/results/cpu-intel-r-xeon-r-processor/unseen_vm/fresh_t2/machine_d/"
                       "calibration.json").read_text())["fresh_process_1"]
    (tmp_path / "node.json").write_text(json.dumps(dict(prof, time_unix=time.time())))
    got, err = {}, {}
    for flag in (["--calibration", tmp_path / "node.json"], ["--no-calibrate"], []):
        key = str(flag[0]) if flag else "default"
        r = hase_cli("predict", tmp_path / "m.onnx", "--device", "cpu", "--metrics-file", tmp_path / "x.json", *flag,
                     "--json", tmp_path / f"{key}.json", home=home)
        assert r.returncode == 0, r.stderr[-2000:]
        got[key], err[key] = json.loads((tmp_path / f"{key}.json").read_text()), r.stderr
        assert got[key]["total_ms"] > 0
        assert "predicted with the CPU corpus's node trees" in r.stderr and "cpu-amd-epyc/corpus" in r.stderr
    assert "scaled by this machine's calibration" in err["--calibration"]
    assert "not scaled: at that CPU's speed" in err["--no-calibrate"]
    scaled = got["--calibration"].get("cpu_scales") or got["--calibration"].get("details", {}).get("cpu_scales")
    ref = json.loads((REPO / "inference/results/cpu-amd-epyc/corpus/timeline_model.json").read_text())["calibration_ref"]
    assert scaled["conv_gflops"] == pytest.approx(ref["conv_gflops"] / prof["compute"]["conv_gflops"], rel=1e-6)
    assert got["--no-calibrate"]["total_ms"] != pytest.approx(got["--calibration"]["total_ms"], rel=1e-6)
    assert "for a session with 2 intra-op threads" in err["--calibration"]
    (tmp_path / "node1.json").write_text(json.dumps(dict(prof, time_unix=time.time(), threads=1)))
    r = hase_cli("predict", tmp_path / "m.onnx", "--device", "cpu", "--metrics-file", tmp_path / "x.json",
                 "--calibration", tmp_path / "node1.json", home=home)   # scaled to 1 thread: the session it is for
    assert r.returncode == 0 and "trees" in r.stderr and "for a session with 1 intra-op threads" in r.stderr, r.stderr
    busy = "calibration not used" in err["default"]
    assert ("not scaled: at that CPU's speed" in err["default"]) == busy
    assert ("scaled by this machine's calibration" in err["default"]) == (not busy)


def test_cpu_fallback_given_host_chains_only_calibrates_here(tmp_path, monkeypatch):
    """A calibration without CPU compute rates (what `hase predict --prometheus` reads from the node agent: host
    chains only) cannot carry the corpus trees to this CPU: the fallback reads this machine's own, and says why."""
    import time
    import hase
    from hase.inference import machine_calibration as mc
    monkeypatch.setattr(mc, "LOCAL_BUSY_MAX_PCT", 101.0)   # a loaded CI machine still reads
    build_residual_model(tmp_path / "m.onnx", "m", 8, 2, 16)
    p = hase.load_predictor("cpu")
    assert p.fallback
    res = p.predict(tmp_path / "m.onnx", calibration={"host_index_us": 0.5, "time_unix": time.time()})
    assert any("holds no CPU EP compute rates" in w for w in res.warnings), res.warnings
    assert "this machine's calibration" in res.details["calibration_source"] and "cpu_scales" in res.details


def test_cpu_default_is_the_corpus_trees_even_beside_a_timeline_of_this_cpus_name(home):
    """A timeline under this CPU's name in HASE_HOME (the main job's own, or a committed one of another machine with
    the same name) is not taken unless named: on this kind of VM both scored 33-35% against the corpus trees' 13.3%
    (inference/results/cpu-intel-r-xeon-r-processor/unseen_vm/torchvision/). A named one is used, without a fallback."""
    from hase.api import Predictor
    from hase.utils.ort_session import device_slug
    own = home / "inference" / "results" / device_slug("cpu") / "timeline_model.json"
    own.parent.mkdir(parents=True)
    own.write_text((REPO / "inference/results/cpu-intel-r-xeon-r-processor/timeline_model.json").read_text())
    p = Predictor("cpu")
    assert p.fallback and "cpu-amd-epyc" in str(p.timeline_path) and p.model["node_source"] == "trees"
    named = Predictor("cpu", timeline_model=own)
    assert not named.fallback and Path(named.timeline_path) == own


def test_cli_help_and_thin_wrappers(home):
    r = hase_cli("--help", home=home)
    assert r.returncode == 0
    for cmd in ("pipeline", "export", "analyse", "collect", "train", "predict", "evaluate", "agent", "serve", "trace",
                "build-predictor"):
        assert f"  {cmd} " in r.stdout
    r = hase_cli("train", "--help", home=home)   # the phase script's own parser
    assert r.returncode == 0 and "hase train" in r.stdout and "--set" in r.stdout
    r = hase_cli("nope", home=home)
    assert r.returncode == 2 and "unknown command 'nope'" in r.stderr


def test_calibration_scales_the_host_side_only(records, tmp_path):
    """Issue 23: a node whose host calibration reads twice the training processes' predicts a dispatch-bound model
    much slower and a GPU-bound one nearly unchanged; a stale profile gives the uncalibrated prediction and a
    warning naming the field."""
    import time
    import hase
    p = hase.load_predictor("nvidia-h200")
    ref = p.model["calibration_ref"]["host_index_us"]
    el = p.model["calibration_ref"]["elasticity"]   # a model's dispatch moves about as the probe's (fitted between
    assert 0.3 <= el <= 1.5                          # machines: 1.2 on the H200, session 33)
    small, big = records["resnet18_bs1_224x224"], records["wide_resnet50_2_bs32_224x224"]
    for rec, lo, hi in ((small, 0.8 * 2 ** el, 1.1 * 2 ** el), (big, 0.99, 1.1)):
        base = p.predict(rec).total_ms
        slow = p.predict(rec, calibration=2.0 * ref)
        assert lo * base <= slow.total_ms <= hi * base, (rec["model"], base, slow.total_ms)
        assert slow.details["host_scale"] == pytest.approx(2.0 ** el)
        # twice the reference lies beyond the readings the timeline was fitted at: scaled, and said
        assert len(slow.warnings) == 1 and "extrapolates" in slow.warnings[0]
        assert not p.predict(rec, calibration=ref).warnings     # a reading inside the fitted range: no warning
    prof = tmp_path / "old.json"
    prof.write_text(json.dumps({"schema": 1, "device": "cuda", "host_us_per_node": {"relu": 20.0},
                                "host_index_us": 2.0 * ref, "time_unix": time.time() - 30 * 86400}))
    old = p.predict(small, calibration=str(prof))
    assert old.total_ms == pytest.approx(p.predict(small).total_ms)
    assert any("time_unix" in w for w in old.warnings)


def test_a_slow_copy_rate_slows_a_large_input_model_when_copies_are_calibrated(records):
    """Issue 23 item 3, copies (opt-in, calibrate_copies): a target whose session.run copies read half the GPU
    kind's reference rate predicts a model with a 19 MB input slower by about its input copy, a 0.6 MB one by
    far less;
    off (the default) the copy reading changes nothing; a profile without the run-copy fields keeps the copies and
    says which field is missing."""
    import hase
    from hase.inference import machine_calibration as mc
    on = hase.load_predictor("nvidia-h200", config={"calibrate_copies": True})
    off = hase.load_predictor("nvidia-h200")
    ref = on.model["calibration_ref"]
    cg = ref["copy_gbps"]
    half = {"host_index_us": ref["host_index_us"], "copy_gbps": {k: cg[k] / 2 for k in mc.COPY_KEYS.values()}}
    small, big = records["resnet18_bs1_224x224"], records["wide_resnet50_2_bs32_224x224"]
    added = []
    for rec, lo, hi in ((big, 1.02, 1.6), (small, 1.0, 1.10)):
        base = on.predict(rec, calibration=ref["host_index_us"]).total_ms
        slow = on.predict(rec, calibration=half)
        assert lo * base <= slow.total_ms <= hi * base, (rec["model"], base, slow.total_ms)
        assert slow.details["copy_scales"] == {"h2d": pytest.approx(2.0), "d2h": pytest.approx(2.0)}
        unscaled = off.predict(rec, calibration=half)
        assert unscaled.total_ms == pytest.approx(base)
        # off, a copy rate twice as slow as the GPU kind's is said, with this prediction's copy time
        assert any("h2d copies run 2.00x as long" in w and "not scaled" in w for w in unscaled.warnings)
        assert not [w for w in off.predict(rec, calibration=ref["host_index_us"]).warnings if "copy" in w]
        added.append(slow.total_ms - base)
    assert added[0] > 10 * added[1]   # the copy time grows with the bytes copied
    got = on.predict(big, calibration={"host_index_us": ref["host_index_us"], "copy_gbps": {}})
    assert got.total_ms == pytest.approx(on.predict(big, calibration=ref["host_index_us"]).total_ms)
    assert any("copy_gbps.run_h2d_16MiB_gbps" in w for w in got.warnings)


def test_copy_reference_is_the_median_machine_of_the_gpu_kind(tmp_path):
    """machine_calibration.copy_reference: per direction the median over machines of each machine's median run-copy
    reading (calibration.json as one profile or {process: profile}); machines without a reading are skipped."""
    from hase.inference import machine_calibration as mc
    for name, runs in (("a", [10.0, 12.0]), ("b", [5.0]), ("c", [12.0]), ("d", None)):
        d = tmp_path / name
        d.mkdir()
        profs = [{"host_index_us": 8.0, "copy_gbps": ({"run_h2d_16MiB_gbps": r, "run_d2h_16MiB_gbps": 2 * r}
                                                      if r else {"h2d_16MiB_gbps": 7.0})} for r in (runs or [0])]
        (d / "calibration.json").write_text(json.dumps(profs[0] if len(profs) == 1 else
                                                       {f"p{i}": p for i, p in enumerate(profs)}))
    ref = mc.copy_reference(sorted(tmp_path.iterdir()))
    assert ref["run_h2d_16MiB_gbps"] == 11.0 and ref["run_d2h_16MiB_gbps"] == 22.0 and ref["machines"] == 3
    sc, w = mc.copy_scales({"calibration_ref": {"copy_gbps": ref}}, {"copy_gbps": {"run_h2d_16MiB_gbps": 5.5,
                                                                                  "run_d2h_16MiB_gbps": 22.0}})
    assert sc == {"h2d": 2.0, "d2h": 1.0} and w is None
    assert mc.copy_scales({"calibration_ref": {}}, {"copy_gbps": {}})[1].startswith("timeline model has no")


def test_local_calibration_reads_this_machine_only_where_it_is_the_target(records, tmp_path, monkeypatch):
    """calibration="local": this machine's calibration read now, the median of several host readings, only where
    this machine is the target: a GPU target on a machine without that GPU is predicted uncalibrated with a warning
    saying so; with the host CPU busy with other processes the reading is refused, naming the field; the CLI
    `--calibrate` prints the scale it applied."""
    import hase
    from hase.inference import machine_calibration as mc
    gpu = hase.load_predictor("nvidia-h200")
    gpu._local_cal = None
    rec = records["resnet18_bs1_224x224"]
    res = gpu.predict(rec, calibration="local")
    assert res.total_ms == pytest.approx(gpu.predict(rec).total_ms) and "host_scale" not in res.details
    assert any("the target is nvidia-h200: host not scaled" in w for w in res.warnings), res.warnings
    build_residual_model(tmp_path / "m.onnx", "m", 8, 2, 16)
    cpu = hase.load_predictor("cpu", timeline_model=XEON)
    monkeypatch.setattr(mc, "LOCAL_BUSY_MAX_PCT", 101.0)   # a loaded CI machine still reads (the value is what is checked)
    cpu._local_cal = None
    res = cpu.predict(tmp_path / "m.onnx", calibration="local")
    src = res.details["calibration_source"]
    assert "median of 5 readings" in src and "cpu_scales" in res.details, res.details
    assert res.details["cpu_scales"]["host"] > 0 and res.total_ms > 0
    monkeypatch.setattr(mc, "LOCAL_REUSE_S", {"cuda": 3.0, "cpu": 600.0})   # a loaded CI machine: stay in the window
    t_read = cpu._local_cal[0]
    assert cpu.predict(tmp_path / "m.onnx", calibration="local").details["calibration_source"] == src  # reused
    assert cpu._local_cal[0] == t_read
    monkeypatch.setattr(mc, "LOCAL_REUSE_S", {"cuda": 3.0, "cpu": 0.0})     # expired: read again (a reading is true
    cpu.predict(tmp_path / "m.onnx", calibration="local")                    # for seconds, calibration_age/)
    assert cpu._local_cal[0] > t_read
    monkeypatch.setattr(mc, "LOCAL_BUSY_MAX_PCT", 50.0)
    monkeypatch.setattr(mc, "host_busy_pct", lambda window_s=0.5: 97.0)
    cpu._local_cal = None
    res = cpu.predict(tmp_path / "m.onnx", calibration="local")
    assert "cpu_scales" not in res.details and res.total_ms == pytest.approx(cpu.predict(tmp_path / "m.onnx").total_ms)
    assert any("CPU_UTIL_PCT = 97%" in w for w in res.warnings), res.warnings
    r = hase_cli("predict", tmp_path / "m.onnx", "--device", "cpu", "--set", f"timeline_model={XEON}", "--calibrate",
                 "--metrics-file", _cpu_load(tmp_path), home=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    assert "this machine's calibration" in r.stdout + r.stderr


def _cpu_load(tmp_path):
    f = tmp_path / "cpu_load.json"
    f.write_text(json.dumps({"CPU_UTIL_PCT": 10.0}))
    return f


def test_a_long_grouped_conv1d_is_named_as_a_risk(records):
    """A CUDA-EP grouped or depthwise Conv1d whose kernel spans 28 or more ((K - 1) * dilation + 1) may run one
    channel group at a time in cuDNN (the trees do not learn when): the prediction says so in a warning; a span of
    27, an ungrouped conv or a 2-D conv says nothing."""
    import copy
    import hase
    from hase.inference.node_model import per_group_risk

    def conv1d(k, groups, channels=384, length=255, dilation=1):
        return {"id": "Conv#x", "type": "Conv", "op_type": "Conv", "ep": "CUDAExecutionProvider", "node_name": "/dw",
                "attributes": {"group": groups, "kernel_shape": [k], "dilations": [dilation]},
                "inputs": [{"shape": [1, channels, length], "role": "activation"},
                           {"shape": [channels, channels // groups, k], "role": "weight"}]}
    assert "longest 128 with its dilation, 384 groups, '/dw'" in per_group_risk([conv1d(128, 384)])
    # wav2vec's positional conv: grouped, not depthwise (ran per group in all 19 corpus models that have one)
    assert "longest 128 with its dilation, 8 groups" in per_group_risk([conv1d(128, 8, 512, 24)])
    assert per_group_risk([conv1d(27, 384)]) == "" and per_group_risk([conv1d(64, 1)]) == ""
    # tasnet's dilated depthwise K=3: the span counts ((3 - 1) * 32 + 1 = 65 ran per group in the corpus), not K
    assert "longest 65 with its dilation, 384 groups" in per_group_risk([conv1d(3, 384, dilation=32)])
    assert per_group_risk([conv1d(3, 384, dilation=13)]) == ""                     # spans 27
    assert per_group_risk([dict(conv1d(64, 384), ep="CPUExecutionProvider")]) == ""
    p = hase.load_predictor("nvidia-h200")
    rec = records["resnet50_bs16_224x224"]
    assert not [w for w in p.predict(rec).warnings if "channel group" in w]
    # the same model with one of its convs made a long depthwise Conv1d (shapes only: the analysis is what is read)
    rec = copy.deepcopy(rec)
    k = next(k for k in rec["kernels"] if k["op_type"] == "Conv")
    k.update({kk: v for kk, v in conv1d(64, 256, 256, 512).items() if kk in ("attributes", "inputs")})
    warns = [w for w in p.predict(rec).warnings if "channel group" in w]
    assert len(warns) == 1 and "1 grouped or depthwise Conv1d node(s)" in warns[0]
    assert "longest 64 with its dilation, 256 groups" in warns[0]


def test_an_op_with_a_trained_kin_is_named_in_a_warning(tmp_path):
    """A real ONNX model with a Ceil (no H200 training node has one; Less was the example until exam v16's traces
    joined training) through the whole road on a machine without a GPU: the offline CUDA analysis, the node model
    pricing it as its kin, and one warning that says so; no generic-fallback warning for it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import hase
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 256, 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 256, 1024])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Ceil", ["r"], ["f"]),
             helper.make_node("Add", ["f", "r"], ["y"])]
    g = helper.make_graph(nodes, "lt", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "lt.onnx")
    res = hase.load_predictor("nvidia-h200").predict(str(tmp_path / "lt.onnx"))
    assert [w for w in res.warnings if "'Ceil'" in w] == [
        "kernel type 'Ceil' was not in the training data; priced as 'Abs' (the same CUDA kernel family, "
        "inference/node_model.py KIN)"]
    assert res.total_ms > 0


def test_a_malformed_record_is_one_error_naming_the_field(records):
    """A record handed to the API is checked where it enters (graph_model.check_record): a wrong type is one
    HaseError naming the field, not a KeyError deep in the features."""
    import copy
    import hase
    p = hase.load_predictor("nvidia-h200")
    rec = copy.deepcopy(records["resnet50_bs16_224x224"])
    rec["kernels"][2]["inputs"] = "x"
    with pytest.raises(HaseError, match=r"record\.kernels\[2\]\.inputs: not a list"):
        p.predict(rec)
    rec = copy.deepcopy(records["resnet50_bs16_224x224"])
    del rec["kernels"][0]["id"]
    with pytest.raises(HaseError, match=r"record\.kernels\[0\]\.id: missing"):
        p.predict(rec)


def _dynamic_batch_model(path):
    """build_residual_model with its batch dim named 'N' (as torch exports dynamic_axes)."""
    import onnx
    build_residual_model(path, "dyn", 16, 3, 32)
    m = onnx.load(str(path))
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(m, str(path))


def test_pinned_dims_are_part_of_the_analysis_and_a_sweep_predicts_each(tmp_path, home):
    """A dynamic-batch model: each pinned batch is its own analysis (the on-disk record cache keyed the file alone,
    so batch 32 was answered with batch 8's record); Predictor.sweep and `hase predict --sweep` give one prediction
    per value, and --slo-ms names the largest value whose p90 fits."""
    import hase
    f = tmp_path / "dyn.onnx"
    _dynamic_batch_model(f)
    p = hase.load_predictor("nvidia-h200")
    r2, r32 = p.analyse(f, pin_dims={"N": 2}), p.analyse(f, pin_dims={"N": 32})
    assert r2["graph_inputs"][0]["shape"][0] == 2 and r32["graph_inputs"][0]["shape"][0] == 32
    rows = p.sweep(f, "N", [1, 4, 64])
    assert [v for v, _ in rows] == [1, 4, 64]
    assert rows[2][1].total_ms > rows[0][1].total_ms and rows[2][1].details["pin_dims"] == {"N": 64}
    # the CLI, a fresh process each time: the on-disk cache must not answer batch 32 with batch 2's record
    one = [hase_cli("predict", f, "--gpu", "nvidia-h200", "--set", f"pin_dims={{N: {n}}}", "--json",
                    tmp_path / f"p{n}.json", home=home) for n in (2, 32)]
    assert all(q.returncode == 0 for q in one), one[0].stderr + one[1].stderr
    tot = [json.loads((tmp_path / f"p{n}.json").read_text())["total_ms"] for n in (2, 32)]
    assert tot[1] > tot[0], tot
    slo = 0.5 * (rows[1][1].p90_ms + rows[2][1].p90_ms)   # between batch 4's p90 and batch 64's
    q = hase_cli("predict", f, "--gpu", "nvidia-h200", "--sweep", "N=1,4,64", "--slo-ms", f"{slo:.4f}", "--json",
                 tmp_path / "sweep.json", home=home)
    assert q.returncode == 0, q.stderr
    last = q.stdout.strip().splitlines()[-1]
    assert last.startswith("  largest N with p90 <=") and last.endswith(": 4"), q.stdout
    pts = json.loads((tmp_path / "sweep.json").read_text())["points"]
    assert [pt["value"] for pt in pts] == [1, 4, 64]
    assert [round(pt["total_ms"], 6) for pt in pts] == [round(r.total_ms, 6) for _, r in rows]
    for bad, what in ((["--sweep", "B=1,2"], "not a named dynamic dim"), (["--sweep", "N=x"], "--sweep N=x"),
                      (["--slo-ms", "3"], "--slo-ms needs --sweep")):
        q = hase_cli("predict", f, "--gpu", "nvidia-h200", *bad, home=home)
        assert q.returncode == 2 and what in q.stderr and len(q.stderr.strip().splitlines()) == 1, q.stderr


def test_the_machine_response_scales_a_large_input_models_copies_with_the_host(records, tmp_path):
    """Issue 23 item 3 (opt-in, calibrate_response): with the end-to-end response fitted between the training
    machines, a host 1.5x slower than the reference slows a GPU-bound model with a 19 MB input by its copies, where
    the node-dispatch elasticity alone leaves it nearly unchanged; a missing response file keeps that scaling and
    says so, naming the field."""
    import hase
    on = hase.load_predictor("nvidia-h200", config={"calibrate_response": True})
    off = hase.load_predictor("nvidia-h200")
    resp, warn = on.machine_response()
    assert warn is None and 0.5 <= resp["dispatch"] <= 2.0 and 0.2 <= resp["copies"] <= 2.0
    ref = on.model["calibration_ref"]["host_index_us"]
    big = records["wide_resnet50_2_bs32_224x224"]
    base = off.predict(big).total_ms
    shipped, cand = off.predict(big, calibration=1.5 * ref), on.predict(big, calibration=1.5 * ref)
    copy_ms = cand.details.get("copy_ms") or off.predict(big).details["copy_ms"]
    assert shipped.total_ms < base * 1.03                      # the shipped scaling: host terms only
    assert cand.details["copy_scales"]["h2d"] == pytest.approx(1.5 ** resp["copies"])
    assert cand.details["host_scale"] == pytest.approx(1.5 ** resp["dispatch"])
    assert cand.total_ms - shipped.total_ms > 0.3 * copy_ms * (1.5 ** resp["copies"] - 1)
    gone = hase.load_predictor("nvidia-h200", config={"calibrate_response": True,
                                                      "machine_response": str(tmp_path / "none.json")})
    miss = gone.predict(big, calibration=1.5 * ref)
    assert miss.total_ms == pytest.approx(shipped.total_ms)
    assert any("machine_response" in w and "not found" in w for w in miss.warnings)
