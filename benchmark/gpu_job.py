"""One runner for the GPU jobs declared in benchmark/gpu_jobs.yaml (their bash scripts stay the implementation).

    hase gpu-job --list                                   name, device minutes, what
    hase gpu-job corpus --set env.SESSIONS=2 --dry-run    the exact command, not run
    hase gpu-job probe --out $OUT                         a one-call job: runs in the foreground
    hase gpu-job corpus --job-dir /tmp/job --poll-s 540   a detached job: started (setsid), then polled by its packer
    hase gpu-job corpus --poll-only --job-dir /tmp/job    the next device call: poll and pack again
    hase gpu-job trace -- --set models=[...]              what follows `--` goes to a script that takes {extra}

--set takes only env.VAR=value for a VAR the job declares. Scripts run from the repository root with the caller's
environment plus the --set values (HASE_HOME is passed through; the scripts default it to /tmp/hase).
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hase.utils import paths
from hase.utils.errors import HaseError

JOBS = paths.REPO / "benchmark" / "gpu_jobs.yaml"
REQUIRED = ("script", "what", "inputs", "outputs", "device_minutes", "resume")
PLACEHOLDERS = ("{out}", "{job_dir}", "{extra}")


@dataclass
class Job:
    name: str
    script: str
    what: str
    inputs: list
    outputs: list
    device_minutes: float
    resume: str
    env: dict = field(default_factory=dict)     # VAR -> the script's default (None: required; a value for a
    # variable the script requires, ${VAR:?}, is this job's setting: one script, several jobs, e.g. exam_v12/v13)
    minutes_from: str = ""
    detached: bool = False
    poll: str = ""                              # packer of a detached job: bash POLL JOB SECONDS OUT
    args: list = field(default_factory=list)    # {out}, {job_dir}, {extra}


def _path(text: str) -> Path:
    p = Path(text)
    return p if p.is_absolute() else paths.REPO / p


def load_jobs(path=JOBS) -> dict:
    """name -> Job, every field checked: a missing or wrong one is a HaseError naming the job and the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) if path.exists() else None
    except yaml.YAMLError as e:
        raise HaseError(f"not valid YAML ({str(e).splitlines()[0]})", path)
    if not isinstance(data, dict) or not data:
        raise HaseError("not found" if not path.exists() else "expected a mapping of job name -> fields", path)
    known = set(Job.__dataclass_fields__) - {"name"}
    jobs = {}
    for name, spec in data.items():
        def bad(fld, cause):
            return HaseError(f"job '{name}': field '{fld}' {cause}", path)
        if not isinstance(spec, dict):
            raise bad("-", "expected a mapping of fields")
        for k in REQUIRED:
            if spec.get(k) in (None, ""):
                raise bad(k, "is missing")
        for k in spec:
            if k not in known:
                raise bad(k, f"is not a job field (fields: {', '.join(sorted(known))})")
        job = Job(name=str(name), **spec)
        for k, kind in (("script", str), ("what", str), ("resume", str), ("minutes_from", str), ("poll", str),
                        ("inputs", list), ("outputs", list), ("env", dict), ("args", list), ("detached", bool)):
            if not isinstance(getattr(job, k), kind):
                raise bad(k, f"must be a {kind.__name__}")
        if isinstance(job.device_minutes, bool) or not isinstance(job.device_minutes, (int, float)) \
                or job.device_minutes <= 0:
            raise bad("device_minutes", "must be a number of minutes > 0")
        if job.detached and not job.poll:
            raise bad("poll", "is missing (a detached job is polled by its packer)")
        for k in ("script", "poll") if job.detached else ("script",):
            if not _path(getattr(job, k)).is_file():
                raise bad(k, f"names a file that does not exist: {getattr(job, k)}")
        for a in job.args:
            if a not in PLACEHOLDERS:
                raise bad("args", f"has '{a}' (expected {', '.join(PLACEHOLDERS)})")
        for var, default in job.env.items():
            if not str(var).isidentifier() or (default is not None and not isinstance(default, (str, int, float))):
                raise bad("env", f"has '{var}: {default}' (expected VAR: default, null for required)")
        jobs[job.name] = job
    return jobs


