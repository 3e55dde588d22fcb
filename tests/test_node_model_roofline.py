"""The roofline-ratio GPU target of inference/node_model.py: trees on a node's time over its nominal roofline time
price a node larger than any they trained on in proportion to its bytes (a leaf is a throughput), where trees on
log time price it as the largest they saw (exam v18: LeViT's 2-D BatchNormalization at 0.08x)."""
from pathlib import Path

import numpy as np
import pytest

from helpers import corpus_records

REPO = Path(__file__).resolve().parents[1]


def test_target_round_trip_and_roofline():
    from hase.inference.node_model import gpu_from_target, gpu_target, roofline_us
    ks = [{"bytes_read": 3e6, "bytes_written": 3e6, "flops": 1e6}, {"bytes_read": 0, "bytes_written": 0,
                                                                      "flops": 5e9}, {}]
    base = roofline_us(ks)
    assert base[0] == pytest.approx(6e6 / 3e12 * 1e6) and base[1] == pytest.approx(5e9 / 50e12 * 1e6)
    assert base[2] == 0.0
    us = np.array([40.0, 150.0, 0.0])
    for kind in ("log_time", "roofline_ratio"):
        assert gpu_from_target(gpu_target(us, np.ones(3), base, kind), base, kind) == pytest.approx(us, abs=1e-9)


def test_a_node_past_the_training_range_scales_with_its_bytes_on_the_ratio_only():
    from hase.inference.node_model import NodeModel
    from hase.utils.errors import HaseError
    recs = corpus_records()
    bn = next(k for m in sorted(recs) for k in recs[m]["kernels"]
              if k["op_type"] == "BatchNormalization" and len(k["inputs"][0]["shape"]) == 4)
    others = [k for m in sorted(recs)[:6] for k in recs[m]["kernels"]]

    def rows(n, c=256):   # a BatchNormalization over a [n, c] input, its bytes as the record would count them
        sh = lambda e: dict(e, shape=[n, c]) if e else e  # noqa: E731
        w = [dict(e, shape=[c]) for e in bn["inputs"][1:]]
        return dict(bn, inputs=[sh(bn["inputs"][0])] + w, outputs=[sh(e) for e in bn["outputs"]],
                    weight_shapes=[[c]] * 4, bytes_read=4.0 * (n * c + 4 * c), bytes_written=4.0 * n * c,
                    flops=2.0 * n * c)
    gbps = 13.0   # the flat rate of ORT's CUDA BatchNormalization on 2-D inputs (H200 traces)
    bn2 = [rows(n) for n in (512, 1024, 2048, 4096, 8192, 16384)] * 4
    train = bn2 + others   # the other kernels at 2 us + their bytes at 1.5 TB/s
    g = np.array([2.0 + (k["bytes_read"] + k["bytes_written"]) / ((gbps if i < len(bn2) else 1500.0) * 1e3)
                  for i, k in enumerate(train)])
    big, top = rows(65536), rows(16384)
    want = 2.0 + (big["bytes_read"] + big["bytes_written"]) / (gbps * 1e3)
    ratio = NodeModel().fit(train, g, np.full(len(train), 7.0), {"n_estimators": 80}, target="roofline_ratio")
    assert ratio.manifest["gpu_target"] == "roofline_ratio"
    # the trees alone: the 2-D BatchNormalization floor (test_node_model_instances.py) would price both past the range
    assert ratio.manifest.pop("rows_bn_floor")["us_per_element"] > 0
    pg, _ = ratio.predict([top, big])
    assert pg[1] / pg[0] > 3.0 and pg[1] > 0.6 * want   # 4x the bytes: ~3.5x the time (the 2 us floor)
    flat = NodeModel().fit(train, g, np.full(len(train), 7.0), {"n_estimators": 80})
    assert "gpu_target" not in flat.manifest   # log_time: as every model fitted before the key
    flat.manifest.pop("rows_bn_floor")
    fg, _ = flat.predict([top, big])
    assert fg[1] / fg[0] < 1.5 and fg[1] < 0.5 * want
    with pytest.raises(HaseError, match="gpu target"):
        NodeModel().fit(train, g, np.full(len(train), 7.0), {"n_estimators": 5}, target="linear")


def test_the_installed_h200_node_model_prices_a_2d_batchnorm_in_proportion_past_its_rows():
    """The shipped H200 corpus node model (gpu_target roofline_ratio since session 34): LeViT's BatchNormalization
    over [20,736 rows, 320] (the most rows any training node had; traced at ~13 GB/s on the H200) priced at ~13 GB/s,
    and the same node at 4x the rows ~3x that, where trees on log time would price it as the 20,736-row one."""
    from hase.inference.node_model import NodeModel, with_context
    nm = NodeModel.load(REPO / "inference/results/nvidia-h200/corpus/node_model")
    assert nm.manifest.get("gpu_target") == "roofline_ratio"
    ks = with_context(corpus_records(["levit-s3_bs64_288x288"])["levit-s3_bs64_288x288"]["kernels"])
    bn = next(k for k in ks if k["op_type"] == "BatchNormalization" and k["inputs"][0]["shape"] == [20736, 320])

    def rows(n):
        sh = lambda e: dict(e, shape=[n, 320]) if e else e  # noqa: E731
        f = n / 20736   # the record's own counts, scaled with the rows
        return dict(bn, inputs=[sh(bn["inputs"][0])] + list(bn["inputs"][1:]), outputs=[sh(e) for e in bn["outputs"]],
                    bytes_read=bn["bytes_read"] * f, bytes_written=bn["bytes_written"] * f, flops=bn["flops"] * f)
    i = ks.index(bn)   # priced in its record (the trees read whether the neighbours launch)
    top, big = rows(20736), rows(4 * 20736)
    g = [nm.predict(ks[:i] + [k] + ks[i + 1:])[0][i] for k in (top, big)]
    gbps = [(k["bytes_read"] + k["bytes_written"]) / (us * 1e3) for k, us in zip((top, big), g)]
    assert 8.0 < gbps[0] < 20.0 and g[1] / g[0] > 2.5, (gbps, g)   # session 34: 13.2 GB/s, 3.0x
