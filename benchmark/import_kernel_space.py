"""Bring one GPU machine's kernel-space job (benchmark/run_gpu_kernel_space.sh's job folder) into the repository.

  python benchmark/import_kernel_space.py JOB_DIR DEST_DIR --role {new,repeat} [--name b] [--slim]

  new     the job's kernels not yet in DEST_DIR/kernels*.csv.xz are appended to kernels.csv.xz (--slim: written
          as kernels_<name>.csv.xz with only the columns phase 5 reads, 5 significant digits) (its adaptive_kernels.csv
          too, each with its `adaptive_parent` from the job's adaptive record); kernels already there are
          left alone (the first measurement stays the label)
  repeat  the job's kernels.csv re-measured kernels DEST already holds (a fresh machine, fresh sessions, maybe other packs):
          a slim table DEST_DIR/repeat_<name>.csv.xz (Kernel_ID, type, label; 5 digits) for
          training/kernel_space_report.py's session-to-session noise; the job's
          adaptive_kernels.csv, if any, is appended as new kernels
Either way the job's throughput.json invocations are appended to DEST_DIR/throughput.json (`role`, `name`
added), peaks.json (benchmark/peak_bench.py) is copied beside the folder, and the job's log is kept as
DEST_DIR/log_<name>.txt.
"""
import argparse
import gzip
import json
import lzma
from pathlib import Path

import numpy as np
import pandas as pd

from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.paths import atomic_write_bytes, atomic_write_text  # noqa: E402
from hase.utils.tables import read_csv_checked  # noqa: E402

KERNELS = "kernels.csv.xz"
# a later, large sample: what phase 5's features and labels read, 5 significant digits (the tree travels to the GPU)
SLIM_COLS = ["Kernel_ID", "OpType", "category", "op_type", "Input_Shape", "input_shapes", "output_shapes",
             "weight_shapes", "attributes", "flops", "bytes_read", "bytes_written", "status", "latency_node_ms_median",
             "latency_node_ms_p10", "latency_node_ms_p90", "n_node", "host_us_median", "pack", "pack_size", "source"]
REPEAT_COLS = ["Kernel_ID", "OpType", "latency_node_ms_median"]


def write_xz(df: pd.DataFrame, path: Path, float_format=None) -> None:
    atomic_write_bytes(path, lzma.compress(df.to_csv(index=False, float_format=float_format).encode(), preset=9))


def parents(job: Path) -> dict:
    """{Kernel_ID: adaptive_parent} of the job's adaptive record(s)."""
    out = {}
    for f in job.glob("kspace_s*_adaptive.cuda.json.gz"):
        for k in json.loads(gzip.decompress(f.read_bytes()))["kernels"]:
            out[f"{k['type']}_{k['signature']}"] = k.get("adaptive_parent", "")
    return out


def read_job_csv(path: Path) -> pd.DataFrame:
    return read_csv_checked(path, low_memory=False)


def append_new(job: Path, dest: Path, files=("kernels.csv", "adaptive_kernels.csv"), slim_name: str = "") -> int:
    """New kernels appended to kernels.csv.xz, or (slim_name) written as kernels_<slim_name>.csv.xz in SLIM_COLS."""
    base = read_job_csv(dest / KERNELS) if (dest / KERNELS).exists() else pd.DataFrame(columns=["Kernel_ID"])
    known = set(base["Kernel_ID"])
    for extra in sorted(dest.glob("kernels_*.csv.xz")):
        if extra.name != f"kernels_{slim_name}.csv.xz":
            known |= set(read_job_csv(extra)["Kernel_ID"])
    frames = [read_job_csv(job / f) for f in files if (job / f).exists()]
    if not frames:
        raise HaseError(f"none of {', '.join(files)} (not a run_gpu_kernel_space.sh job folder)", job)
    new = pd.concat(frames, ignore_index=True)
    new = new[~new["Kernel_ID"].isin(known)].drop_duplicates("Kernel_ID")
    par = parents(job)
    if par:
        new = new.assign(adaptive_parent=new["Kernel_ID"].map(par))
    if slim_name:
        missing = [c for c in SLIM_COLS if c not in new.columns]
        if missing:
            raise HaseError(f"missing column '{missing[0]}'", job / files[0])
        cols = SLIM_COLS + (["adaptive_parent"] if par else [])
        write_xz(new[cols], dest / f"kernels_{slim_name}.csv.xz", float_format="%.5g")
        return len(new)
    write_xz(pd.concat([base, new], ignore_index=True), dest / KERNELS)
    return len(new)


