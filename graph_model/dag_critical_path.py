"""Phase 6.1: the kernel DAG of a model, and its latency from per-kernel times.

  python graph_model/dag_critical_path.py [--record X.json]... [--node-times T.json]

Nodes are the kernels of a phase 2 record (id 'Conv_Relu#0', with type, FLOPs, bytes and the
record's order, which is ORT's execution order); edges are the tensors between kernels.
Writes graph_model/model_DAG/<model>.<device>.json (networkx node-link JSON).

calculate_latency: ORT's sequential executor runs one kernel at a time on one stream, so the
model latency is the sum over the topological order. critical_path: the longest path, i.e. the
latency if independent branches could overlap perfectly; a lower bound, for comparison.
"""
from __future__ import annotations

import json
import math
from pathlib import Path



from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import nbytes  # noqa: E402

# shared by both phase 6 scripts: graph_model/config.yaml holds the keys of both
DEFAULTS = {
    "device": "auto", "records": [],
    "overlap": {"ep": "auto", "session_overhead_us": 30.0, "h2d_us_per_byte": 1.0e-4, "h2d_fixed_us": 10.0,
                "d2h_us_per_byte": 1.0e-4, "d2h_fixed_us": 10.0, "launch_wait_us": 0.0},
}
NODE_FIELDS = ("type", "category", "op_type", "ep", "node_name", "flops", "bytes_read", "bytes_written")


def load_records(records_dir, models, ep: str = "cuda") -> dict:
    """{model: its phase 2 record} from a folder of <model>.<ep>.json[.gz], or from one records.json.xz holding
    {model: record} (how the committed records travel: 41 H200 records are 143 KB so, 500 KB as single gz files);
    a missing one -> HaseError naming it."""
    where = Path(records_dir)
    if where.name.endswith(".json.xz"):
        return records_in_file(where, ep, models)
    out = {}
    for m in models:
        f = next((where / f"{m}.{ep}.{x}" for x in ("json.gz", "json") if (where / f"{m}.{ep}.{x}").exists()), None)
        if f is None:
            raise HaseError(f"no {ep.upper()} record for {m}", where)
        out[m] = load_record(f)
    return out


def available_records(where, models: list, ep: str = "cuda") -> tuple:
    """({model: record} of the models that have one, [models without one]): for corpora where a model's analysis
    may have failed on the GPU machine; the caller names the missing ones."""
    if str(where).endswith(".json.xz"):
        every = _merged_records(where, models)
        return {m: every[m] for m in models if m in every}, [m for m in models if m not in every]
    out, missing = {}, []
    for m in models:
        try:
            out.update(load_records(where, [m], ep))
        except HaseError:
            missing.append(m)
    return out, missing


def record_shards(where) -> list:
    """A records file and its shards: X.json.xz, then X.<tag>.json.xz beside it in name order (a GPU job's new
    records are written as a shard of their own, so a job adds its megabytes to git history once, not the whole file)."""
    where = Path(where)
    stem = where.name[:-len(".json.xz")] if where.name.endswith(".json.xz") else None
    shards = sorted(where.parent.glob(f"{stem}.*.json.xz")) if stem else []
    return [where] + [f for f in shards if f != where]


def _named_records(f: Path, models) -> dict | None:
    """{model: record} of the named models in one records file, each parsed alone from the file's text: the corpus
    records and their shards are 1.6 GB of JSON, ~55 s and ~7.6 GB to parse whole, where a few records take seconds.
    The file's records are found by where each opens (`"<model>": {"model": "<model>"`, as json.dumps writes them);
    None (parse the whole file) unless every record of the file was found so (one per "kernels" and "edges" key)."""
    try:
        text = paths.read_text(f)
    except paths.READ_ERRORS:
        return None   # read_json says what is wrong with it
    opens = {}   # model -> where its record's text starts
    for pat in ('{"model": "', '{"model":"'):   # json.dumps' default separators, or compact ones
        i = text.find(pat)
        while i >= 0:
            colon = text.rfind(":", 0, i)            # "<model>": {"model": ...
            q1 = text.rfind('"', 0, colon)
            q0 = text.rfind('"', 0, q1)
            if text[q1 + 1:i].strip() != ":" or text[max(0, q0 - 4):q0].rstrip()[-1:] not in ("{", ","):
                return None
            opens.setdefault(text[q0 + 1:q1], []).append(i)
            i = text.find(pat, i + 1)
    n = sum(map(len, opens.values()))
    if not n or any(len(v) > 1 for v in opens.values()) or any(
            n != text.count(f'"{k}": [') + text.count(f'"{k}":[') for k in ("kernels", "edges")):
        return None
    dec, out = json.JSONDecoder(), {}
    for m in models:
        if m in opens:
            try:
                rec, _ = dec.raw_decode(text, opens[m][0])
            except ValueError:
                return None
            if not isinstance(rec, dict) or rec.get("model") != m:
                return None
            out[m] = rec
    return out


