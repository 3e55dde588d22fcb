"""The CPU EP timeline model with measured terms (inference/fit_cpu_timeline.py): the fit on the committed CPU
sessions (node_source=lines: no phase 5 predictor needed), the CPU spread of timeline_model.with_spread, one-line
errors for bad input. No timing assertions (CI is a loaded 2-core machine)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]

from hase.inference import fit_cpu_timeline as fct  # noqa: E402
from hase.inference import timeline_model as tm  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

DATA = REPO / "benchmark" / "results" / fct.SLUG / "timeline" / "machine_a"
RECORDS = REPO / "ort_analysis" / "ort_kernel_record" / fct.SLUG / "records.json.xz"
IDLE = {"u": 0.0, "clock_ratio": 1.0, "wait_us": 0.0}


def fit(out: Path, *sets) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "inference" / "fit_cpu_timeline.py"), "--set", "node_source=lines",
           "--set", f"out={out}", *[a for s in sets for a in ("--set", s)]]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu_fit")
    r = fit(out)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_fit_on_committed_cpu_data_gives_finite_terms_and_ordered_spread(fitted):
    model = tm.load(fitted / "timeline_model.json")
    assert model["threads"] == 8 and model["node_source"] == "lines"
    for k in ("c0_us", "per_node_us"):
        assert math.isfinite(model["measured"][k])
    assert model["params"]["c0_us"] >= 0.0
    lo, hi = model["spread"]["session_us"]
    assert 0 < lo <= 1.0 <= hi
    cases = pd.read_csv(fitted / "cases.csv")
    assert set(cases["split"]) == {"training arch", "held-out arch"}
    assert len(cases) >= 40
    for c in ("pred_e2e_ms", "pred_e2e_p10_ms", "pred_e2e_p90_ms", "pred_node_sum_us"):
        assert np.isfinite(cases[c]).all() and (cases[c] > 0).all()
    assert (cases["pred_e2e_p10_ms"] <= cases["pred_e2e_ms"]).all()
    assert (cases["pred_e2e_ms"] <= cases["pred_e2e_p90_ms"]).all()
    summary = json.loads((fitted / "summary.json").read_text())
    names = list(summary["by_split"])
    held = [n for n in names if "idle" in n and "held-out arch" in n]
    assert held and {"mape_pct", "within_10pct"} <= set(summary["by_split"][held[0]]["e2e"])
    assert "mape_pct" in summary["by_split"][held[0]]["node_sum"]
    # the band holds the model's error on the held-out architectures (quantiles of log(label / central))
    ho = cases[cases["split"] == "held-out arch"]
    r = np.log(ho["e2e_ms"] / ho["pred_e2e_ms"])
    assert model["spread"]["residual_log_q"] == pytest.approx([r.quantile(0.1), r.quantile(0.9)], abs=1e-4)
    assert f"{len(ho)} models" in model["spread"]["residual_source"]


def test_cpu_spread_scales_the_whole_run():
    prep = {"h": np.full(3, -5.0), "dev": np.array([100.0, 200.0, 300.0]), "floor": 0.0, "floor_us": 0.0,
            "device": "cpu", "n": 3, "h2d_us": 0.0, "d2h_us": 0.0}
    p = dict(tm.DEFAULT_PARAMS, c0_us=50.0)
    s = tm.with_spread(prep, p, IDLE, {"session_us": [0.8, 1.2]})
    assert s["central"] == pytest.approx(50 + 600 - 15)
    assert s["p10"] == pytest.approx(0.8 * s["central"]) and s["p90"] == pytest.approx(1.2 * s["central"])
    inside = tm.with_spread(prep, p, IDLE, {"session_us": [1.1, 0.9]})   # quantiles never cross the central value
    assert inside["p10"] <= inside["central"] <= inside["p90"]


def test_overhead_terms_recover_a_known_line():
    lab = pd.DataFrame({"n_nodes": [20, 60, 200, 400], "node_sum_us": [1000.0, 5000.0, 20000.0, 90000.0]})
    lab["e2e_ms"] = (lab["node_sum_us"] + 150.0 - 4.0 * lab["n_nodes"]) / 1e3
    t = fct.overhead_terms(lab)
    assert t["c0_us"] == pytest.approx(150.0) and t["per_node_us"] == pytest.approx(-4.0)


def test_sessions_of_another_thread_count_are_refused(tmp_path):
    d = tmp_path / "machine_a"
    d.mkdir()
    s = pd.read_csv(DATA / "trace_sessions.csv.gz")
    s.assign(threads=4).to_csv(d / "trace_sessions.csv.gz", index=False)
    (d / "trace_nodes.csv.xz").write_bytes((DATA / "trace_nodes.csv.xz").read_bytes())
    with pytest.raises(HaseError) as e:
        fct.read_tables([d], 8)
    msg = str(e.value)
    assert "threads" in msg and "trace_sessions.csv.gz" in msg and "\n" not in msg


def test_bad_inputs_give_one_line_errors(tmp_path):
    d = tmp_path / "machine_a"
    d.mkdir()
    s = pd.read_csv(DATA / "trace_sessions.csv.gz").drop(columns=["ort_node_sum_us"])
    s.to_csv(d / "trace_sessions.csv.gz", index=False)
    (d / "trace_nodes.csv.xz").write_bytes((DATA / "trace_nodes.csv.xz").read_bytes())
    r = fit(tmp_path / "out", f"timeline_dirs=[{d}]", f"records={RECORDS}")
    assert r.returncode != 0
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "ort_node_sum_us" in err[0] and "trace_sessions.csv.gz" in err[0]
    # a records archive that does not hold a measured model
    bad = tmp_path / "records.json.xz"
    bad.write_bytes(b"not xz")
    with pytest.raises(HaseError) as e:
        fct.read_records(bad, ["resnet18_bs1_224x224"])
    assert "records.json.xz" in str(e.value) and "\n" not in str(e.value)
    r = fit(tmp_path / "out", "threads=zero")
    assert r.returncode != 0 and "threads" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_record_of_another_export_is_named(tmp_path):
    """Measured nodes that carry most of a model's time but are missing from its record -> HaseError."""
    rec = {"m": {"kernels": [{"node_name": "a"}], "edges": []}}
    per_node = pd.DataFrame({"model": ["m", "m"], "node": ["a", "b"], "gpu_us": [1.0, 99.0]})
    with pytest.raises(HaseError) as e:
        fct.unmatched_share(rec, per_node, tmp_path / "records.json.xz", None)
    assert "'b'" in str(e.value) and "records.json.xz" in str(e.value)


