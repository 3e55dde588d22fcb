"""`hase gpu-job`: the GPU jobs declared in benchmark/gpu_jobs.yaml, run by one runner (benchmark/gpu_job.py). CPU only:
the declarations against the scripts, the CLI's list / dry run / one-line errors, and tiny jobs that really run."""
import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hase.benchmark.gpu_job import JOBS, load_jobs, main, script_env
from hase.utils.errors import HaseError

REPO = Path(__file__).resolve().parent.parent


def hase(*args, env=None):
    e = {k: v for k, v in os.environ.items() if k != "OUT"}
    e.update(PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run([sys.executable, "-m", "hase.cli", "gpu-job", *map(str, args)], cwd=REPO, env=e,
                          capture_output=True, text=True, timeout=120)


def test_every_gpu_script_is_declared_and_every_declaration_matches_its_script():
    jobs = load_jobs()
    declared = {j.script for j in jobs.values()}
    tracked = subprocess.run(["git", "ls-files", "*run_gpu_*.sh"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert len(tracked) >= 14
    assert set(tracked) <= declared, f"undeclared GPU scripts: {sorted(set(tracked) - declared)}"
    for job in jobs.values():
        text = (REPO / job.script).read_text()
        assert (REPO / job.script).is_file()
        # the declared env vars are exactly what the script reads, with the script's defaults; a variable the script
        # requires (${VAR:?}) may be declared with the value the job gives it (one script, several jobs: exam_v12/v13)
        declared_env = {k: None if v is None else " ".join(str(v).split()) for k, v in job.env.items()}
        reads = script_env(text)
        assert set(declared_env) == set(reads), job.name
        assert all(declared_env[k] == d or d is None for k, d in reads.items()), job.name
        # a script that takes a folder is declared with it; the header points at the runner
        takes_dir = "${1:?" in text
        assert takes_dir == bool({"{out}", "{job_dir}"} & set(job.args)), job.name
        assert ("{extra}" in job.args) == ('"$@"' in text), job.name
        assert f"hase gpu-job {job.name}" in "\n".join(text.splitlines()[:12]), job.name
        if job.detached:
            assert (REPO / job.poll).is_file() and 'touch "$JOB/DONE"' in text, job.name
        for item in job.inputs:   # committed inputs exist (carried ones are not in the repository)
            first = item.split()[0]
            if "(carried" not in item and "<" not in first:
                assert glob.glob(str(REPO / first)), f"{job.name}: input {first} not found"


def test_list_prints_every_job():
    r = hase("--list")
    assert r.returncode == 0, r.stderr
    names = yaml.safe_load(JOBS.read_text())
    for name in names:
        assert re.search(rf"(?m)^{name}\s+~?\d", r.stdout), name
    r = subprocess.run([sys.executable, "-m", "hase.cli", "--help"], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "gpu-job" in r.stdout


def test_dry_run_prints_the_command():
    r = hase("corpus", "--set", "env.SESSIONS=1", "--set", "env.SPLIT=exam", "--dry-run", "--job-dir", "/tmp/j")
    assert r.returncode == 0, r.stderr
    start, wait = r.stdout.strip().splitlines()
    assert start == ("SESSIONS=1 SPLIT=exam setsid nohup bash benchmark/run_gpu_corpus.sh /tmp/j > /tmp/j.out 2>&1 &")
    assert wait == "bash benchmark/gpu_corpus_wait.sh /tmp/j 540 $OUT"
    r = hase("trace", "--dry-run", "--out", "/o", "--set", "env.BATCHES=1 8", "--", "--set", "models=[a, b]")
    assert r.returncode == 0, r.stderr
    assert "BATCHES='1 8' setsid nohup bash benchmark/run_gpu_trace.sh" in r.stdout
    assert "--set 'models=[a, b]' >" in r.stdout and r.stdout.rstrip().endswith("540 /o")
    r = hase("probe", "--dry-run", "--out", "/o")
    assert r.stdout.strip() == "bash benchmark/run_gpu_probe.sh /o"
    # one script, two jobs: each passes its own value of the variable the script requires; --set still wins
    for name, split in (("exam_v12", "v12"), ("exam_v13", "v13"), ("exam_v14", "v14"), ("exam_v15", "v15"),
                        ("exam_v16", "v16"), ("exam_v17", "v17"), ("exam_v18", "v18"),
                        ("exam_v19", "v19"), ("exam_v20", "v20"), ("exam_v21", "v21"), ("exam_v22", "v22"),
                        ("exam_v23", "v23"), ("exam_v24", "v24"), ("exam_v25", "v25")):
        r = hase(name, "--dry-run", "--job-dir", "/tmp/j")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"SPLIT_FILE=model_zoo/corpus_split_{split}.yaml setsid nohup bash "
                                   "benchmark/run_gpu_exam.sh /tmp/j"), r.stdout
    r = hase("exam_v13", "--dry-run", "--job-dir", "/tmp/j", "--set", "env.SPLIT_FILE=x.yaml", "--set", "env.RECORDS=0")
    assert r.stdout.startswith("SPLIT_FILE=x.yaml RECORDS=0 setsid nohup bash benchmark/run_gpu_exam.sh"), r.stdout


@pytest.mark.parametrize("args, words", [
    (["nosuchjob"], ["unknown GPU job 'nosuchjob'", "corpus"]),
    (["corpus", "--set", "env.SESSION=1", "--dry-run"], ["'SESSION'", "SESSIONS"]),
    (["corpus", "--set", "SESSIONS=1", "--dry-run"], ["env.VAR=VALUE"]),
    (["remeasure", "--dry-run"], ["IDS"]),
    (["probe", "--dry-run", "--", "x"], ["no extra arguments"]),
    (["probe"], ["--out"]),
    (["corpus", "--poll-only", "--job-dir", "/nonexistent/job", "--out", "/tmp"], ["/nonexistent/job", "not started"]),
])
def test_bad_requests_are_one_line_errors(args, words):
    r = hase(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: "), r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


def tiny_jobs(tmp_path, **fields) -> Path:
    script = tmp_path / "tiny.sh"
    script.write_text('#!/usr/bin/env bash\nD=${1:?dir}; mkdir -p "$D"\n'
                      'echo "greeting=${GREETING:-hello} pwd=$(pwd)" > "$D/env.txt"\n'
                      'sleep "${NAP:-0}"; touch "$D/DONE"\n')
    spec = {"script": str(script), "what": "writes its env var", "env": {"GREETING": "hello", "NAP": 0},
            "inputs": [], "outputs": ["{out}/env.txt"], "device_minutes": 0.1, "resume": "none",
            "args": ["{out}"], **fields}
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"tiny": spec}))
    return path


def test_a_tiny_job_runs(tmp_path):
    jobs = tiny_jobs(tmp_path)
    r = hase("tiny", "--jobs", jobs, "--out", tmp_path / "out", "--set", "env.GREETING=hi there")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "env.txt").read_text() == f"greeting=hi there pwd={REPO}\n"   # from the repo root
    r = hase("tiny", "--jobs", jobs, env={"OUT": str(tmp_path / "out2")})                      # $OUT by default
    assert r.returncode == 0 and (tmp_path / "out2" / "env.txt").read_text().startswith("greeting=hello ")


