"""Interference on the measured timeline (timeline_model.run_share_us / with_spread, inference/fit_interference.py):
hand-computed answers on synthetic timelines, and the fit on the committed H200 neighbour data."""
import json
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]

from hase.inference import fit_interference as fi  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from tests.helpers import run_script, synthetic_prep  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

P = dict(tm.DEFAULT_PARAMS, c0_us=100.0, alpha=1.0)
# the measured timeline whose GPU times are the CUPTI lines: it needs no trained kernel predictor (CI has none;
# the default measured/ one takes its GPU times from the kernel-space predictor, git-ignored)
CUPTI_LINES = REPO / "inference" / "results" / "nvidia-h200" / "measured_cupti_lines" / "timeline_model.json"


def prep(h, g, h2d=50.0, d2h=10.0):
    """A run_share prepared model: host interval h_i (launch at its start), GPU time g_i (floor 0)."""
    return synthetic_prep(h, g, h2d, d2h, interference=tm.RUN_SHARE)


def terms(u=0.0, wait=None, clock=1.0):
    return {"u": u, "clock_ratio": clock, "wait_us": wait}


def test_idle_is_the_plain_timeline():
    pr = prep([30, 30, 30], [5, 5, 5])
    r = tm.predict_us(pr, P, terms())
    assert r["total_us"] == pytest.approx(tm.timeline_us(pr, P, terms())["total_us"])
    assert r["interference_us"] == 0.0


def test_share_is_over_the_span_not_the_gpu_time():
    """Dispatch-bound: launches at 50, 80, 110; GPU 5 us each; span = host end 140 - h2d 50 = 90 us (GPU busy
    only 15). A neighbour at u = 0.5 takes alpha * u * span = 45 us, not alpha * u * 15."""
    pr = prep([30, 30, 30], [5, 5, 5])
    r = tm.predict_us(pr, P, terms(u=0.5, wait=0.0))
    assert r["span_us"] == pytest.approx(90.0)
    assert r["interference_us"] == pytest.approx(45.0)
    assert r["total_us"] == pytest.approx(100 + 140 + 10 + 45)


def test_a_run_waits_once_or_shares_whichever_is_longer():
    """W_run = probe wait per launch x the probe's 16 launches: 10 us/launch -> 160 us > share 45 us."""
    pr = prep([30, 30, 30], [5, 5, 5])
    r = tm.predict_us(pr, P, terms(u=0.5, wait=10.0))
    assert r["interference_us"] == pytest.approx(10.0 * tm.PROBE_LAUNCHES)
    # a long GPU-bound run: share 0.5 * (3 x 1000) = 1500 us > W_run 160 us
    long = prep([2, 2, 2], [1000, 1000, 1000])
    assert tm.predict_us(long, P, terms(u=0.5, wait=10.0))["interference_us"] == pytest.approx(1500.0, rel=1e-3)


def test_memory_neighbour_term_scales_the_share_by_its_dram_activity():
    """m = bg DRAM_ACTIVE / u (clamped to [0, 1]); share = alpha * u * S * (1 + gamma * m); gamma 0 (the default,
    and every model fitted before it) changes nothing."""
    t = tm.load_terms({"bg_" + tm.BUSY: 0.5, "bg_" + tm.DRAM: 0.4}, 1980.0)
    assert t["mem"] == pytest.approx(0.8)
    assert tm.load_terms({"bg_" + tm.BUSY: 0.5, "bg_" + tm.DRAM: 0.9}, 1980.0)["mem"] == 1.0
    assert tm.load_terms({"bg_" + tm.BUSY: 0.0, "bg_" + tm.DRAM: 0.3}, 1980.0)["mem"] == 0.0   # idle: no neighbour
    assert tm.load_terms({"bg_" + tm.BUSY: 0.5}, 1980.0)["mem"] == 0.0                          # not measured
    pr = prep([30, 30, 30], [5, 5, 5])
    base = tm.predict_us(pr, P, dict(t, wait_us=0.0))["interference_us"]
    assert base == pytest.approx(45.0)                                   # gamma 0: alpha * u * span
    with_mem = tm.predict_us(pr, dict(P, gamma=0.5), dict(t, wait_us=0.0))["interference_us"]
    assert with_mem == pytest.approx(45.0 * (1 + 0.5 * 0.8))
    old = {k: v for k, v in P.items() if k != "gamma"}                   # a model saved before gamma existed
    assert tm.predict_us(pr, old, dict(t, wait_us=0.0))["interference_us"] == pytest.approx(45.0)


