"""Bring one GPU machine's corpus job output (benchmark/gpu_corpus_wait.sh) into the repository, compact:
trace_sessions.csv.xz as is, trace_nodes.csv.xz with the columns the fits read (4 significant digits; the
long kernel-name lists dropped: the session's kernel_signature keeps which kernels ran), the machine's
description, log, trace config and the processes' host calibrations; the CUDA records (when the job made them) not
yet in --records-to: a shard beside it, X.<DEST_DIR name>.json.xz (graph_model.dag_critical_path.record_shards).

  python benchmark/import_corpus.py SRC_DIR DEST_DIR [--records-to ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz]
"""
import argparse
import json
import lzma
import shutil
from pathlib import Path

import pandas as pd

from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.paths import atomic_write_bytes, atomic_write_text  # noqa: E402

NODE_COLS = ["model", "session", "node", "op", "host_us", "gpu_us", "launches", "cudnn_conv_algo_search"]


def write_xz(df: pd.DataFrame, path: Path) -> None:
    atomic_write_bytes(path, lzma.compress(df.to_csv(index=False, float_format="%.4g").encode(), preset=9))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--records-to", type=Path, default=None)
    a = p.parse_args()
    for f in ("trace_sessions.csv.gz", "trace_nodes.csv.gz"):
        if not (a.src / f).exists():
            raise HaseError(f"{f} missing (not a gpu_corpus_wait.sh output folder)", a.src)
    # a LABELS_ONLY job leaves the trace tables empty: its clean labels are the data
    traced = (a.src / "trace_sessions.csv.gz").stat().st_size > 0
    if not traced and not (a.src / "clean_sessions.csv.gz").exists():
        raise HaseError("no trace sessions and no clean labels in it", a.src)
    a.dest.mkdir(parents=True, exist_ok=True)
    if not (a.src / "machine.txt").exists():  # the wait script leaves it out at 8 files: it is the log's head
        log = (a.src / "log.txt").read_text().splitlines() if (a.src / "log.txt").exists() else []
        head = [l for l in log[1:next((i for i, l in enumerate(log) if l.startswith("stage export")), 0)]]
        if not head:
            raise HaseError("machine.txt missing and log.txt has no machine stage", a.src)
        atomic_write_text(a.dest / "machine.txt", "\n".join(head) + "\n")
    if (a.src / "clean_sessions.csv.gz").exists():  # label-only sessions from the process that never profiles
        write_xz(pd.read_csv(a.src / "clean_sessions.csv.gz"), a.dest / "clean_sessions.csv.xz")
    if traced:
        write_xz(pd.read_csv(a.src / "trace_sessions.csv.gz"), a.dest / "trace_sessions.csv.xz")
        n = pd.read_csv(a.src / "trace_nodes.csv.gz")
        # gpu_kernel_sum_us: traces with per-node unions (trace_run.node_gpu) say so by having it
        write_xz(n[NODE_COLS + [c for c in ("gpu_kernel_sum_us",) if c in n]], a.dest / "trace_nodes.csv.xz")
    for f in ("machine.txt", "trace_config.json", "calibration.json"):
        if (a.src / f).exists():
            shutil.copyfile(a.src / f, a.dest / f)
    if (a.src / "log.txt").exists():
        atomic_write_text(a.dest / "log.txt", "".join(l for l in open(a.src / "log.txt") if "Fallback mode" not in l))
    if (a.src / "corpus_manifest.json").exists():
        atomic_write_bytes(a.dest / "corpus_manifest.json.xz",
                           lzma.compress((a.src / "corpus_manifest.json").read_bytes(), preset=9))
    if a.records_to and (a.src / "records.json.xz").exists():
        # only the records not there yet, as a shard of their own (X.<dest name>.json.xz beside X.json.xz): the
        # whole file rewritten would add its 14 MB to git history at every import
        from hase.graph_model.dag_critical_path import available_records
        new = json.loads(lzma.decompress((a.src / "records.json.xz").read_bytes()))
        # which of the new models are there already: their records alone (the whole corpus is 1.6 GB of JSON)
        old = available_records(a.records_to, sorted(new))[0] if a.records_to.exists() else {}
        add = {m: r for m, r in new.items() if m not in old}
        name = a.records_to.name
        shard = (a.records_to.with_name(f"{name[:-len('.json.xz')]}.{a.dest.name}.json.xz")
                 if a.records_to.exists() and name.endswith(".json.xz") else a.records_to)
        if add:
            # compact JSON and xz's extreme preset: 9.5 MB for 1,992 records where the default wrote 12.7 MB
            atomic_write_bytes(shard, lzma.compress(json.dumps(add, separators=(",", ":")).encode(),
                                                    preset=9 | lzma.PRESET_EXTREME))
        print(f"records: {len(old)} of the job's {len(new)} there already, {len(add)} new -> "
              f"{shard if add else 'nothing written'}")
    print(f"wrote {a.dest}")
    return 0


if __name__ == "__main__":
    run_main(main)