def test_a_detached_job_is_started_then_polled(tmp_path, capfd, monkeypatch):
    jobs = tiny_jobs(tmp_path, detached=True, poll="benchmark/gpu_corpus_wait.sh", args=["{job_dir}"])
    monkeypatch.setenv("HASE_HOME", str(tmp_path / "home"))
    job, out = tmp_path / "job", tmp_path / "out"
    # the first call returns before the job ends (poll 0 s): it is still running, and cannot be started twice
    assert main(["tiny", "--jobs", str(jobs), "--job-dir", str(job), "--out", str(out), "--poll-s", "0",
                 "--set", "env.NAP=3", "--set", "env.GREETING=detached"]) == 0
    assert "JOB STILL RUNNING" in capfd.readouterr().out
    with pytest.raises(HaseError, match="already running"):
        main(["tiny", "--jobs", str(jobs), "--job-dir", str(job), "--out", str(out)])
    # the next call polls it until it is done; the packer copies the job's log into OUT
    (job / "log.txt").write_text("a line\n")
    assert main(["tiny", "--jobs", str(jobs), "--poll-only", "--job-dir", str(job), "--out", str(out),
                 "--poll-s", "60"]) == 0
    assert "JOB DONE" in capfd.readouterr().out
    assert (job / "env.txt").read_text().startswith("greeting=detached ") and (out / "log.txt").exists()