def test_clock_term_scales_gpu_time_only():
    pr = prep([2, 2], [1000, 1000])
    r = tm.predict_us(pr, dict(P, clock_exp=1.0), terms(u=0.0, clock=1.25))
    assert r["interference_us"] == pytest.approx(0.25 * 2000)


@pytest.mark.parametrize("u", [0.0, 0.05, 0.3, 0.7, 0.95])
@pytest.mark.parametrize("spread", [None, {"host_sum_us": [0.9, 1.4], "before_us": [0.8, 1.3]}])
def test_p10_le_central_le_p90_under_load(u, spread):
    for pr in (prep([30, 30, 30], [5, 5, 5]), prep([2, 2, 2], [500, 500, 500])):
        r = tm.with_spread(pr, P, terms(u=u, wait=3.0), spread)
        assert r["p10"] <= r["central"] <= r["p90"]


def test_part_time_neighbour_runs_are_bimodal():
    """u = 0.5: half the runs are hit (extra E / u = 2E), half are not: p10 unhit, p90 hit."""
    pr = prep([2, 2, 2], [500, 500, 500])
    c = tm.predict_us(pr, P, terms(u=0.5, wait=0.0))
    r = tm.with_spread(pr, P, terms(u=0.5, wait=0.0), None)
    e = c["interference_us"]
    assert r["p10"] == pytest.approx(c["total_us"] - e)
    assert r["p90"] == pytest.approx(c["total_us"] + e)


def test_per_launch_models_are_unchanged():
    """Models without interference=run_share keep the per-launch wait (evaluator.py's fitted model)."""
    pr = dict(prep([30, 30, 30], [5, 5, 5]), interference="per_launch")
    t = terms(u=0.5, wait=10.0)
    assert tm.predict_us(pr, P, t)["total_us"] == pytest.approx(tm.timeline_us(pr, P, t)["total_us"])


def test_load_names_and_kinds():
    assert fi.load_name("stressor-matmul", 0.0) == "idle"
    assert fi.load_name("corunner-slices_compute_1ms", 0.7) == "slices_compute_1ms@0.7"
    assert fi.neighbour_kind("slices_memory_1ms@0.3", ["slices_*"]) == "training neighbour"
    assert fi.neighbour_kind("cnn_train@0.3", ["slices_*"]) == "held-out neighbour"
    assert fi.batch_of("resnet101_bs32_224x224") == 32
    # run_gpu_slices.sh writes the knob as given (host_spin@1.0); calibrate_loads.py's level reads 1 -> one name
    assert fi.canonical_load("host_spin@1.0") == fi.load_name("corunner-host_spin", 1.0) == "host_spin@1"
    assert fi.canonical_load("small_infer@0.50") == "small_infer@0.5"
    assert fi.canonical_load("idle") == "idle" and fi.canonical_load("odd@knob") == "odd@knob"


def test_labels_statistic_and_bad_value():
    s = pd.DataFrame({"model": ["m"] * 3, "load": ["idle"] * 3, "machine": ["a", "a", "b"],
                      "e2e_mean_ms": [1.0, 2.0, 9.0], "e2e_median_ms": [1.0, 1.0, 1.0], "e2e_p10_ms": [1.0] * 3,
                      "e2e_p90_ms": [3.0] * 3, "device_mean_ms": [1.0] * 3, "device_median_ms": [1.0] * 3})
    lab = fi.labels(s, "mean")
    assert lab["e2e_ms"].iloc[0] == 2.0 and lab["machines"].iloc[0] == 2 and lab["sessions"].iloc[0] == 3
    with pytest.raises(HaseError, match="statistic must be mean or median"):
        fi.labels(s, "mode")


