"""The instance-norm throughput floor of inference/node_model.py: ORT's CUDA InstanceNormalization (cuDNN batch-norm
statistics over [1, N*C, L]) runs many short instances at a fixed time per instance, so a node past the trees'
training range is priced at least at the training nodes' time per instance times its own N*C."""
from pathlib import Path

import numpy as np
import pytest

from helpers import corpus_records

REPO = Path(__file__).resolve().parents[1]


def test_instances_and_the_floor_statistic():
    from hase.inference.node_model import INSTANCE_FLOOR_NODES, instance_floor, instances
    inorm = {"op_type": "InstanceNormalization", "inputs": [{"shape": [49152, 4, 32]}]}
    assert instances(inorm) == 49152 * 4 and instances(dict(inorm, op_type="GroupNormalization")) == 49152 * 4
    assert instances({"op_type": "LayerNormalization", "inputs": [{"shape": [49152, 4, 32]}]}) == 0.0
    big = [dict(inorm, inputs=[{"shape": [n, 4, 32]}]) for n in range(2048, 2048 + 64 * INSTANCE_FLOOR_NODES, 64)]
    f = instance_floor(big, [0.008 * instances(k) for k in big])
    assert f["us_per_instance"] == pytest.approx(0.008) and f["nodes"] == INSTANCE_FLOOR_NODES
    assert instance_floor(big[:INSTANCE_FLOOR_NODES - 1], [1.0] * (INSTANCE_FLOOR_NODES - 1)) == {}   # too few: none
    small = [dict(inorm, inputs=[{"shape": [8, 4, 9000]}])] * 50                                      # < 4096 instances
    assert instance_floor(small, [30.0] * 50) == {}


def test_an_instance_norm_past_the_training_range_is_priced_at_the_throughput_floor():
    """Trained on N*C up to 16,384 at 9 ns per instance, a node of 131,072 instances is priced ~8x one of 16,384
    (the trees alone flatten at the largest they saw); its host dispatch stays that of a small one."""
    from hase.inference.node_model import NodeModel
    recs = corpus_records()
    inorm = next(k for m in sorted(recs) for k in recs[m]["kernels"] if k["op_type"] == "InstanceNormalization")
    others = [k for m in sorted(recs)[:6] for k in recs[m]["kernels"]]

    def at(n, c, length=32):
        sh = lambda e: dict(e, shape=[n, c, length]) if e else e  # noqa: E731
        return dict(inorm, inputs=[sh(inorm["inputs"][0])] + list(inorm["inputs"][1:]),
                    outputs=[sh(e) for e in inorm["outputs"]])
    train = [at(n, c) for n in (1, 8, 64, 512, 2048, 4096) for c in (2, 4)] * 4 + others
    g = np.array([2.0 + 0.009 * np.prod(k["inputs"][0]["shape"][:2]) if k["op_type"] == "InstanceNormalization"
                  else 3.0 for k in train])
    nm = NodeModel().fit(train, g, np.full(len(train), 7.0), {"n_estimators": 80})
    assert nm.manifest["instance_floor"]["us_per_instance"] == pytest.approx(0.009, rel=0.1)
    pg, ph = nm.predict([at(4096, 4), at(32768, 4)])
    assert pg[1] == pytest.approx(0.009 * 131072, rel=0.15) and pg[1] / pg[0] > 6
    assert ph[1] == pytest.approx(ph[0], rel=0.05)
    # a model fitted before the floor (none in its manifest) predicts as it did: flat past the range
    nm.manifest.pop("instance_floor")
    old, _ = nm.predict([at(4096, 4), at(32768, 4)])
    assert old[1] / old[0] < 1.5


