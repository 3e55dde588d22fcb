"""Audit of cpu_pinned's study file (inference/host_setting.py pinned_factors): a host-speed summary.json that is
there but broken is one line naming the field, never a JSONDecodeError/AttributeError/ValueError, and an infinite
number is not taken as a scale."""
import json

import pytest

from hase.inference import host_setting
from hase.utils.errors import HaseError

D = {"processes": 14, "latency_vs_fastest": 1.141, "latency_spread_pct": 21.3}
O = {"processes": 52, "latency_vs_fastest": 1.102, "latency_spread_pct": 7.8}


def _study(d=None, o=None, **over):
    d, o = dict(D, **(d or {})), dict(O, **(o or {}))
    return json.dumps({"by_setting": {"default": d, "one_cpu": o}, **over})


@pytest.mark.parametrize("text, field", [
    ("{oops", "JSON"),
    ("[1]", "by_setting.default and by_setting.one_cpu"),
    ('{"by_setting": [1]}', "by_setting.default and by_setting.one_cpu"),
    ('{"by_setting": {"default": 3, "one_cpu": {"latency_vs_fastest": 1, "latency_spread_pct": 5}}}',
     "by_setting.default and by_setting.one_cpu"),
    (_study(d={"latency_vs_fastest": "fast"}), "by_setting.default.latency_vs_fastest"),
    (_study(o={"latency_vs_fastest": float("inf")}), "by_setting.one_cpu.latency_vs_fastest"),
    (_study(o={"latency_spread_pct": float("nan")}), "by_setting.one_cpu.latency_spread_pct"),
    (_study(d={"latency_spread_pct": True}), "by_setting.default.latency_spread_pct"),
    (_study(d={"latency_spread_pct": 0}), "by_setting.default.latency_spread_pct"),
    (_study(d={"processes": "many"}), "by_setting.default.processes"),
])
def test_a_broken_study_is_one_line_naming_the_field(tmp_path, monkeypatch, text, field):
    f = tmp_path / "summary.json"
    f.write_text(text)
    monkeypatch.setattr(host_setting, "study_path", lambda slug: f)
    with pytest.raises(HaseError) as e:
        host_setting.pinned_factors("nvidia-h200")
    msg = str(e.value)
    assert field in msg and str(f) in msg and "\n" not in msg


def test_a_good_study_outside_the_repository_still_gives_its_factors(tmp_path, monkeypatch):
    f = tmp_path / "summary.json"
    f.write_text(_study(o={"processes": None}))
    monkeypatch.setattr(host_setting, "study_path", lambda slug: f)
    s = host_setting.pinned_factors("nvidia-h200")
    assert s["host_scale"] == pytest.approx(1.102 / 1.141) and s["spread_scale"] == pytest.approx(7.8 / 21.3)
    assert s["processes"] == {"default": 14, "one_cpu": 0} and s["source"] == str(f)
    assert "cpu_pinned: host terms x0.966" in host_setting.note(s)


def test_the_committed_studies_still_load():
    for gpu in ("nvidia-h200", "nvidia-h100"):
        s = host_setting.pinned_factors(gpu)
        assert s["source"] == f"benchmark/results/{gpu}/host_speed/summary.json" and 0.5 < s["host_scale"] < 1.5


def test_a_study_where_binding_widened_the_spread_never_gives_a_negative_host_time():
    """spread_scale > 1 pushes the quantiles away from 1: the low one stopped below 0 (0.84 at x8: -0.28), a p10
    with negative host dispatch."""
    import numpy as np
    prep = {"h": np.array([10.0])}
    _, s = host_setting.pinned(prep, {"host_sum_us": [0.84, 1.27], "before_us": [0.83, 1.24]},
                               {"host_scale": 1.0, "spread_scale": 8.0})
    assert s["host_sum_us"][0] == 0.0 and s["before_us"][0] == 0.0
    assert s["host_sum_us"][1] == pytest.approx(1.0 + 0.27 * 8)