def test_fit_on_committed_h200_neighbours(tmp_path):
    """The fit on the committed neighbour data: alpha inside its physical range, held-out neighbours disjoint
    from the training ones, every case with p10 <= central <= p90, the splits the issue names."""
    out = tmp_path / "fi"
    run_script([str(REPO / "inference" / "fit_interference.py"), "--set", f"out={out}", "--set", "summary=",
                "--set", f"timeline_model={CUPTI_LINES}"], tmp_path, cwd=REPO, timeout=600)
    s = json.loads((out / "summary.json").read_text())
    assert tm.LOWER["alpha"] < s["alpha"] < tm.UPPER["alpha"]
    assert set(s["train_neighbours"]).isdisjoint(s["heldout_neighbours"])
    assert all(n.startswith("slices_") for n in s["train_neighbours"])
    split = s["by_split"]["held-out neighbour / held-out arch"]
    assert split["cases"] > 0 and {"mape_pct", "within_10pct"} <= set(split["e2e"])
    cases = pd.read_csv(out / "cases.csv")
    assert (cases["pred_p10_ms"] <= cases["pred_e2e_ms"] + 1e-9).all()
    assert (cases["pred_e2e_ms"] <= cases["pred_p90_ms"] + 1e-9).all()
    model = json.loads((out / "timeline_model.json").read_text())
    assert model["interference"] == tm.RUN_SHARE and model["params"]["alpha"] == pytest.approx(s["alpha"])


def test_fit_on_committed_h100_neighbours_and_a_given_alpha(tmp_path):
    """The same code on the H100's own neighbours (one machine, 2 sessions a case): alpha fitted inside its
    range, the clock-pulling neighbour judged as held out; with `alpha` set, that alpha is used, not fitted."""
    h100 = ["--set", "interference_dirs=[benchmark/results/nvidia-h100/interference/machine_*]",
            "--set", "timeline_model=inference/results/nvidia-h100/corpus/timeline_model.json",
            "--set", "records=ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz",
            "--set", "min_sessions=2", "--set", "summary="]
    fitted, given = tmp_path / "fit", tmp_path / "given"
    run_script([str(REPO / "inference" / "fit_interference.py"), *h100, "--set", f"out={fitted}"], tmp_path,
               cwd=REPO, timeout=600)
    s = json.loads((fitted / "summary.json").read_text())
    assert tm.LOWER["alpha"] < s["alpha"] < tm.UPPER["alpha"]
    assert "tc_gemm_bursts@0.5" in s["heldout_neighbours"] and s["by_split"]["held-out neighbour / all archs"]["cases"] > 0
    # per machine, scaled by each machine's own host calibration: every machine named with a positive scale, and
    # its cases judged against that machine's own labels
    pm = s["per_machine_calibrated"]
    assert {"machine_m", "machine_q"} <= set(pm["machines"]) and all(v["host_scale"] > 0 for v in pm["machines"].values())
    per = pd.read_csv(fitted / "cases_per_machine.csv")
    assert pm["held-out neighbour"]["cases"] == int((per["kind"] == "held-out neighbour").sum()) > 0
    assert per.groupby(["machine", "model", "load"]).size().max() == 1
    run_script([str(REPO / "inference" / "fit_interference.py"), *h100, "--set", f"out={given}", "--set", "alpha=1.5"],
               tmp_path, cwd=REPO, timeout=600)
    g = json.loads((given / "timeline_model.json").read_text())
    assert g["params"]["alpha"] == 1.5 and g["interference_fit"]["alpha_from"].startswith("config")
    assert json.loads((fitted / "timeline_model.json").read_text())["interference_fit"]["alpha_from"] == "fit"


def test_missing_calibration_row_names_the_load(tmp_path):
    src = REPO / "benchmark" / "results" / "nvidia-h200" / "interference" / "machine_b"
    d = tmp_path / "machine_x"
    d.mkdir()
    (d / "slices_sessions.csv.xz").write_bytes((src / "slices_sessions.csv.xz").read_bytes())
    cal = pd.read_csv(src / "load_calibration.csv")
    cal[cal["load"] != "corunner-cnn_train"].to_csv(d / "load_calibration.csv", index=False)
    p = run_script([str(REPO / "inference" / "fit_interference.py"), "--set", f"interference_dirs=[{d}]",
                    "--set", f"out={tmp_path / 'o'}", "--set", "summary="], tmp_path, cwd=REPO, check=False,
                   timeout=300)
    assert p.returncode != 0
    assert "load 'cnn_train@0.3' has sessions but no calibration row" in p.stderr


