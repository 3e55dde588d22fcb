"""Audit of the float16 term's file (inference/precision.py load_term): a term file that is there but broken is one
line naming the field when it is loaded, never a KeyError/TypeError/JSONDecodeError in the middle of a prediction or
a NaN latency."""
import json
from pathlib import Path

import numpy as np
import pytest

from hase.inference import precision
from hase.utils.errors import HaseError

GOOD = {"conv": {"floor_us": 15.7, "ratio": 0.622}, "gemm": {"floor_us": 1.6, "ratio": 0.537},
        "mem": {"floor_us": 1.7, "ratio": 0.676}}


def _classes(**over):
    c = json.loads(json.dumps(GOOD))
    for k, v in over.items():
        cls, field = k.split("__")
        if v is None:
            del c[cls][field]
        else:
            c[cls][field] = v
    return json.dumps({"classes": c})


@pytest.mark.parametrize("text, field", [
    ("{oops", "JSON"),
    ("", "JSON"),
    ("[1, 2]", "classes"),
    ('{"classes": ["conv", "gemm", "mem"]}', "classes"),
    ('{"classes": {"conv": 1, "gemm": {}, "mem": {}}}', "classes.conv.floor_us"),
    (_classes(conv__floor_us=None), "classes.conv.floor_us"),
    (_classes(gemm__ratio="x"), "classes.gemm.ratio"),
    (_classes(mem__ratio=True), "classes.mem.ratio"),
    (_classes(conv__ratio=float("nan")), "classes.conv.ratio"),
    (_classes(mem__floor_us=float("inf")), "classes.mem.floor_us"),
    (_classes(gemm__ratio=0.0), "classes.gemm"),
    (_classes(conv__floor_us=-1.0), "classes.conv"),
])
def test_a_broken_term_file_is_one_line_naming_the_field(tmp_path, text, field):
    f = tmp_path / "float16_term.json"
    f.write_text(text)
    with pytest.raises(HaseError) as e:
        precision.load_term(f)
    msg = str(e.value)
    assert field in msg and str(f) in msg and "\n" not in msg


def test_a_directory_in_the_terms_place_is_one_line(tmp_path):
    with pytest.raises(HaseError, match="not a float16 term"):
        precision.load_term(tmp_path)


def test_a_good_file_still_loads_and_prices(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"classes": GOOD}))
    t = precision.load_term(f)
    assert t["path"] == str(f) and precision.load_term(tmp_path / "none.json") is None
    k = {"op_type": "Conv", "inputs": [{"dtype": "float16"}], "outputs": [{"dtype": "float16"}]}
    g = precision.apply([k], [115.7], np.array([True]), t)
    assert g.tolist() == pytest.approx([15.7 + 100 * 0.622])


def test_a_broken_term_stops_a_prediction_with_one_line_not_a_key_error(tmp_path, monkeypatch):
    """Through prepare_record: the term is loaded there, a missing floor_us used to surface as KeyError in apply()."""
    from hase.inference.runtime import prepare_record
    f = tmp_path / "t.json"
    f.write_text(_classes(conv__floor_us=None))
    monkeypatch.setattr(precision, "term_path", lambda slug="", root=None: f)
    e16 = {"name": "x", "dtype": "float16", "shape": [1, 8], "role": "activation"}
    rec = {"model": "m", "device": "cuda", "kernels": [{"id": "Conv#0", "op_type": "Conv", "type": "Conv",
                                                         "inputs": [e16], "outputs": [e16]}]}

    class Pred:   # never reached: the term is checked first
        def predict_kernels(self, *a):
            raise AssertionError("priced before the term was checked")

    with pytest.raises(HaseError, match="classes.conv.floor_us"):
        prepare_record(rec, Pred(), {"predictor_dir": "training/models/nvidia-h200", "idle_load": {}})
