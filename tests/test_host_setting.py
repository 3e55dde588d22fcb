"""cpu_pinned, the host setting as a session option (inference/host_setting.py): its algebra, and a real record
predicted through the API for both GPUs with and without it."""
from pathlib import Path

import numpy as np
import pytest

from hase.inference import host_setting
from hase.utils.errors import HaseError

REPO = Path(__file__).resolve().parent.parent
F = {"host_scale": 0.9, "spread_scale": 0.5, "processes": {"default": 4, "one_cpu": 8}, "source": "x"}


def test_pinning_scales_the_host_terms_and_pulls_their_quantiles_toward_one():
    prep = {"h": np.array([10.0, 20.0]), "h2d_us": 5.0}
    spread = {"host_sum_us": [0.8, 1.4], "before_us": [0.9, 1.2], "residual_log_q": [-0.1, 0.2]}
    p2, s2 = host_setting.pinned(prep, spread, F)
    assert p2["h"].tolist() == [9.0, 18.0] and p2["h2d_us"] == 5.0 and prep["h"].tolist() == [10.0, 20.0]
    assert s2["host_sum_us"] == pytest.approx([0.9, 1.2]) and s2["before_us"] == pytest.approx([0.95, 1.1])
    assert s2["residual_log_q"] == [-0.1, 0.2]            # the model's own error band is not the host's
    assert host_setting.pinned(prep, None, F)[1] is None


def test_a_study_without_its_settings_is_one_line(tmp_path, monkeypatch):
    f = tmp_path / "summary.json"
    f.write_text('{"by_setting": {"default": {"latency_vs_fastest": 1.1, "latency_spread_pct": 20}}}')
    monkeypatch.setattr(host_setting, "study_path", lambda slug: f)
    with pytest.raises(HaseError, match="by_setting.default and by_setting.one_cpu"):
        host_setting.pinned_factors("nvidia-h200")
    monkeypatch.setattr(host_setting, "study_path", lambda slug: tmp_path / "none.json")
    assert host_setting.pinned_factors("nvidia-h200") is None


@pytest.fixture(scope="module")
def records():
    from helpers import corpus_records
    return corpus_records(["resnet50_bs1_224x224", "resnet50_bs32_224x224"])


def test_pinned_prediction_follows_each_gpus_study(records, monkeypatch):
    import hase
    h200, h100 = hase.load_predictor("nvidia-h200"), hase.load_predictor("nvidia-h100")
    r1, r32 = records["resnet50_bs1_224x224"], records["resnet50_bs32_224x224"]
    f200 = host_setting.pinned_factors("nvidia-h200")
    a, b = h200.predict(r1), h200.predict(r1, options={"cpu_pinned": True})
    # batch 1 is host dispatch: it moves with the study's host scale, and the study's name is in the answer
    assert (b.total_ms < a.total_ms) == (f200["host_scale"] < 1.0) and b.total_ms != a.total_ms
    assert "host_speed/summary.json" in b.details["host_setting"] and b.provenance["session_options"]["cpu_pinned"]
    assert a.details["host_setting"].startswith("unbound")
    g, g2 = h200.predict(r32), h200.predict(r32, options={"cpu_pinned": True})
    assert abs(g2.total_ms / g.total_ms - 1) < abs(b.total_ms / a.total_ms - 1)   # GPU-bound: moves less
    assert "did not narrow" in h100.predict(r1, options={"cpu_pinned": True}).details["host_setting"]
    with pytest.raises(HaseError, match=r"^options\.cpu_pinned must be true or false"):
        h200.predict(r1, options={"cpu_pinned": "yes"})
    monkeypatch.setattr(host_setting, "study_path", lambda slug: Path("/nonexistent/summary.json"))
    c = h200.predict(r1, options={"cpu_pinned": True})
    assert c.total_ms == pytest.approx(a.total_ms) and any("no host-speed study" in w for w in c.warnings)
