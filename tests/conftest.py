"""Child processes the tests start (phase scripts by path, `python -m hase.cli`) import the project from this
checkout, installed or not."""
import os
from pathlib import Path

REPO = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                     if p and p != REPO])


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    """A small residual ONNX model (Conv/Relu/Add, 8 channels, 16x16) for the CPU-EP `hase predict` tests."""
    from helpers import build_residual_model
    p = tmp_path_factory.mktemp("tiny") / "tiny_bs1_16x16.onnx"
    build_residual_model(p, "tiny", 8, 2, 16)
    return p


@pytest.fixture(autouse=True, scope="module")
def _corpus_records_per_module():
    """helpers.corpus_records() keeps the corpus records for one module's tests, then lets them go (~7.6 GB)."""
    yield
    import gc
    from helpers import drop_corpus_records
    drop_corpus_records()
    gc.collect()