def test_judge_timeline_on_the_committed_h100_sessions(tmp_path):
    """A timeline model judged on another GPU's sessions: labels are the medians over its sessions, every
    model is predicted with p10 <= central <= p90, and the split names the architectures' split."""
    out = tmp_path / "j"
    run_script([str(REPO / "inference" / "judge_timeline.py"), "--set", f"out={out}",
                "--set", f"timeline_model={CUPTI_LINES}"], tmp_path, cwd=REPO, timeout=600)
    s = json.loads((out / "summary.json").read_text())
    assert "idle / held-out arch" in s["by_split"] and s["sessions_per_model"] >= 3
    cases = pd.read_csv(out / "cases.csv")
    sess = pd.read_csv(REPO / "benchmark/results/nvidia-h100/timeline/machine_a/trace_sessions.csv.gz")
    m = cases["model"].iloc[0]
    assert cases["e2e_ms"].iloc[0] == pytest.approx(sess.loc[sess["model"] == m, "e2e_median_ms"].median())
    assert (cases["pred_e2e_p10_ms"] <= cases["pred_e2e_ms"] + 1e-9).all()
    assert (cases["pred_e2e_ms"] <= cases["pred_e2e_p90_ms"] + 1e-9).all()


def test_judge_timeline_needs_records(tmp_path):
    p = run_script([str(REPO / "inference" / "judge_timeline.py"), "--set", f"records={tmp_path}",
                    "--set", f"out={tmp_path / 'j'}"], tmp_path, cwd=REPO, check=False, timeout=300)
    assert p.returncode != 0 and "no CUDA record for" in p.stderr


def test_predictor_of_and_the_timeline_load_fields(tmp_path, monkeypatch):
    """Which kernel predictor a timeline model needs, and which background metrics it reads itself."""
    built = tmp_path / "training" / "models" / "kspace"
    built.mkdir(parents=True)
    (built / "manifest.json").write_text("{}")
    monkeypatch.setenv("HASE_HOME", str(tmp_path))
    rec = {"predictor_dir": "training/models/kspace", "params": dict(tm.DEFAULT_PARAMS)}
    assert tm.predictor_of(rec) == built                           # recorded, relative to the Hase home
    assert tm.predictor_of(rec, "/x/y") == Path("/x/y")            # --set predictor_dir wins
    assert tm.predictor_of(dict(rec, gpu_table={"by_key": {}})) is None   # CUPTI lines: no predictor needed
    assert tm.predictor_of({"params": {}}) is None and tm.predictor_of(None) is None
    with pytest.raises(HaseError, match="missing_one, which is not built"):
        tm.predictor_of(dict(rec, predictor_dir="training/models/missing_one"))
    assert tm.load_fields_of(rec, "cuda") == [tm.BUSY, tm.CLOCK]
    assert tm.load_fields_of(dict(rec, params=dict(rec["params"], gamma=0.5)), "cuda") == [tm.BUSY, tm.CLOCK, tm.DRAM]
    assert tm.load_fields_of(rec, "cpu") == [tm.CPU_BUSY] and tm.load_fields_of(None, "cuda") == []


def test_a_timeline_without_interference_terms_says_it_predicts_at_idle(tmp_path):
    """Issue 24: asked for a prediction under load with a timeline model that has no interference terms (here the
    shipped H200 default with them taken out; the committed Xeon CPU timeline has none either), the predictor gives
    the idle timeline and says so in one warning, never a silent idle number; the shipped default applies the load
    and says nothing of the kind."""
    import hase
    from hase.graph_model.dag_critical_path import records_in_file
    shipped = REPO / "inference" / "results" / "nvidia-h200" / "default" / "timeline_model.json"
    m = json.loads(shipped.read_text())
    assert tm.has_load_terms(m)
    m.pop("interference", None)
    for k in tm.LOAD_PARAMS:
        m["params"].pop(k, None)
    assert not tm.has_load_terms(m)
    bare = tmp_path / "timeline_model.json"
    bare.write_text(json.dumps(m))
    rec = records_in_file(str(REPO / "ort_analysis" / "ort_kernel_record" / "nvidia-h200" / "records.json.xz"),
                          models=["resnet18_bs1_224x224"])["resnet18_bs1_224x224"]
    load = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.8, "DCGM_FI_DEV_SM_CLOCK": 1500.0}
    r = hase.load_predictor("nvidia-h200", timeline_model=bare).predict(rec, load)
    said = [w for w in r.warnings if "no interference terms" in w]
    assert r.total_ms == pytest.approx(r.idle_ms) and len(said) == 1 and str(bare) in said[0]
    assert not [w for w in r.warnings if w.startswith("launch-wait field")]
    assert not [w for w in hase.load_predictor("nvidia-h200", timeline_model=bare).predict(rec).warnings
                if "interference" in w]                                     # at idle there is nothing to apply
    r = hase.load_predictor("nvidia-h200").predict(rec, load)
    assert r.total_ms > 1.2 * r.idle_ms and not [w for w in r.warnings if "no interference terms" in w]
    # there the wait matters, and its warning stays (dropped above by its kind, LaunchWaitWarning, not its words)
    assert [w for w in r.warnings if w.startswith("launch-wait field")]
    xeon = json.loads((REPO / "inference" / "results" / "cpu-intel-r-xeon-r-processor" /
                       "timeline_model.json").read_text())
    assert not tm.has_load_terms(xeon)


