"""Phase 3 (a targeted kernel space): single-node 1-D grouped convolutions, to find where ORT's CUDA EP runs them one
channel group at a time and what a group then costs.

  python kernel_model/conv1d_grid.py [--set out=DIR] [--set n_random=240] [--set seed=0]

Why (inference/node_model.py, per_group_risk): over the H200 corpus traces a grouped or depthwise Conv1d with a long
kernel ran as 1-6 kernels per channel group (ssm: 2,304 launches for 384 groups, 24 ms at batch 1 and at batch 4;
tasnet's dilated depthwise convs; wav2vec's positional conv), others of the same op as 2 kernels in all. The trees
cannot learn the boundary from the corpus (K, batch, length and dilation move together there), so the prediction
only names the risk. This grid moves one thing at a time around the corpus's cases, and a seeded random design
covers the rest; benchmark/trace_run.py then measures every node's launches, CUPTI GPU time and host dispatch.

Writes DIR/<name>.onnx (one Conv or ConvTranspose node, opset 17, float32; weights as initializers, or as a graph
input where `runtime_w` is 1, as in ssm's kernels computed at run time), DIR/grid.csv (name and parameters: B, C,
L, K, dilation, stride, groups, op, runtime_w) and DIR/models.txt (the paths, for trace_run's model_list). Names
follow the corpus's `<arch>_bs<B>_<C>x<L>`, so trace_run's tables key on them. A configuration whose output would be
empty, whose input or output tensor is over `max_elems`, or whose multiply-adds are over `max_macs`, is left out.
"""
import csv
import itertools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hase.utils import paths
from hase.utils.config import base_parser, from_args
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger

DEFAULTS = {"out": "", "seed": 0, "n_random": 150, "max_elems": 64 << 20, "max_macs": 1e9, "random_max_macs": 2e8,
            "opset": 17}
FIELDS = ["name", "op", "B", "C", "L", "K", "dilation", "stride", "groups", "cout", "runtime_w", "Lout", "flops"]