def test_read_tables_names_the_machine_folder_of_the_bad_session(tmp_path):
    """Two machine folders, the second's sessions at another thread count or with a zero label: the one-line error
    names the second folder's sessions file, not the first one's."""
    import shutil
    from hase.inference.fit_cpu_timeline import read_tables
    from hase.utils.errors import HaseError
    src = REPO / "benchmark" / "results" / "cpu-amd-epyc" / "threads" / "t2" / "machine_a"
    a, b = tmp_path / "machine_a", tmp_path / "machine_b"
    for d in (a, b):
        shutil.copytree(src, d)
    s = pd.read_csv(b / "trace_sessions.csv.xz")
    s.assign(threads=1).to_csv(b / "trace_sessions.csv.xz", index=False)
    with pytest.raises(HaseError, match="column 'threads'") as e:
        read_tables([a, b], threads=2)
    assert "machine_b" in str(e.value) and "machine_a" not in str(e.value)
    s.assign(e2e_median_ms=[0.0] + list(s["e2e_median_ms"].iloc[1:])).to_csv(b / "trace_sessions.csv.xz", index=False)
    with pytest.raises(HaseError, match="column 'e2e_median_ms'") as e:
        read_tables([a, b], threads=2)
    assert "machine_b" in str(e.value)


CORPUS = REPO / "benchmark" / "results" / "cpu-amd-epyc" / "corpus"