def test_slowdown_is_read_within_each_machine():
    """Two machines of different host speed: the pooled ratio would mix them; within each machine it does not."""
    rows = []
    for machine, idle, loaded in (("fast", 1.0, 1.1), ("slow", 1.5, None)):
        for s in range(2):
            rows.append({"machine": machine, "model": "m", "load": "idle", "session": s, "e2e_mean_ms": idle})
            if loaded is not None:
                rows.append({"machine": machine, "model": "m", "load": "x@0.5", "session": s, "e2e_mean_ms": loaded})
    rows.append({"machine": "slow", "model": "m", "load": "y@0.5", "session": 0, "e2e_mean_ms": 1.8})
    rows.append({"machine": "other", "model": "m", "load": "y@0.5", "session": 0, "e2e_mean_ms": 9.0})  # no idle
    sd = fi.machine_slowdowns(pd.DataFrame(rows), "mean")
    assert sd[("m", "x@0.5")] == pytest.approx(1.1)      # pooled: 1.1 / 1.25 = 0.88
    assert sd[("m", "y@0.5")] == pytest.approx(1.2)      # the machine without an idle label is left out


def test_clean_label_needs_its_columns(tmp_path):
    """label=clean reads the never-profiling process's runs; data traced before its mean was recorded is refused
    in one line naming the column, and a label that is neither is named too."""
    base = [str(REPO / "inference" / "fit_interference.py"), "--set",
            "interference_dirs=[benchmark/results/nvidia-h100/interference/machine_m]", "--set", f"out={tmp_path / 'o'}",
            "--set", "summary="]
    p = run_script(base + ["--set", "label=clean"], tmp_path, cwd=REPO, check=False, timeout=300)
    assert p.returncode != 0 and "column 'e2e_clean_mean_ms' is absent" in p.stderr
    # one machine with the column and one without: refused, naming the one without (not silently NaN labels)
    mixed = [a.replace("machine_m]", "machine_o,benchmark/results/nvidia-h100/interference/machine_m]") for a in base]
    p = run_script(mixed + ["--set", "label=clean"], tmp_path, cwd=REPO, check=False, timeout=300)
    assert p.returncode != 0 and "machine_m" in p.stderr and "e2e_clean_mean_ms" in p.stderr
    p = run_script(base + ["--set", "label=cuptified"], tmp_path, cwd=REPO, check=False, timeout=300)
    assert p.returncode != 0 and "label must be traced, clean or paired" in p.stderr


def test_paired_label_replaces_the_stage_rows_of_its_pairs(tmp_path):
    """label paired: a pair's label is the machine's idle label x each session's paired slowdown, whatever the
    loaded stage read (a host that drifted between stages: the stage says 3.0x, the paired sessions 1.5x)."""
    d = tmp_path / "machine_x"
    d.mkdir()
    rows = [("m_bs1", "idle", 0, 2.0), ("m_bs1", "idle", 1, 2.2), ("m_bs1", "idle_end", 0, 1.8),
            ("m_bs1", "cnn_train@0.3", 0, 6.0), ("m_bs1", "small_infer@0.5", 0, 2.4)]
    sess = pd.DataFrame([{"model": m, "load": ld, "session": i, "e2e_mean_ms": v, "e2e_median_ms": v,
                          "e2e_p10_ms": v, "e2e_p90_ms": v, "device_mean_ms": 1.0, "device_median_ms": 1.0}
                         for m, ld, i, v in rows]).assign(machine=d.name)
    pd.DataFrame({"model": ["m_bs1"] * 2, "load": ["cnn_train@0.30"] * 2, "session": [0, 1],
                  "slowdown": [1.4, 1.6], "idle_mean_ms": [1.0, 1.0], "idle_median_ms": [1.0, 1.0],
                  "loaded_mean_ms": [1.4, 1.6], "loaded_median_ms": [1.2, 1.2], "loaded_p10_ms": [0.9, 0.9],
                  "loaded_p90_ms": [3.0, 3.0]}).to_csv(d / "paired.csv", index=False)
    out = fi.with_paired(sess, [d])
    out["load"] = out["load"].map(fi.canonical_load).replace({fi.IDLE_END: fi.IDLE})
    assert (out["load"] == "cnn_train@0.3").sum() == 2                  # the stage row is gone, 2 paired sessions
    assert (out["load"] == "small_infer@0.5").sum() == 1                # a load without pairs keeps its stage row
    within = fi.machine_slowdowns(out, "mean")
    assert within["m_bs1", "cnn_train@0.3"] == pytest.approx(1.5)       # not 6.0 / 2.0
    assert within["m_bs1", "small_infer@0.5"] == pytest.approx(2.4 / 2.0)
    paired = out[out["load"] == "cnn_train@0.3"]
    assert paired["e2e_p90_ms"].iloc[0] == pytest.approx(2.0 * 3.0)      # idle label 2.0 ms per 1 ms of idle runs
    (d / "paired.csv").unlink()
    with pytest.raises(HaseError, match="paired.csv missing"):
        fi.with_paired(sess, [d])