def write_repeat(job: Path, dest: Path, name: str) -> int:
    old = read_job_csv(dest / KERNELS)
    rep = read_csv_checked(job / "kernels.csv", REPEAT_COLS, low_memory=False)
    rep = rep[rep["Kernel_ID"].isin(set(old["Kernel_ID"]))]
    write_xz(rep[REPEAT_COLS], dest / f"repeat_{name}.csv.xz", float_format="%.5g")
    return len(rep)


def repeat_difference(first: pd.Series, repeat_csv) -> dict:
    """A re-measurement (repeat_<name>.csv.xz) against the first labels ({Kernel_ID: latency}): |repeat / first - 1|
    overall and per type, over the kernels both hold."""
    d = read_csv_checked(repeat_csv, ("Kernel_ID", "latency_node_ms_median"))
    d = d[d["Kernel_ID"].isin(first.index)]
    ratio = d["latency_node_ms_median"].to_numpy(float) / first.reindex(d["Kernel_ID"]).to_numpy(float)
    diff = np.abs(ratio - 1.0)
    out = {"kernels": int(len(d)), "mean_abs_diff_pct": float(100 * diff.mean()),
           "median_abs_diff_pct": float(100 * np.median(diff)), "share_over_10pct": float((diff > 0.1).mean()),
           "median_ratio": float(np.median(ratio))}
    if "OpType" in d:
        by = pd.Series(diff).groupby(d["OpType"].to_numpy()).mean()
        out["mean_abs_diff_pct_by_type"] = {k: float(100 * v) for k, v in by.items()}
    return out


def merge_throughput(job: Path, dest: Path, role: str, name: str) -> None:
    path = dest / "throughput.json"
    data = json.loads(path.read_text()) if path.exists() else {"invocations": []}
    for f, stage in (("adaptive_throughput.json", "adaptive"), ("throughput.json", role)):
        if (job / f).exists():
            for inv in json.loads((job / f).read_text())["invocations"]:
                data["invocations"].append({**inv, "role": stage, "name": name})
    data["last"] = data["invocations"][-1] if data["invocations"] else None
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("job", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--role", choices=["new", "repeat"], required=True)
    p.add_argument("--name", default="b", help="the machine/session's name (repeat_<name>.csv.xz, log_<name>.txt)")
    p.add_argument("--slim", action="store_true", help="new kernels go to kernels_<name>.csv.xz, SLIM_COLS only")
    a = p.parse_args()
    if not a.job.is_dir():
        raise HaseError("not a folder", a.job)
    a.dest.mkdir(parents=True, exist_ok=True)
    if a.role == "repeat":
        n = write_repeat(a.job, a.dest, a.name)
        print(f"{n} kernels re-measured -> {a.dest / f'repeat_{a.name}.csv.xz'}")
        if (a.job / "adaptive_kernels.csv").exists():   # the same job's adaptive stage: new kernels
            print(f"{append_new(a.job, a.dest, ('adaptive_kernels.csv',))} new kernels -> {a.dest / KERNELS}")
    else:
        n = append_new(a.job, a.dest, slim_name=a.name if a.slim else "")
        print(f"{n} new kernels -> {a.dest / (f'kernels_{a.name}.csv.xz' if a.slim else KERNELS)}")
    merge_throughput(a.job, a.dest, a.role, a.name)
    if (a.job / "peaks.json").exists():
        atomic_write_text(a.dest.parent / "peaks.json", (a.job / "peaks.json").read_text())
    if (a.job / "log.txt").exists():
        atomic_write_text(a.dest / f"log_{a.name}.txt", (a.job / "log.txt").read_text())
    return 0


if __name__ == "__main__":
    run_main(main)