def test_rows_bn_elements_and_its_floor_statistic():
    from hase.inference.node_model import ROWS_BN_FLOOR_NODES, rows_bn_elements, rows_bn_floor
    bn = {"op_type": "BatchNormalization", "inputs": [{"shape": [20736, 128]}]}
    assert rows_bn_elements(bn) == 20736 * 128
    assert rows_bn_elements(dict(bn, inputs=[{"shape": [8, 128, 14, 14]}])) == 0.0   # the usual 4-D BN: no law here
    assert rows_bn_elements(dict(bn, op_type="LayerNormalization")) == 0.0
    big = [dict(bn, inputs=[{"shape": [r, 128]}]) for r in range(1024, 1024 + 64 * ROWS_BN_FLOOR_NODES, 64)]
    f = rows_bn_floor(big, [0.0006 * rows_bn_elements(k) for k in big])
    assert f["us_per_element"] == pytest.approx(0.0006) and f["nodes"] == ROWS_BN_FLOOR_NODES
    assert rows_bn_floor(big[:ROWS_BN_FLOOR_NODES - 1], [1.0] * (ROWS_BN_FLOOR_NODES - 1)) == {}   # too few: none
    assert rows_bn_floor([dict(bn, inputs=[{"shape": [64, 128]}])] * 50, [5.0] * 50) == {}          # < 1e5 elements


def test_a_2d_batchnorm_past_the_training_rows_is_priced_at_its_per_element_cost():
    """Trained on up to 4,096 rows at 0.6 ns per element, a node of 4x the largest rows is priced ~4x it (the trees
    alone flatten at the largest they saw); a model fitted before this floor predicts as it did."""
    from hase.inference.node_model import NodeModel
    recs = corpus_records()
    bn = next(k for m in sorted(recs) for k in recs[m]["kernels"]
              if k["op_type"] == "BatchNormalization" and len(k["inputs"][0]["shape"]) == 2)
    others = [k for m in sorted(recs)[:6] for k in recs[m]["kernels"]]

    def at(r, c=256):
        sh = lambda e: dict(e, shape=[r, c]) if e else e  # noqa: E731
        return dict(bn, inputs=[sh(bn["inputs"][0])] + list(bn["inputs"][1:]), outputs=[sh(e) for e in bn["outputs"]],
                    bytes_read=8.0 * r * c, bytes_written=4.0 * r * c, flops=2.0 * r * c)
    train = [at(r, c) for r in (64, 256, 1024, 2048, 4096) for c in (128, 256)] * 4 + others
    g = np.array([2.0 + 0.0006 * np.prod(k["inputs"][0]["shape"]) if k is not None and k["op_type"] ==
                  "BatchNormalization" and len(k["inputs"][0]["shape"]) == 2 else 3.0 for k in train])
    nm = NodeModel().fit(train, g, np.full(len(train), 7.0), {"n_estimators": 80})
    assert nm.manifest["rows_bn_floor"]["us_per_element"] == pytest.approx(0.0006, rel=0.1)
    pg, _ = nm.predict([at(4096), at(16384)])
    assert pg[1] == pytest.approx(0.0006 * 16384 * 256, rel=0.15) and pg[1] / pg[0] > 3
    nm.manifest.pop("rows_bn_floor")
    old, _ = nm.predict([at(4096), at(16384)])
    assert old[1] / old[0] < 2.5


def test_pad_generic_elements_follow_the_cuda_eps_two_kernels():
    """ORT's CUDA Pad: NCHW padding along H/W (rank 2; rank 3, first dim unpadded; rank 4, N and C unpadded) is one
    kernel, every other padding the generic one; an unpadded Pad is a copy."""
    from hase.inference.node_model import pad_generic_elements

    def pad(x, y):
        return {"op_type": "Pad", "inputs": [{"shape": x}, {"shape": [2 * len(x)]}], "outputs": [{"shape": y}]}
    assert pad_generic_elements(pad([8, 6, 8, 64, 64], [8, 6, 10, 64, 64])) == 8 * 6 * 10 * 64 * 64   # rank 5
    assert pad_generic_elements(pad([1, 14, 14, 384], [1, 16, 16, 384])) == 16 * 16 * 384             # NHWC H, W
    assert pad_generic_elements(pad([4, 32, 100], [6, 32, 100])) == 6 * 32 * 100                      # rank 3, dim 0
    assert pad_generic_elements(pad([8, 64, 56, 56], [8, 64, 58, 58])) == 0.0                         # NCHW H, W
    assert pad_generic_elements(pad([8, 64, 1000], [8, 64, 1031])) == 0.0                             # rank 3, last
    assert pad_generic_elements(pad([500, 1000], [600, 1000])) == 0.0                                 # rank 2
    assert pad_generic_elements(pad([8, 6, 8, 64, 64], [8, 6, 8, 64, 64])) == 0.0                     # a copy
    assert pad_generic_elements({"op_type": "Slice", "inputs": [{"shape": [8, 6, 8, 64, 64]}],
                                 "outputs": [{"shape": [8, 6, 7, 64, 64]}]}) == 0.0