def test_node_trees_on_the_cpu_corpus_fit_save_and_predict_through_the_predictor(tmp_path):
    """node_source trees: the node model learns the CPU node times of the committed corpus (less ORT's profiler cost
    per node), is saved beside the timeline, and a Predictor given that timeline prices a held-out record with it;
    without the profiler cost the fit is refused in one line (the per-node term would be negative)."""
    from hase.api import Predictor
    from hase.graph_model.dag_critical_path import records_in_file
    from hase.inference.node_model import NodeModel
    dirs = f"[{CORPUS / 'v3' / 'exam' / 'machine_a'}]"
    recs = records_in_file(CORPUS / "records.json.xz", "cpu")
    exam3 = sorted(m for m in recs if "-s9400_" in m or "-s9401_" in m)
    held = [m for m in exam3 if m.startswith(("vit-", "rnn-", "unet-"))]
    train = sorted({m.split("_bs")[0] for m in exam3 if m not in held})
    common = [f"timeline_dirs={dirs}", "threads=2", f"records={CORPUS / 'records.json.xz'}", "max_unmatched_share=0.1",
              f"train_archs=[{', '.join(train)}]"]
    r = fit(tmp_path / "no_delta", *common, "node_source=trees")
    assert r.returncode != 0 and "profiler_node_us" in r.stderr
    out = tmp_path / "trees"
    r = fit(out, *common, "node_source=trees", "profiler_node_us=auto")
    assert r.returncode == 0, r.stderr[-2000:]
    model = tm.load(out / "timeline_model.json")
    assert model["node_source"] == "trees" and "gpu_table" not in model and model["measured"]["per_node_us"] >= 0
    assert 3.0 <= model["measured"]["profiler_node_us"] <= 6.0   # a node that does nothing: 3-4 us on this VM
    cases = pd.read_csv(out / "cases.csv")
    assert set(cases.loc[cases["split"] == "held-out arch", "model"]) == set(held)
    p = Predictor("cpu", timeline_model=out / "timeline_model.json")
    assert isinstance(p.predictor, NodeModel) and p.predictor.device == "cpu"
    rec = dict(recs[held[0]], device="cpu")
    pred = p.predict(rec)
    row = cases.set_index("model").loc[held[0]]
    assert pred.total_ms == pytest.approx(row["pred_e2e_ms"], rel=1e-3)   # the fit's judgement is the product's
    # a calibration of another CPU scales each node's tree time by its own line's ratio (scale_lines, fitted on the
    # same nodes), the per-node term and c0 by the host index (machine_calibration.cpu_node_ratios)
    ref = model["calibration_ref"]
    assert model["scale_lines"]["key"] == "cpu" and ref.get("conv_gflops") and ref.get("host_index_us")
    rates = {k: ref[k] for k in ("conv_gflops", "matmul_gflops", "add_gbps")}
    same = p.predict(rec, calibration={"device": "cpu", "threads": 2, "host_index_us": ref["host_index_us"],
                                       "compute": rates})
    assert same.total_ms == pytest.approx(pred.total_ms, rel=1e-9)   # the CPU it was measured on: unchanged
    slow = p.predict(rec, calibration={"device": "cpu", "threads": 2, "host_index_us": ref["host_index_us"],
                                       "compute": {k: v / 3 for k, v in rates.items()}})
    assert 2.0 < slow.total_ms / pred.total_ms < 3.0 + 1e-9   # compute 3x slower, dispatch as fast
    assert not any("calibration not applied" in w for w in slow.warnings)
    # host 2x slower alone: the model with the smaller nodes slows more (its time is more dispatch), neither 2x
    host2 = {"device": "cpu", "threads": 2, "host_index_us": 2 * ref["host_index_us"], "compute": rates}
    ratio = {}
    for m in (held[0], held[-1]):
        r = dict(recs[m], device="cpu")
        ratio[m] = (p.predict(r, calibration=host2).total_ms / p.predict(r).total_ms,
                    p.predict(r).total_ms / len(r["kernels"]))
    (a, us_a), (b, us_b) = ratio.values()
    assert 1.0 < min(a, b) and max(a, b) < 2.0
    assert (a > b) == (us_a < us_b)
    # an older trees timeline without the lines: predicted at its own CPU's speed, and it says so
    old = dict(model)
    old.pop("scale_lines")
    (out / "old.json").write_text(json.dumps(old))
    po = Predictor("cpu", timeline_model=out / "old.json")
    o = po.predict(rec, calibration=host2)
    assert o.total_ms == pytest.approx(pred.total_ms, rel=1e-6)
    assert any("calibration not applied" in w and "node trees" in w for w in o.warnings)