def _merged_records(where, models=None) -> dict:
    """{model: record} over a records file and its shards, a later shard's record of a model replacing an earlier one:
    every record, or those of the named models found (each parsed alone where _named_records can)."""
    where = Path(where)
    if not where.exists():
        raise HaseError("file not found", where)
    every, named = {}, None if models is None else set(models)
    for f in record_shards(where):
        part = _named_records(f, models) if models is not None else None
        if part is None:   # every record, or a file where a named model could not be cut out alone
            part = paths.read_json(f, "records file")
            if not isinstance(part, dict):
                raise HaseError("not a records file ({model: record})", f)
            if named is not None:
                part = {m: r for m, r in part.items() if m in named}
        every.update(part)
    return every


def records_in_file(where, ep: str = "cuda", models=None) -> dict:
    """{model: record} of one records.json.xz ({model: record}) and its shards (record_shards; a later shard's record
    of a model replaces an earlier one): the named models (each must be there) or all."""
    every = _merged_records(where, models)
    out = {}
    for m in (models if models is not None else sorted(every)):
        rec = every.get(m)
        if rec is None:
            raise HaseError(f"no {ep.upper()} record for {m}", where)
        if not isinstance(rec, dict) or "kernels" not in rec or "edges" not in rec:
            raise HaseError(f"{m}: not a kernel record (no 'kernels'/'edges')", where)
        out[m] = rec
    return out


def load_record(path) -> dict:
    path = Path(path)
    if not path.exists():
        raise HaseError("file not found", path)
    rec = paths.read_json(path, "kernel record")
    if not isinstance(rec, dict) or "kernels" not in rec or "edges" not in rec:
        raise HaseError("not a kernel record (no 'kernels'/'edges')", path)
    return rec


_KERNEL_STR = ("id", "type", "op_type")            # required: the DAG, the predictors and the host tables key on them
_KERNEL_OPT_STR = ("category", "ep", "signature", "domain", "node_name")
_KERNEL_NUM = ("flops", "bytes_read", "bytes_written")