def test_the_two_pad_kernels_on_the_h200_corpus():
    """The law behind the floor, on committed measurements (a machine whose traces hold torchvision's swin_v2, NHWC
    window padding): the generic kernel's time per output element sits in a narrow band far above the NCHW kernel's."""
    import pandas as pd
    from hase.inference.node_model import pad_generic_elements
    mach = REPO / "benchmark/results/nvidia-h200/corpus/machine_f"
    nodes = pd.read_csv(mach / "trace_nodes.csv.xz")
    nodes = nodes[nodes["op"] == "Pad"].groupby(["model", "node"])["gpu_us"].median()
    recs = corpus_records()
    rows = []
    for (m, n), us in nodes.items():
        k = next((k for k in (recs.get(m) or {}).get("kernels", []) if k.get("node_name") == n), None)
        if k is None or us <= 0:
            continue
        el = float(np.prod(k["outputs"][0]["shape"]))
        if el >= 1e5:
            rows.append((pad_generic_elements(k) > 0, us * 1e3 / el))
    d = pd.DataFrame(rows, columns=["generic", "ns_per_element"])
    gen, fast = d[d["generic"]]["ns_per_element"], d[~d["generic"]]["ns_per_element"]
    assert len(gen) >= 10 and len(fast) >= 10
    assert 0.07 < gen.quantile(0.05) and gen.quantile(0.95) < 0.14     # one rate, ~0.1 ns per element
    assert fast.median() * 5 < gen.quantile(0.05)                        # the NCHW kernel: several times faster


def test_a_generic_pad_of_a_rank_no_training_node_had_is_priced_at_its_per_element_cost():
    """Trained on 4-D NHWC paddings (generic kernel, 0.1 ns per element) and NCHW ones (fast), a 5-D padding is
    priced at the generic rate and an NCHW one stays fast; a model fitted before this floor predicts as it did."""
    from hase.inference.node_model import NodeModel, pad_generic_elements
    recs = corpus_records()
    pad = next(k for m in sorted(recs) for k in recs[m]["kernels"] if k["op_type"] == "Pad")
    others = [k for m in sorted(recs)[:6] for k in recs[m]["kernels"]]

    def at(x, y):
        el = float(np.prod(y))
        return dict(pad, inputs=[dict(pad["inputs"][0], shape=x)] + list(pad["inputs"][1:]),
                    outputs=[dict(pad["outputs"][0], shape=y)], bytes_read=4.0 * np.prod(x), bytes_written=4.0 * el,
                    flops=0)
    nhwc = [at([b, h, h, c], [b, h + 2, h + 2, c]) for b in (1, 4, 16) for h in (14, 28, 56) for c in (96, 192)]
    nchw = [at([b, c, h, h], [b, c, h + 2, h + 2]) for b in (1, 4, 16) for h in (14, 28, 56) for c in (96, 192)]
    train = (nhwc + nchw) * 3 + others
    g = np.array([2.0 + (1e-4 if pad_generic_elements(k) else 5e-6) * np.prod(k["outputs"][0]["shape"])
                  if k["op_type"] == "Pad" else 3.0 for k in train])
    nm = NodeModel().fit(train, g, np.full(len(train), 7.0), {"n_estimators": 80})
    assert nm.manifest["pad_generic_floor"]["us_per_element"] == pytest.approx(1e-4, rel=0.15)
    five = at([8, 6, 8, 64, 64], [8, 6, 10, 64, 64])
    fast = at([8, 192, 56, 56], [8, 192, 58, 58])
    pg, _ = nm.predict([five, fast])
    assert pg[0] == pytest.approx(1e-4 * 8 * 6 * 10 * 64 * 64, rel=0.2)
    assert pg[1] < 0.3 * 1e-4 * 8 * 192 * 58 * 58
    floor = nm.manifest.pop("pad_generic_floor")["us_per_element"]
    old, _ = nm.predict([five, fast])   # the trees alone; the floor only ever raises a generic-path node to its rate
    assert pg[0] == pytest.approx(max(old[0], floor * pad_generic_elements(five))) and pg[1] == pytest.approx(old[1])
