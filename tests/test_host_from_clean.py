"""fit_corpus_timeline.host_from_clean: a dispatch-bound model's traced node dispatch is scaled so its timeline runs
as long as its clean label; a GPU-bound model (the label does not pin its host sum) keeps its labels."""
import pandas as pd
import pytest

from hase.inference import timeline_model as tm
from hase.inference.fit_corpus_timeline import host_from_clean

N = 20


def _record() -> dict:
    return {"device": "cuda", "kernels": [{"id": str(i), "node_name": f"n{i}", "op_type": "Add", "type": "Add",
                                           "category": "elementwise", "ep": "CUDAExecutionProvider"} for i in range(N)]}


def _model() -> dict:
    return {"host_table": {"default_us": 5.0, "by_op_us": {}, "by_category_us": {}}, "host_semantics": tm.LAUNCH,
            "gpu_floor_frac": 0.0, "gpu_floor_us": 0.0, "bandwidth": None,
            "copies_measured": {"h2d_us_per_byte": 0.0, "d2h_us_per_byte": 0.0, "us_per_node": 0.0},
            "params": dict(tm.DEFAULT_PARAMS, c0_us=30.0, kappa=1.0)}


def _per_node(model: str, host_us: float, gpu_us: float) -> pd.DataFrame:
    return pd.DataFrame({"model": model, "node": [f"n{i}" for i in range(N)], "op": "Add",
                         "host_plain_us": host_us, "host_us": host_us + 5.0, "gpu_us": gpu_us})


def test_dispatch_bound_model_is_brought_to_its_clean_label():
    # traced: 20 nodes of 10 us dispatch (each launches at the start of its interval; its 1 us kernel ends before the
    # next launch) -> 30 + 200 = 230 us; the clean process ran the model in 130 us: its dispatch was half the trace's
    per_node = pd.concat([_per_node("disp", 10.0, 1.0), _per_node("gpu", 10.0, 400.0)])
    sessions = pd.DataFrame({"model": ["disp", "gpu"], "gpu_idle_us": [200.0, 10.0], "span_us": [221.0, 8010.0]})
    lab = pd.DataFrame({"e2e_ms": [0.130, 5.0]}, index=["disp", "gpu"])
    out, fac = host_from_clean(per_node, ["disp", "gpu"], {"disp": _record(), "gpu": _record()}, _model(), lab,
                               sessions, 0.5, (0.25, 4.0))
    assert list(fac.index) == ["disp"]                 # the GPU-bound model is not pinned by its label
    assert fac["disp"] == pytest.approx(0.5, rel=1e-3)
    assert out.loc[out["model"] == "disp", "host_plain_us"].tolist() == pytest.approx([5.0] * N, rel=1e-3)
    assert out.loc[out["model"] == "gpu", "host_plain_us"].tolist() == [10.0] * N
    assert per_node.loc[per_node["model"] == "disp", "host_plain_us"].tolist() == [10.0] * N   # input untouched


def test_factor_is_clipped_where_no_dispatch_explains_the_label():
    per_node = _per_node("disp", 10.0, 1.0)
    sessions = pd.DataFrame({"model": ["disp"], "gpu_idle_us": [200.0], "span_us": [221.0]})
    lab = pd.DataFrame({"e2e_ms": [0.02]}, index=["disp"])   # shorter than the fixed cost alone
    _, fac = host_from_clean(per_node, ["disp"], {"disp": _record()}, _model(), lab, sessions, 0.5, (0.25, 4.0))
    assert fac["disp"] == 0.25