def script_env(text: str) -> dict:
    """The env vars a script reads with ${VAR:-default} / ${VAR:?msg}: {VAR: default, None if required}. HASE_HOME
    (every job) and variables the script sets itself from something else (CPU=$(...)) are not the job's settings."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    found = {}
    for var, kind, default in re.findall(r"\$\{([A-Z_][A-Z0-9_]*):([-?+])([^}]*)\}", text):
        # ${VAR:+...}: an optional setting whose default is unset
        found[var] = None if kind == "?" else "" if kind == "+" else " ".join(default.split())
    assigned = re.findall(r"(?m)(?:^|[\s;])([A-Z_][A-Z0-9_]*)=(\S*)", text)
    own = {v for v, rhs in assigned if not rhs.lstrip("(").startswith("${" + v)}
    return {v: d for v, d in found.items() if v not in own | {"HASE_HOME", "PYTHONPATH"}}


def env_overrides(job: Job, items) -> dict:
    """--set env.VAR=value items -> {VAR: 'value'} (the value as typed), each VAR declared by the job; a required
    one (default null) must be given here or be in the environment."""
    env = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.startswith("env.") or not key[4:]:
            raise HaseError(f"--set {item}: expected env.VAR=VALUE (a GPU job's settings are its env vars)")
        var = key[4:]
        if var not in job.env:
            raise HaseError(f"job '{job.name}' reads no env var '{var}' (it reads: {', '.join(job.env) or 'none'})")
        env[var] = value
    reads = script_env(_path(job.script).read_text())
    for var, d in job.env.items():   # the job's own value of a variable its script requires
        if d is not None and var in reads and reads[var] is None and var not in env and var not in os.environ:
            env[var] = str(d)
    missing = [v for v, d in job.env.items() if d is None and v not in env and v not in os.environ]
    if missing:
        raise HaseError(f"job '{job.name}' needs env var {', '.join(missing)} (--set env.{missing[0]}=...)")
    return env


def command(job: Job, job_dir, out, extra=()) -> list:
    """The script's argv (bash SCRIPT ARGS...), placeholders filled; `extra`: what followed `--`."""
    argv = ["bash", job.script]
    for a in job.args:
        if a == "{out}":
            if not out:
                raise HaseError(f"job '{job.name}' writes into an output folder: pass --out DIR or set $OUT")
            argv.append(str(out))
        elif a == "{job_dir}":
            argv.append(str(job_dir))
        else:
            argv += list(extra)
    if extra and "{extra}" not in job.args:
        raise HaseError(f"job '{job.name}' takes no extra arguments (got {' '.join(extra)})")
    return argv


def shell(env: dict, argv) -> str:
    """A command line to paste: VAR=value ... argv ($OUT, the folder that comes back, left for the shell)."""
    quote = lambda a: a if a == "$OUT" else shlex.quote(str(a))
    return " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [quote(a) for a in argv])


def list_jobs(jobs: dict) -> str:
    w = max(map(len, jobs))
    rows = [f"{'job':<{w}}  {'minutes':>7}  what", f"{'-' * w}  {'-' * 7}  ----"]
    for j in jobs.values():
        est = "~" if j.minutes_from.startswith("estimate") else ""
        kind = " [detached]" if j.detached else ""
        rows.append(f"{j.name:<{w}}  {est + format(j.device_minutes, 'g'):>7}  {j.what}{kind}")
    return "\n".join(rows + ["", "~: an estimate. hase gpu-job NAME --dry-run shows a job's command; "
                             "benchmark/gpu_jobs.yaml has its env, inputs, outputs and resume."])


def poll(job_dir: Path, poll_argv) -> int:
    """Wait for a detached job with its packer (bash POLL JOB SECONDS OUT), which copies what is done into OUT."""
    if not job_dir.is_dir():
        raise HaseError("no such job folder: the job was not started here", job_dir)
    return subprocess.run(poll_argv, cwd=paths.REPO).returncode