def test_idle_drift_is_the_last_idle_stage_over_the_first():
    rows = [("a", "idle", 2.0), ("a", "idle", 2.2), ("a", "idle_end", 1.8), ("b", "idle", 1.0), ("b", "idle_end", 1.2),
            ("c", "idle", 1.0)]   # c: no idle_end, left out
    s = pd.DataFrame([{"machine": "machine_x", "model": m, "load": ld, "e2e_mean_ms": v} for m, ld, v in rows])
    d = fi.idle_drift(s, "mean")["machine_x"]
    assert d["models"] == 2 and d["range"] == pytest.approx([1.8 / 2.1, 1.2])
    assert d["idle_end_over_idle_median"] == pytest.approx((1.8 / 2.1 + 1.2) / 2)


def test_fit_interference_runs_on_paired_labels(tmp_path):
    """label=paired end to end on a real machine folder (H100 machine r) with a paired.csv made from its own stages:
    every (model, load) there is judged, and its label is the machine's idle label x the paired slowdown."""
    import shutil
    src = REPO / "benchmark" / "results" / "nvidia-h100" / "interference" / "machine_r"
    d = tmp_path / "machine_r"
    shutil.copytree(src, d)
    sess = pd.read_csv(src / "slices_sessions.csv.xz")
    loaded = sess[sess["load"].str.startswith(("cnn_train", "small_infer"))]
    idle = sess[sess["load"] == "idle"].groupby("model")["e2e_clean_mean_ms"].median()
    pd.DataFrame({"model": loaded["model"], "load": loaded["load"], "session": loaded["session"],
                  "slowdown": 1.25, "idle_mean_ms": loaded["model"].map(idle), "idle_median_ms": loaded["model"].map(idle),
                  "loaded_mean_ms": 1.25 * loaded["model"].map(idle), "loaded_median_ms": 1.25 * loaded["model"].map(idle),
                  "loaded_p10_ms": loaded["model"].map(idle), "loaded_p90_ms": 2 * loaded["model"].map(idle)}).to_csv(
        d / "paired.csv", index=False)
    out = tmp_path / "o"
    run_script([str(REPO / "inference" / "fit_interference.py"), "--set", f"interference_dirs=[{d}]",
                "--set", "timeline_model=inference/results/nvidia-h100/corpus/timeline_model.json",
                "--set", "records=ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz",
                "--set", "label=paired", "--set", "alpha=0.964", "--set", "min_sessions=2", "--set", f"out={out}",
                "--set", "summary="], tmp_path, cwd=REPO, timeout=600)
    cases = pd.read_csv(out / "cases.csv")
    paired = cases[cases["load"].str.startswith(("cnn_train", "small_infer"))]
    assert len(paired) == 2 * 25 and (paired["slowdown"] - 1.25).abs().max() < 1e-4
    idle_lab = cases[cases["load"] == "idle"].set_index("model")["e2e_ms"]
    both = sess[sess["load"].isin(["idle", "idle_end"])].groupby("model")["e2e_clean_mean_ms"].median()
    assert (paired["e2e_ms"] / paired["model"].map(both) - 1.25).abs().max() < 1e-4   # idle pooled x slowdown (5 digits)
    assert idle_lab.index.nunique() == 25
    s = json.loads((out / "summary.json").read_text())
    assert s["idle_drift"]["machine_r"]["models"] == 25
