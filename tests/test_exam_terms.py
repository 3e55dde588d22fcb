"""debug/exam_terms.py splits a scored exam's error by term; it must never read an exam in-sample. The committed
exam v10 was scored by the v10-split default, and the default at the same path has since been refit on v11, whose
training split holds exam v10: the tool refuses it in one line naming the timeline model, with a non-zero exit."""
import shutil
from pathlib import Path

from helpers import run_script

REPO = Path(__file__).resolve().parents[1]


def test_refuses_an_exam_its_timeline_model_has_trained_on(tmp_path):
    terms = REPO / "inference/results/nvidia-h200/exam_v10/terms.json"
    before = terms.read_bytes()
    p = run_script([REPO / "debug/exam_terms.py", "--set", "exam=inference/results/nvidia-h200/exam_v10"], tmp_path,
                   check=False, timeout=300, cwd=REPO)
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()[-1]
    assert "inference/results/nvidia-h200/corpus/timeline_model.json" in err and "in-sample" in err
    assert terms.read_bytes() == before          # the report written before the refit is left as it was


def test_an_unscored_folder_is_named(tmp_path):
    d = tmp_path / "exam_vX"
    d.mkdir()
    shutil.copy(REPO / "inference/results/nvidia-h200/exam_v10/resolved_config.json", d)
    p = run_script([REPO / "debug/exam_terms.py", "--set", f"exam={d}"], tmp_path, check=False, timeout=300, cwd=REPO)
    assert p.returncode != 0 and "cases.csv missing" in p.stderr and str(d) in p.stderr


def test_the_split_is_the_scored_exams():
    """The terms are predicted against the split the scorer read (resolved_config's split_file), not the default
    split: the H200 fit that exam v16 judged had joined exam v11, which the default split holds as its exam."""
    import json
    from hase.debug.exam_terms import exam_split
    rc = json.loads((REPO / "inference/results/nvidia-h200/exam_v16/resolved_config.json").read_text())["config"]
    assert rc["split_file"] == "model_zoo/corpus_split_v16.yaml"
    s = exam_split(rc)
    assert "convmixer-s0" in s.exam and "cnn_plain-s11000" not in s.exam
    assert "cnn_plain-s11000" in exam_split({k: v for k, v in rc.items() if k != "split_file"}).exam