def running_pid(job_dir: Path):
    """The pid of the job started in job_dir if it is still running (no DONE yet), else None."""
    if (job_dir / "DONE").exists():
        return None
    try:
        pid = int((job_dir / "runner.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hase gpu-job", description="Run a GPU job declared in benchmark/gpu_jobs.yaml "
                                "(on the GPU machine, from the repository root, after source .device/activate.sh). "
                                "Arguments after `--` go to a script that takes them (trace: trace_run --set ...)")
    p.add_argument("name", nargs="?", help="the job (--list shows them)")
    p.add_argument("--list", action="store_true", help="the declared jobs: name, device minutes, what")
    p.add_argument("--jobs", type=Path, default=JOBS, help="the declarations (default: benchmark/gpu_jobs.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="env.VAR=VALUE",
                   help="an environment variable the job reads; repeatable")
    p.add_argument("--dry-run", action="store_true", help="print the command(s), run nothing")
    p.add_argument("--job-dir", type=Path, help="the job's folder (default /tmp/hase_jobs/NAME)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="output folder that comes back (default: $OUT)")
    p.add_argument("--poll-s", type=int, default=540, help="a detached job: seconds to wait before packing")
    p.add_argument("--poll-only", action="store_true", help="a detached job already started: poll and pack again")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)   # after `--`: the script's own arguments ({extra})
    args, extra = parser().parse_args(argv[:cut]), argv[cut + 1:]
    jobs = load_jobs(args.jobs)
    if args.list:
        print(list_jobs(jobs))
        return 0
    if not args.name:
        raise HaseError(f"name a job (or --list): {', '.join(jobs)}")
    if args.name not in jobs:
        raise HaseError(f"unknown GPU job '{args.name}' (known: {', '.join(jobs)})")
    job = jobs[args.name]
    job_dir = (args.job_dir or Path("/tmp/hase_jobs") / job.name).resolve()
    out = args.out or ("$OUT" if args.dry_run else None)
    env = {} if args.poll_only else env_overrides(job, args.overrides)
    if args.poll_s < 0:
        raise HaseError(f"--poll-s must be >= 0, got {args.poll_s}")
    if args.poll_only and not job.detached:
        raise HaseError(f"job '{job.name}' is not detached: it runs in the foreground, nothing to poll")
    if job.detached and not out:
        raise HaseError(f"job '{job.name}': its packer writes into --out DIR (or $OUT): none given")
    poll_argv = ["bash", job.poll, str(job_dir), str(args.poll_s), out]
    if args.poll_only:
        if args.dry_run:
            print(shell({}, poll_argv))
            return 0
        return poll(job_dir, poll_argv)
    cmd = command(job, job_dir, out, extra)
    if args.dry_run:
        if job.detached:
            print(f"{shell(env, ['setsid', 'nohup', *cmd])} > {shlex.quote(str(job_dir))}.out 2>&1 &")
            print(shell({}, poll_argv))
        else:
            print(shell(env, cmd))
        return 0
    full_env = paths.child_env({**os.environ, **env})
    if not job.detached:
        return subprocess.run(cmd, cwd=paths.REPO, env=full_env).returncode
    pid = running_pid(job_dir)
    if pid:
        raise HaseError(f"job '{job.name}' is already running (pid {pid}): poll it with --poll-only", job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "DONE").unlink(missing_ok=True)      # a rerun resumes: the packer must not see the last run's DONE
    with open(f"{job_dir}.out", "ab") as log:
        proc = subprocess.Popen(cmd, cwd=paths.REPO, env=full_env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    (job_dir / "runner.pid").write_text(f"{proc.pid}\n")
    print(f"started {job.name} (pid {proc.pid}) in {job_dir}; log {job_dir}.out", file=sys.stderr)
    return poll(job_dir, poll_argv)


if __name__ == "__main__":
    from hase.utils.errors import run_main
    run_main(main)
