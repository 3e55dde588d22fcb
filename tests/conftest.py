"""Child processes the tests start (phase scripts by path, `python -m hase.cli`) import the project from this
checkout, installed or not."""
import os
from pathlib import Path

REPO = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                     if p and p != REPO])
