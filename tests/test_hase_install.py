"""`pip install .` into a fresh venv gives a working `hase` command: --help, a CPU EP prediction of a small ONNX
model, and a GPU prediction from the package's own shipped predictor; the phase packages are installed as hase.<phase>
only (nothing top-level but hase). The fresh venv sees this interpreter's
packages through a .pth file (no downloads: --no-deps --no-build-isolation); it runs outside the checkout, so
everything it uses must come from the installed distribution."""
import json
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

from helpers import build_residual_model  # noqa: E402


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install")
    env_dir = tmp / "venv"
    # no pip of its own: this interpreter's pip and setuptools (through the .pth below) install into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=300)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    parent = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if Path(p).is_dir()]
    (Path(purelib) / "_parent_site.pth").write_text("\n".join(dict.fromkeys(parent)) + "\n")
    # build from a copy of the tracked tree: no build/ or egg-info left in the checkout
    src = tmp / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes((REPO / f).read_bytes())
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(src)],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0 and "bdist_wheel" in r.stdout + r.stderr:   # an old setuptools here: let pip fetch one
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(src)],
                           capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return {"dir": env_dir, "py": py, "hase": env_dir / "bin" / "hase", "tmp": tmp}


def run(venv, *args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HASE_HOME")}
    env["HOME"] = str(venv["tmp"] / "userhome")   # the installed default home: ~/.cache/hase
    return subprocess.run([str(venv["hase"]), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


PHASES = ["utils", "model_zoo", "ort_analysis", "kernel_model", "benchmark", "training", "graph_model", "inference",
          "debug", "evaluator"]


def test_installed_hase_help_and_predict(venv, tmp_path):
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HASE_HOME")}
    r = subprocess.run([str(venv["py"]), "-c", "import hase, hase.inference.runtime as r, hase.evaluator as e; "
                        "print(hase.__file__); print(r.__file__); print(e.__file__); print(*hase.__path__)"],
                       cwd=tmp_path, capture_output=True, text=True, check=True, env=clean)
    lines = r.stdout.split()
    for line in lines:
        assert str(venv["dir"]) in line and str(REPO) not in line   # the installed copy, not the checkout
    assert len(lines) == 4 and lines[3] == str(Path(lines[0]).parent)   # __path__: hase/ only, never site-packages
    # one distribution under one name: nothing of Hase's at the top level of site-packages but hase/ and its
    # dist-info, and no phase package importable by its bare name
    top = subprocess.run([str(venv["py"]), "-c", "import importlib.metadata as m; "
                          "print(*sorted({f.parts[0] for f in m.files('hase')} - {'..'}))"],
                         cwd=tmp_path, capture_output=True, text=True, check=True, env=clean).stdout.split()
    assert top == ["hase", "hase-0.1.0.dist-info"], top
    bare = subprocess.run([str(venv["py"]), "-c", "import importlib.util as u; "
                           f"print(*[p for p in {PHASES!r} if u.find_spec(p)])"],
                          cwd=tmp_path, capture_output=True, text=True, check=True, env=clean).stdout.split()
    assert bare == [], bare
    r = run(venv, "--help", cwd=tmp_path)
    assert r.returncode == 0 and "predict" in r.stdout and "serve" in r.stdout and "gpu-job" in r.stdout
    r = run(venv, "evaluate", "--help", cwd=tmp_path)   # hase.evaluator: the root's evaluator.py, installed in hase/
    assert r.returncode == 0 and "--from-csv" in r.stdout, r.stderr
    build_residual_model(tmp_path / "m.onnx", "m", 8, 2, 16)
    (tmp_path / "load.json").write_text(json.dumps({"CPU_UTIL_PCT": 10.0}))
    r = run(venv, "predict", tmp_path / "m.onnx", "--device", "cpu", "--metrics-file", tmp_path / "load.json",
            cwd=tmp_path)
    # this machine's CPU EP: the shipped CPU corpus's node trees (package data), scaled here, and says so
    assert r.returncode == 0 and "CPU corpus's node trees" in r.stderr and "corpus" in r.stderr, r.stderr[-2000:]
    xeon = Path(subprocess.run([str(venv["py"]), "-c", "import hase.inference as i, pathlib; print(pathlib.Path(i.__file__)"
                                ".parent / 'results/cpu-intel-r-xeon-r-processor/timeline_model.json')"],
                               capture_output=True, text=True, check=True, env=clean, cwd=tmp_path).stdout.strip())
    assert xeon.exists()
    r = run(venv, "predict", tmp_path / "m.onnx", "--device", "cpu", "--metrics-file", tmp_path / "load.json",
            "--set", f"timeline_model={xeon}", "--json", tmp_path / "cpu.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "cpu.json").read_text())["total_ms"] > 0
    assert (venv["tmp"] / "userhome" / ".cache" / "hase").is_dir()   # analysis cache outside site-packages
    from hase.graph_model.dag_critical_path import records_in_file
    rec = records_in_file(str(REPO / "ort_analysis/ort_kernel_record/nvidia-h200/records.json.xz"))["resnet18_bs1_224x224"]
    (tmp_path / "rec.json").write_text(json.dumps(rec))
    r = run(venv, "predict", tmp_path / "rec.json", "--gpu", "nvidia-h200", "--json", tmp_path / "gpu.json",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "gpu.json").read_text())
    assert str(venv["dir"]) in out["provenance"]["predictor_dir"] and out["total_ms"] > 0
