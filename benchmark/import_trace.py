"""Bring one GPU machine's trace_run output (as benchmark/gpu_wait.sh packs it) into the repository, compact:
trace_sessions.csv.gz as is; trace_nodes.csv.gz without the long kernel-name column (4 significant digits);
the kernel names once per (model, algo, node, names) in kernels.csv.gz with the sessions that ran them.

  python benchmark/import_trace.py SRC_DIR DEST_DIR [--traces model ...]
"""
import argparse
import tarfile
from pathlib import Path

import pandas as pd

from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.paths import atomic_write_bytes, atomic_write_text  # noqa: E402


def kernel_table(nodes: pd.DataFrame) -> pd.DataFrame:
    """Distinct kernel-name lists per node with the sessions that ran them (differences = cuDNN choices)."""
    k = nodes.dropna(subset=["kernel_names"])
    return (k.groupby(["model", "cudnn_conv_algo_search", "node", "kernel_names"])["session"]
            .agg(lambda s: " ".join(str(x) for x in sorted(set(s)))).rename("sessions").reset_index())


def write_gz(df: pd.DataFrame, path: Path):
    import gzip
    atomic_write_bytes(path, gzip.compress(df.to_csv(index=False, float_format="%.4g").encode(), mtime=0))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--traces", nargs="*", default=[], help="model stems whose measured trace to keep")
    a = p.parse_args()
    for f in ("trace_sessions.csv", "trace_nodes.csv.gz"):
        if not (a.src / f).exists():
            raise HaseError(f"{f} missing (not a gpu_wait.sh output folder)", a.src)
    a.dest.mkdir(parents=True, exist_ok=True)
    write_gz(pd.read_csv(a.src / "trace_sessions.csv"), a.dest / "trace_sessions.csv.gz")
    nodes = pd.read_csv(a.src / "trace_nodes.csv.gz")
    write_gz(kernel_table(nodes), a.dest / "kernels.csv.gz")
    write_gz(nodes.drop(columns=["kernel_names"]), a.dest / "trace_nodes.csv.gz")
    if a.traces and (a.src / "traces.tar.gz").exists():
        with tarfile.open(a.src / "traces.tar.gz") as t:
            for m in t.getmembers():
                if Path(m.name).name.split(".measured")[0] in a.traces or m.name.startswith("trace_config"):
                    t.extract(m, a.dest, filter="data")
    if (a.src / "log.txt").exists():
        atomic_write_text(a.dest / "log.txt", "".join(l for l in open(a.src / "log.txt") if "Fallback mode" not in l))
    print(f"wrote {a.dest}")
    return 0


if __name__ == "__main__":
    run_main(main)