@pytest.mark.parametrize("change, words", [
    ({"script": None}, ["job 'tiny'", "field 'script'", "missing"]),
    ({"script": "benchmark/no_such_script.sh"}, ["job 'tiny'", "field 'script'", "no_such_script.sh"]),
    ({"device_minutes": "soon"}, ["job 'tiny'", "field 'device_minutes'"]),
    ({"args": ["{outdir}"]}, ["job 'tiny'", "field 'args'", "{outdir}"]),
    ({"detached": True}, ["job 'tiny'", "field 'poll'"]),
    ({"typo": 1}, ["job 'tiny'", "field 'typo'"]),
])
def test_malformed_declarations_are_one_line_errors(tmp_path, change, words):
    path = tiny_jobs(tmp_path)
    data = yaml.safe_load(path.read_text())
    for k, v in change.items():
        data["tiny"].pop(k) if v is None else data["tiny"].__setitem__(k, v)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(HaseError) as e:
        load_jobs(path)
    assert all(w in str(e.value) for w in words), str(e.value)
    r = hase("--list", "--jobs", path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words[1] in r.stderr


def test_device_tree_slims_only_gpu_unneeded_data_and_restores_it(tmp_path):
    """benchmark/device_tree.sh in a throwaway repo with the checkout's layout: slim deletes exactly the listed
    committed data (the node model stays), restore brings every byte back, parts regroups the pack's files."""
    repo = tmp_path / "r"
    files = {"ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz": b"a" * 3000,
             "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.machine_y.json.xz": b"b" * 2000,
             "ort_analysis/ort_kernel_record/nvidia-h200/records.json.xz": b"k" * 100,
             "benchmark/results/nvidia-h200/corpus/machine_x/trace_nodes.csv.xz": b"c" * 1000,
             "benchmark/results/nvidia-h200/corpus/machine_x/trace_sessions.csv.xz": b"s" * 100,
             "training/predictors/nvidia-h200/forests.npz.xz": b"f" * 500,
             "inference/results/nvidia-h200/corpus/node_model/gpu.ubj.xz": b"g" * 400}
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    (repo / "benchmark/device_tree.sh").write_bytes((REPO / "benchmark/device_tree.sh").read_bytes())
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, capture_output=True, text=True, check=True)  # noqa: E731
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    sh = lambda *a: subprocess.run(["bash", "benchmark/device_tree.sh", *a], cwd=repo, capture_output=True,  # noqa: E731
                                   text=True, timeout=60)
    r = sh("slim")
    assert r.returncode == 0, r.stderr
    gone = {rel for rel in files if not (repo / rel).exists()}
    assert gone == {k for k in files if "corpus_records" in k or "trace_nodes" in k or "forests" in k}
    r = sh("restore")
    assert r.returncode == 0 and "restored 4 files" in r.stdout, r.stdout + r.stderr
    assert all((repo / rel).read_bytes() == data for rel, data in files.items())
    assert not git("status", "--porcelain").stdout.strip()
    for i in range(1, 6):  # a pack of 5 part files, one folder each, regrouped into 2 calls
        (repo / f".device/p{i}").mkdir(parents=True)
        (repo / f".device/p{i}/ort-gpu.tar.xz.part{i}").write_bytes(b"p")
    r = sh("parts", "2")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (repo / ".device/p1").iterdir()) == [f"ort-gpu.tar.xz.part{i}" for i in (1, 2, 3)]
    assert sorted(p.name for p in (repo / ".device/p2").iterdir()) == ["ort-gpu.tar.xz.part4", "ort-gpu.tar.xz.part5"]
    assert not (repo / ".device/p3").exists() and (repo / ".device/PARTS").read_text().strip() == "5"
    r = sh("bogus")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "bogus" in r.stderr


def test_a_corpus_job_without_the_cuda_ep_stops_before_the_export(tmp_path):
    """run_gpu_corpus.sh on a machine whose onnxruntime cannot run the CUDA EP (here: no GPU; on a GPU machine: the
    pack's second half never activated) writes its machine description, one error line and DONE within seconds,
    and exports nothing (session 28: such a job spent its 2.5-minute export first)."""
    env = dict(os.environ, HASE_HOME=str(tmp_path / "home"), SPLIT="none", ANCHORS="[resnet18]")
    job = tmp_path / "job"
    subprocess.run(["bash", str(REPO / "benchmark/run_gpu_corpus.sh"), str(job)], env=env, capture_output=True,
                   text=True, timeout=300, check=False)
    log = (job / "log.txt").read_text()
    assert (job / "DONE").exists() and (job / "machine.txt").exists()
    assert "error: the CUDA EP does not run here" in log and "stage export" not in log
    assert not (tmp_path / "home" / "model_zoo").exists() and not (job / "all_models.txt").exists()


@pytest.mark.parametrize("version", [22, 23, 24])
def test_the_machine_panel_is_exam_models_beside_training_anchors(version):
    """Issue 23's machine panel scores machines on models no fit has seen: every panel architecture is in its exam
    split and none in training; the anchors are training architectures (they read the machine's offset)."""
    from hase.model_zoo.corpus import load_split
    panel = yaml.safe_load((REPO / f"model_zoo/machines_panel_v{version}.yaml").read_text())
    assert panel["version"] == version and panel["split_file"] == f"model_zoo/corpus_split_v{version}.yaml"
    job = yaml.safe_load((REPO / "benchmark/gpu_jobs.yaml").read_text())[f"machines_panel_v{version}"]
    assert job["env"]["PANEL"] == f"model_zoo/machines_panel_v{version}.yaml"
    score = yaml.safe_load((REPO / f"inference/machines_v{version}.yaml").read_text())
    assert score["panel"] == job["env"]["PANEL"] and score["split_file"] == panel["split_file"]
    split = load_split(REPO / panel["split_file"])
    assert len(panel["archs"]) >= 20 and len(set(panel["archs"])) == len(panel["archs"])
    assert all(split.split_of(a) == "exam" for a in panel["archs"])
    assert all(split.split_of(a) == "train" for a in panel["anchors"])