def test_c0_and_kappa_are_recovered_from_out_of_fold_runs():
    """fit_corpus_timeline.fit_c0_kappa: dispatch-bound runs of different lengths, labelled with a known fixed cost
    and host factor, give those two constants back (the fixed cost is what the short runs pin, kappa the long)."""
    import numpy as np
    from hase.inference.fit_corpus_timeline import FIT_BOUNDS, fit_c0_kappa, predict_idle
    model = _model()
    preps = []
    for n in (3, 10, 40, 120):
        rec = {"device": "cuda", "kernels": _record()["kernels"] * (n // N + 1)}
        rec["kernels"] = rec["kernels"][:n]
        preps.append(tm.prepared(rec, {k["id"]: 0.001 for k in rec["kernels"]}, model,
                                 node_host_us=np.full(n, 8.0)))
    truth = dict(model["params"], c0_us=60.0, kappa=1.2)
    labels = np.array([predict_idle(p, truth, {})["central"] for p in preps])
    got = fit_c0_kappa(preps, labels, model["params"], {})
    assert got["c0_us"] == pytest.approx(60.0, abs=1.0) and got["kappa"] == pytest.approx(1.2, abs=0.01)
    assert set(got) == set(FIT_BOUNDS)


def test_fit_c0_kappa_needs_out_of_fold_runs(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, str(repo / "inference" / "fit_corpus_timeline.py"), "--set", "fit_c0_kappa=true",
                        "--set", "cv_folds=0", "--set", f"out={tmp_path}"], cwd=repo, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode != 0 and "fit_c0_kappa needs out-of-fold runs" in p.stderr


def test_labels_at_reference_take_each_labels_host_speed_out():
    """labels_at_reference: a dispatch-bound label taken on a machine whose calibration reads twice the reference
    (elasticity 1: host_scale 2) pins the reference dispatch as that machine's fixed cost and dispatch, both doubled;
    fit_c0_kappa given each run's label scale returns the reference speed's constants; label_host_scales is the
    geometric mean of the label's machines' scales."""
    import numpy as np
    from hase.inference.fit_corpus_timeline import fit_c0_kappa, label_host_scales, predict_idle
    from hase.inference import machine_calibration as mc
    ref = {"host_index_us": 7.0, "elasticity": 1.0}
    clean = pd.DataFrame({"machine": ["a", "b", "b"], "model": ["m1", "m1", "m2"],
                          "clean_calib_host_index_us": [7.0, 14.0, 14.0]})
    s = label_host_scales(clean, ref)
    assert s["m1"] == pytest.approx(2 ** 0.5) and s["m2"] == pytest.approx(2.0)
    per_node = _per_node("disp", 10.0, 1.0)
    sessions = pd.DataFrame({"model": ["disp"], "gpu_idle_us": [200.0], "span_us": [221.0]})
    lab = pd.DataFrame({"e2e_ms": [0.26]}, index=["disp"])
    _, at_ref = host_from_clean(per_node, ["disp"], {"disp": _record()}, _model(), lab, sessions, 0.5, (0.25, 4.0))
    _, slow = host_from_clean(per_node, ["disp"], {"disp": _record()}, _model(), lab, sessions, 0.5, (0.25, 4.0),
                              pd.Series({"disp": 2.0}))
    # the run is c0 + 20 dispatches: at the reference 30 + 200 f = 260 us; on the slow machine c0 and every dispatch
    # twice as long, 60 + 400 f = 260 us
    assert at_ref["disp"] == pytest.approx(1.15, rel=1e-3) and slow["disp"] == pytest.approx(0.5, rel=1e-3)
    model = _model()
    preps = []
    for n in (3, 10, 40, 120):
        rec = {"device": "cuda", "kernels": (_record()["kernels"] * (n // N + 1))[:n]}
        preps.append(tm.prepared(rec, {k["id"]: 0.001 for k in rec["kernels"]}, model, node_host_us=np.full(n, 8.0)))
    truth = dict(model["params"], c0_us=60.0, kappa=1.2)
    scales = np.array([1.5, 1.5, 1.3, 1.3])      # labelled on two slow machines
    labels = np.array([predict_idle(p, mc.calibrated_params(truth, sc), {})["central"] for p, sc in zip(preps, scales)])
    got = fit_c0_kappa(preps, labels, model["params"], {}, scales)
    assert got["c0_us"] == pytest.approx(60.0, abs=1.0) and got["kappa"] == pytest.approx(1.2, abs=0.01)
    blind = fit_c0_kappa(preps, labels, model["params"], {})
    assert blind["kappa"] > 1.4       # blind to the machines: their slowness read as the model's
