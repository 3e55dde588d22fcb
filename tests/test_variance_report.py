"""benchmark/variance_report.py on small synthetic trace_sessions tables (not the committed data)."""
import json
from pathlib import Path

import pandas as pd
import pytest

from hase.benchmark import variance_report as vr  # noqa: E402
from tests.helpers import run_script  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

SCRIPT = Path(__file__).resolve().parent.parent / "benchmark" / "variance_report.py"
# machine -> e2e_median_ms of the sessions of model "m" (EXHAUSTIVE)
E2E = {"machine_x": [1.0, 1.25, 1.5], "machine_y": [2.0, 2.1, 2.5]}


def sessions(values, algo="EXHAUSTIVE", model="m", gpu=500.0) -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame({
        "model": [model] * n, "cudnn_conv_algo_search": [algo] * n, "session": range(n),
        "e2e_median_ms": values, "device_median_ms": [0.5] * n, "host_sum_us": [100.0 + 10 * i for i in range(n)],
        "gpu_sum_us": [gpu] * n, "h2d_gpu_us": [10.0] * n, "d2h_gpu_us": [1.0] * n, "before_us": [20.0] * n,
        "after_us": [5.0] * n, "kernel_signature": ["abc"] * n, "e2e_sm_clock_mhz": [1980.0] * n,
        "first_run_s": [0.2] * n})


def write_machines(root: Path, data=E2E, drop=None) -> list:
    out = []
    for name, vals in data.items():
        d = root / name
        d.mkdir(parents=True)
        df = sessions(vals)
        if drop:
            df = df.drop(columns=[drop])
        df.to_csv(d / "trace_sessions.csv.gz", index=False)
        out.append(d)
    return out


def test_pair_diffs_and_label_exact():
    assert vr.pair_diffs_pct([1.0, 1.1, 1.2]) == pytest.approx([10.0, 20.0, 100 / 11])
    assert vr.pair_diffs_pct([2.0, 1.0]) == pytest.approx([100.0])
    lab = vr.label_stats([1.0, 1.1, 1.2, 2.0, 2.0, 2.2])
    assert lab["median"] == pytest.approx(1.6)
    assert lab["p10"] == pytest.approx(1.05)
    assert lab["p90"] == pytest.approx(2.1)
    assert lab["spread_pct"] == pytest.approx((2.1 - 1.05) / 1.6 * 100)


def test_build_within_between_and_label(tmp_path):
    folders = write_machines(tmp_path)
    cfg = dict(vr.DEFAULTS)
    s, _ = vr.build(folders, cfg)
    r = s["algos"]["EXHAUSTIVE"]["per_model"]["m"]
    # within-machine pairs: x: 25, 50, 20; y: 5, 25, 19.048 -> median of the six = (20 + 25) / 2
    assert r["within_median_pct"] == pytest.approx(22.5)
    assert r["within_max_pct"] == pytest.approx(50.0)
    # per-machine medians 1.25 and 2.1 -> |2.1 - 1.25| / 1.25
    assert r["between_median_pct"] == pytest.approx(68.0)
    # all six sessions: median (1.5 + 2.0) / 2, p10 1.0 + 0.5 * 0.25, p90 2.1 + 0.5 * 0.4
    assert (r["median"], r["p10"], r["p90"]) == pytest.approx((1.75, 1.125, 2.3))
    assert r["over_threshold_within"] is True and r["within_pairs_over_threshold"] == 5
    ex = s["algos"]["EXHAUSTIVE"]
    assert ex["within_machine_median_abs_diff_pct"] == pytest.approx(22.5)
    assert ex["between_machine_median_abs_diff_pct"] == pytest.approx(68.0)
    assert ex["share_session_pairs_within_machine_over_threshold"] == pytest.approx(5 / 6)
    assert s["machines"] == {"count": 2, "names": ["machine_x", "machine_y"]}
    assert s["sessions_per_model"]["min"] == 3
    assert s["attribution"]["share_models_multiple_signatures"] == 0.0
    assert r["dominant_term"] == "host_sum"


def test_heuristic_comparison(tmp_path):
    d = tmp_path / "machine_x"
    d.mkdir()
    df = pd.concat([sessions([1.0, 1.2]), sessions([1.5, 1.5], algo="HEURISTIC", gpu=550.0)])
    df.loc[df.cudnn_conv_algo_search == "HEURISTIC", "kernel_signature"] = "def"
    df.to_csv(d / "trace_sessions.csv.gz", index=False)
    s, _ = vr.build([d], dict(vr.DEFAULTS))
    c = s["vs_baseline"]["HEURISTIC"]
    assert c["median_ratio"]["label"] == pytest.approx(1.5 / 1.1)
    assert c["median_ratio"]["gpu_sum"] == pytest.approx(1.1)
    assert c["share_signature_differs"] == 1.0
    assert c["within_machine_median_abs_diff_pct"] == {"HEURISTIC": 0.0, "EXHAUSTIVE": pytest.approx(20.0)}


def test_missing_column_is_one_line_error(tmp_path):
    folders = write_machines(tmp_path, drop="host_sum_us")
    with pytest.raises(HaseError, match="missing column 'host_sum_us'") as e:
        vr.read_sessions(folders[0])
    assert str(folders[0] / "trace_sessions.csv.gz") in str(e.value)
    p = run_script([SCRIPT, "--set", f"sources=[{tmp_path}/machine_*]", "--set", f"out={tmp_path / 'out'}"],
                   tmp_path, check=False, timeout=120)
    assert p.returncode == 2
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "machine_x/trace_sessions.csv.gz: missing column 'host_sum_us'" in err[0]
    assert not (tmp_path / "out").exists()


def test_main_writes_artifacts(tmp_path):
    write_machines(tmp_path)
    out = tmp_path / "out"
    run_script([SCRIPT, "--set", f"sources=[{tmp_path}/machine_*]", "--set", f"out={out}"], tmp_path, timeout=120)
    s = json.loads((out / "summary.json").read_text())
    assert s["algos"]["EXHAUSTIVE"]["per_model"]["m"]["median"] == pytest.approx(1.75)
    assert "| m | 1.750 | 1.125-2.300 |" in (out / "report.md").read_text()
    assert (out / "spread.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(out.glob("*.tmp"))