def conv_model(op: str, B: int, C: int, L: int, K: int, d: int, s: int, g: int, cout: int, runtime_w: int,
               opset: int = 17) -> tuple:
    """(ModelProto, output length): one 1-D Conv (padding 'same'-like, as the corpus's) or ConvTranspose node."""
    if op == "Conv":
        pad = d * (K - 1) // 2
        lout = (L + 2 * pad - d * (K - 1) - 1) // s + 1
        wshape = [cout, C // g, K]
        attrs = {"dilations": [d], "group": g, "strides": [s], "kernel_shape": [K], "pads": [pad, pad]}
    else:   # ConvTranspose: a decoder's upsampling (tasnet: stride 8-16, K = 2 x stride)
        pad = (K - s) // 2
        lout = (L - 1) * s - 2 * pad + d * (K - 1) + 1
        wshape = [C, cout // g, K]
        attrs = {"dilations": [d], "group": g, "strides": [s], "kernel_shape": [K], "pads": [pad, pad]}
    if lout < 1:
        raise ValueError("empty output")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, C, L])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, cout, lout])
    w = (np.random.default_rng(0).standard_normal(wshape) / np.sqrt(K * max(C // g, 1))).astype(np.float32)
    inputs, inits = [x], []
    if runtime_w:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, wshape))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    node = helper.make_node(op, ["x", "w"], ["y"], **attrs)
    g_ = helper.make_graph([node], "conv1d", inputs, [y], initializer=inits)
    return helper.make_model(g_, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), lout


def macs(c: dict) -> float:
    """Multiply-adds of a configuration (its output length from the same padding as conv_model)."""
    if c["op"] == "Conv":
        lout = (c["L"] + 2 * (c["dilation"] * (c["K"] - 1) // 2) - c["dilation"] * (c["K"] - 1) - 1) // c["stride"] + 1
        return float(c["B"]) * c["cout"] * max(lout, 0) * c["K"] * (c["C"] // c["groups"])
    return float(c["B"]) * c["C"] * c["L"] * c["K"] * (c["cout"] // c["groups"])


def grid(seed: int, n_random: int, random_max_macs: float = 2e8) -> list:
    """The configurations: one-at-a-time sweeps around the corpus's cases, then a seeded random design (drawn again
    while over random_max_macs: a conv run one group at a time reaches 1-50 GFLOP/s, so a run stays under a second)."""
    cfgs = []

    def add(op="Conv", B=1, C=384, L=256, K=64, d=1, s=1, g=None, cout=None, runtime_w=0):
        g = C if g is None else g
        cout = C if cout is None else cout
        cfgs.append(dict(op=op, B=B, C=C, L=L, K=K, dilation=d, stride=s, groups=g, cout=cout, runtime_w=runtime_w))
    # depthwise: the kernel length (the boundary K ~28 seen in the corpus) at batch 1 and 16
    for K, B in itertools.product([3, 7, 15, 25, 27, 28, 29, 31, 32, 48, 64, 96, 128, 256, 512], [1, 16]):
        add(K=K, B=B, L=max(256, K + 1))
    for B in [1, 2, 4, 8, 32, 64]:                       # batch at K 32 and 128
        add(K=32, B=B)
        add(K=128, B=B)
    for C in [32, 64, 128, 256, 768, 1024]:              # channels (= groups)
        add(K=64, C=C)
    for L in [64, 128, 512, 1024, 2048, 4096]:            # length
        add(K=64, L=L)
    for d in [2, 4, 8, 16, 32, 64, 128]:                  # tasnet's dilated depthwise convs: K 3
        add(K=3, d=d, C=256, L=2000, B=4)
    for rw in [1]:                                        # the kernel computed at run time (ssm)
        add(K=128, runtime_w=rw)
        add(K=32, runtime_w=rw)
    for cpg in [2, 4, 8, 16, 48]:                         # grouped, not depthwise: channels per group (wav2vec: 48)
        add(K=128, C=768, g=768 // cpg, L=256)
        add(K=16, C=768, g=768 // cpg, L=256)
    for s, K in [(4, 8), (8, 16), (16, 32)]:              # ConvTranspose decoders (tasnet, vocoder): dense and depthwise
        add(op="ConvTranspose", C=256, L=500, K=K, s=s, g=1, cout=1, B=4)
        add(op="ConvTranspose", C=256, L=500, K=K, s=s, g=256, cout=256, B=4)
    rng = np.random.default_rng(seed)
    drawn = 0
    while drawn < int(n_random):
        C = int(rng.choice([32, 64, 128, 192, 256, 384, 512, 768]))
        cpg = int(rng.choice([1, 1, 1, 2, 4, 8, 16]))
        K = int(np.exp(rng.uniform(np.log(2), np.log(1024))))
        d = int(rng.choice([1, 1, 1, 1, 2, 4, 16, 64])) if K <= 9 else 1
        add(K=K, d=d, C=C, g=C // cpg, B=int(rng.choice([1, 2, 4, 8, 16, 32, 64])),
            L=int(np.exp(rng.uniform(np.log(max(K, 32)), np.log(8192)))), runtime_w=int(rng.random() < 0.15))
        if macs(cfgs[-1]) > random_max_macs:
            cfgs.pop()
        else:
            drawn += 1
    return cfgs


def main() -> int:
    p = base_parser("Phase 3: single-node 1-D grouped convolutions for the per-group boundary", "kernel_model",
                    "conv1d_grid.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("conv1d_grid", args.log_level)
    if not cfg["out"]:
        raise HaseError("config out: the folder to write the models to is required")
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    rows, seen = [], set()
    for c in grid(int(cfg["seed"]), int(cfg["n_random"]), float(cfg["random_max_macs"])):
        key = tuple(c.values())
        if key in seen or macs(c) > float(cfg["max_macs"]):
            continue
        seen.add(key)
        tag = f"{'ct' if c['op'] == 'ConvTranspose' else 'c'}1d-k{c['K']}d{c['dilation']}s{c['stride']}g{c['groups']}" \
              f"o{c['cout']}{'w' if c['runtime_w'] else ''}"
        name = f"{tag}_bs{c['B']}_{c['C']}x{c['L']}"
        try:
            m, lout = conv_model(c["op"], c["B"], c["C"], c["L"], c["K"], c["dilation"], c["stride"], c["groups"],
                                 c["cout"], c["runtime_w"], int(cfg["opset"]))
        except ValueError:
            continue
        if max(c["B"] * c["C"] * c["L"], c["B"] * c["cout"] * lout) > int(cfg["max_elems"]):
            continue
        onnx.checker.check_model(m)
        paths.atomic_write_bytes(out / f"{name}.onnx", m.SerializeToString())
        rows.append(dict(name=name, **c, Lout=lout, flops=int(2 * macs(c))))
    with open(out / "grid.csv.tmp", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    (out / "grid.csv.tmp").replace(out / "grid.csv")
    paths.atomic_write_text(out / "models.txt", "".join(f"{out / r['name']}.onnx\n" for r in rows))
    log.info("wrote %d models to %s (grid.csv, models.txt)", len(rows), out)
    return 0


if __name__ == "__main__":
    run_main(main)