def check_record(rec, where: str = "record") -> None:
    """The shape of a phase 2 record a caller hands in (API, service): what the DAG, the features and the node
    model read, with the right types; else one HaseError naming the field (record.kernels[3].inputs[0].shape: ...).
    Records Hase wrote itself are not checked again."""
    if not isinstance(rec, dict) or not isinstance(rec.get("kernels"), list):
        raise HaseError(f"{where}: not a phase 2 record (needs a 'kernels' list)")
    for f in ("model", "device"):
        if not isinstance(rec.get(f), str) or not rec[f]:
            raise HaseError(f"{where}.{f}: missing or not a string")
    if rec.get("provenance") is not None and not isinstance(rec["provenance"], dict):
        raise HaseError(f"{where}.provenance: not an object")
    for f in ("graph_inputs", "graph_outputs"):
        _check_tensors(rec.get(f), f"{where}.{f}", null_ok=False)
    for i, k in enumerate(rec["kernels"]):
        at = f"{where}.kernels[{i}]"
        if not isinstance(k, dict):
            raise HaseError(f"{at}: not an object")
        for f in _KERNEL_STR:
            if not isinstance(k.get(f), str) or not k[f]:
                raise HaseError(f"{at}.{f}: missing or not a string")
        for f in _KERNEL_OPT_STR:
            if f in k and k[f] is not None and not isinstance(k[f], str):
                raise HaseError(f"{at}.{f}: not a string")
        for f in _KERNEL_NUM:
            v = k.get(f)
            if f in k and v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or
                                             not math.isfinite(v) or v < 0):
                raise HaseError(f"{at}.{f}: not a number >= 0 ({v!r})")
        if "attributes" in k and k["attributes"] is not None and not isinstance(k["attributes"], dict):
            raise HaseError(f"{at}.attributes: not an object")
        if "weight_shapes" in k and k["weight_shapes"] is not None and not isinstance(k["weight_shapes"], list):
            raise HaseError(f"{at}.weight_shapes: not a list")
        for f in ("inputs", "outputs"):
            _check_tensors(k.get(f, []), f"{at}.{f}")
    ids = {k["id"] for k in rec["kernels"]}
    edges = rec.get("edges")
    if not isinstance(edges, list):
        raise HaseError(f"{where}.edges: missing or not a list")
    for i, e in enumerate(edges):
        at = f"{where}.edges[{i}]"
        if not isinstance(e, dict):
            raise HaseError(f"{at}: not an object")
        for f in ("src", "dst"):
            if not isinstance(e.get(f), str) or e[f] not in ids:
                raise HaseError(f"{at}.{f}: missing or not a kernel id of this record")
        if not isinstance(e.get("tensor"), str):
            raise HaseError(f"{at}.tensor: missing or not a string")
        b = e.get("bytes")
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b < 0):
            raise HaseError(f"{at}.bytes: not a number >= 0 ({b!r})")


def _check_tensors(ts, at: str, null_ok: bool = True) -> None:
    """A record's list of tensors (a kernel's inputs/outputs, the graph's): null, or a list of
    {name, shape: [sizes >= 0], dtype, role} (a kernel's may hold null: an optional input left out)."""
    if ts is None:
        return
    if not isinstance(ts, list):
        raise HaseError(f"{at}: not a list")
    for j, t in enumerate(ts):
        if t is None and null_ok:
            continue
        if not isinstance(t, dict):
            raise HaseError(f"{at}[{j}]: not an object{' or null' if null_ok else ''}")
        shp = t.get("shape")
        if shp is not None and (not isinstance(shp, list) or
                                any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shp)):
            raise HaseError(f"{at}[{j}].shape: not a list of sizes >= 0")
        for g in ("dtype", "role", "name"):
            if t.get(g) is not None and not isinstance(t[g], str):
                raise HaseError(f"{at}[{j}].{g}: not a string")


def io_bytes(tensors) -> int:
    return sum(nbytes(t.get("shape") or [], t.get("dtype") or "float32") for t in tensors or [])


def build_dag(record: dict) -> nx.DiGraph:
    """Kernel DAG of a record; graph attributes keep the model's input/output tensors."""
    import networkx as nx   # lazy: predictions that never draw a DAG skip its import
    dag = nx.DiGraph(model=record.get("model"), device=record.get("device"),
                     graph_inputs=record.get("graph_inputs", []), graph_outputs=record.get("graph_outputs", []),
                     input_bytes=io_bytes(record.get("graph_inputs")),
                     output_bytes=io_bytes(record.get("graph_outputs")))
    for i, k in enumerate(record["kernels"]):
        if k["id"] in dag:
            raise HaseError(f"kernel id '{k['id']}' appears twice in record {record.get('model')}")
        dag.add_node(k["id"], order=i, **{f: k.get(f) for f in NODE_FIELDS})
    for e in record["edges"]:
        for end in (e["src"], e["dst"]):
            if end not in dag:
                raise HaseError(f"edge names unknown kernel '{end}' in record {record.get('model')}")
        if dag.has_edge(e["src"], e["dst"]):   # two tensors between the same kernels: one edge
            d = dag.edges[e["src"], e["dst"]]
            d["tensors"].append(e["tensor"])
            d["bytes"] += int(e.get("bytes") or 0)
        else:
            dag.add_edge(e["src"], e["dst"], tensors=[e["tensor"]], bytes=int(e.get("bytes") or 0))
    if not nx.is_directed_acyclic_graph(dag):
        raise HaseError(f"record {record.get('model')} has a cycle between kernels")
    return dag


def execution_order(dag: nx.DiGraph) -> list:
    """Topological order, ties broken by the record order (the order ORT executes)."""
    import networkx as nx   # lazy: predictions that never draw a DAG skip its import
    return list(nx.lexicographical_topological_sort(dag, key=lambda n: dag.nodes[n].get("order", 0)))


def node_value(node_ms, node: str) -> float:
    if node not in node_ms:
        raise HaseError(f"no time for kernel '{node}'")
    v = float(node_ms[node])
    if not math.isfinite(v) or v < 0:
        raise HaseError(f"time of kernel '{node}' is not a non-negative number: {v}")
    return v


def calculate_latency(dag: nx.DiGraph, node_ms) -> float:
    """Model latency (ms) under ORT's sequential executor: sum of the kernels in topological order."""
    return float(sum(node_value(node_ms, n) for n in execution_order(dag)))


def critical_path(dag: nx.DiGraph, node_ms) -> tuple:
    """(length_ms, [kernel ids]) of the longest path, weights on nodes."""
    best, prev = {}, {}
    for n in execution_order(dag):
        preds = list(dag.predecessors(n))
        p = max(preds, key=lambda q: best[q]) if preds else None
        best[n] = node_value(node_ms, n) + (best[p] if p is not None else 0.0)
        prev[n] = p
    if not best:
        return 0.0, []
    end = max(best, key=best.get)
    path = [end]
    while prev[path[-1]] is not None:
        path.append(prev[path[-1]])
    return float(best[end]), path[::-1]


def dag_to_json(dag: nx.DiGraph) -> dict:
    import networkx as nx   # lazy: predictions that never draw a DAG skip its import
    return nx.node_link_data(dag, edges="edges")


def load_dag(path) -> nx.DiGraph:
    import networkx as nx   # lazy: predictions that never draw a DAG skip its import
    path = Path(path)
    data = paths.read_json(path, "DAG file")
    return nx.node_link_graph(data, directed=True, edges="edges")


def dag_path(model: str, device: str) -> Path:
    return paths.dag_dir() / f"{model}.{device}.json"


def read_node_times(path) -> dict:
    """{kernel id: ms} from a JSON file: a plain mapping, or {'node_ms': mapping}."""
    path = Path(path)
    data = paths.read_json(path, "node-times JSON")
    data = data.get("node_ms", data) if isinstance(data, dict) else None
    if not isinstance(data, dict):
        raise HaseError("node times must be a JSON object {kernel id: ms}", path)
    return data


def main() -> int:
    p = base_parser("Phase 6.1: kernel DAGs from phase 2 records", "graph_model")
    p.add_argument("--record", action="append", type=Path, help="kernel record JSON (repeatable)")
    p.add_argument("--node-times", type=Path, help="JSON {kernel id: ms}: print latency and critical path")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("graph_model", args.log_level)
    records = paths.kernel_records([str(r) for r in args.record] if args.record else cfg["records"], cfg["device"])
    times = read_node_times(args.node_times) if args.node_times else None
    for rp in records:
        dag = build_dag(load_record(rp))
        out = dag_path(dag.graph["model"], dag.graph["device"])
        paths.atomic_write_text(out, json.dumps(dag_to_json(dag), indent=1) + "\n")
        unit = {n: 1.0 for n in dag}   # unit weights: depth of the DAG in kernels
        depth, _ = critical_path(dag, unit)
        log.info("%s: %d kernels, %d edges, longest chain %d kernels -> %s", rp.name, dag.number_of_nodes(),
                 dag.number_of_edges(), int(depth), out)
        if times is not None:
            total = calculate_latency(dag, times)
            cp_ms, cp = critical_path(dag, times)
            print(f"{dag.graph['model']}: sequential sum {total:.4f} ms, critical path {cp_ms:.4f} ms "
                  f"({len(cp)} kernels)")
    save_resolved(cfg, paths.dag_dir())
    return 0


if __name__ == "__main__":
    run_main(main)
