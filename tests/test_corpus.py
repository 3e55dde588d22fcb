"""The corpus (issue 22): a seeded generator whose every family exports and runs on the CPU EP, an exam split
disjoint from the training split, and a node model that names the op types it never saw."""
import json
import lzma
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent

from hase.model_zoo import corpus  # noqa: E402
from hase.graph_model.dag_critical_path import records_in_file  # noqa: E402

from hase.model_zoo.generator import FAMILIES, arch_spec, build_model, file_stem, input_shape  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402
from helpers import corpus_records, run_script  # noqa: E402

# a small seed of each family (measured GFLOP at its first config, CPU export well under a minute in all)
SMALL = {"cnn_plain": 2, "cnn_mobile": 2, "cnn_grouped": 3, "vit": 3, "swin": 1, "hybrid": 1, "mixer": 0,
         "encoder": 2, "pvt": 7, "decoder": 6, "unet": 7, "conformer": 5, "fpn": 7, "convnext": 3,
         "tcn": 1, "perceiver": 8, "dense": 4, "rnn": 1, "linattn": 1, "ssm": 1, "gan": 1, "moe": 2, "detr": 3,
         "yolo": 2, "pointnet": 3, "wav2vec": 7, "video3d": 6, "deeplab": 0, "dlrm": 4, "vocoder": 2, "superres": 0,
         "gnn": 1, "diffusion": 5, "implicit": 7, "tasnet": 1, "hrnet": 2, "raft": 3, "fttransformer": 6,
         "vqvae": 2, "capsnet": 2, "kan": 1, "nascell": 1, "neuralode": 3, "gmlp": 1, "xcit": 1, "stn": 1,
         "aft": 7, "res2net": 4, "hourglass": 8, "retnet": 2, "convmixer": 5, "wavenet": 10, "t5enc": 3,
         "llama": 3, "maxvit": 1, "focalnet": 11, "levit": 3, "poolformer": 2, "mobilevit": 0,
         "resmlp": 3, "ghostnet": 2, "hardnet": 1, "nystromformer": 5, "rednet": 8, "bigbird": 2, "dgcnn": 8,
         "deformattn": 5, "condconv": 3, "tabnet": 5, "roihead": 2, "sinkhorn": 4, "nmsdet": 8}
# tcn-s1: gated, LayerNorm, an uneven 'same' Pad; perceiver-s8: 2 MHA cross blocks; rnn-s1: a stride-2 Conv1d
# front-end, 3 GRU layers, a mean head; linattn-s1: conv stem, elu+1 linear attention by MatMul; ssm-s1: 3 Mamba-like
# blocks, a chunked scan (3 chunks of 64 at T 192); ssm-s5 (S4D, a long-convolution kernel) is exported by seed checks;
# gan-s1: a 12x12 latent grid, nearest Upsample + conv, InstanceNorm, LeakyReLU; moe-s2: 12 experts, top-2 after a
# softmax, ScatterElements gates, Einsum experts; detr-s3: nn.MultiheadAttention self- and cross-attention, 50 queries;
# yolo-s2: C2f, 2 scales, an anchor-free DFL head decoded to pixels; pointnet-s3: DGCNN, the kNN graph (TopK, Gather)
# recomputed per EdgeConv at 256 points; wav2vec-s7: 7 strided Conv1d with GroupNorm, post-norm SDPA layers;
# video3d-s6: C3D, 8 frames, MaxPool3d; deeplab-s0: bottleneck backbone at output stride 16, separable ASPP, bilinear
# Resize; dlrm-s4: 7 tables in one concatenated Embedding (offsets), 4 lookups per table summed, triangle Gather;
# vocoder-s2: MelGAN-like, 3 ConvTranspose1d (8, 8, 2), 32 frames; superres-s0: EDSR, 13 blocks scaled by 0.1, x2
# PixelShuffle, a bilinear global skip; gnn-s1: 3 GCN layers over weighted edges (Relu(A - 0.5)), mean readout
# diffusion-s5: a 4-channel latent, 2 levels of 64, ConvTranspose2d up, 1x1-conv q/k/v SDPA attention, a learned
# variance (8 output channels); implicit-s7: SIREN (Sin, w0 30) over a NeRF encoding, two heads with view directions;
# tasnet-s1: causal (left Pad, per-frame channel norm), a skip path, a shared ConvTranspose1d decoder
# hrnet-s2: 2 branches (24, 48) of basic blocks, 3 fusion modules, nearest Resize, a classification head;
# raft-s3: all-pairs MatMul correlation, 1 level looked up at radius 2 by GatherElements, SepConvGRU x 4, convex
# upsampling; fttransformer-s6: linear + ReLU embeddings of 48 features, 2 layers, fused q/k/v SDPA, ReGLU
# vqvae-s2: 3 stride-2 4x4 convs, 2 residual blocks, 1024 codes by ArgMin and Gather, nearest Resize + conv decoder;
# capsnet-s2: grey 36x36, 8 capsule maps of 8 dimensions, 3 routing iterations, the masked reconstruction decoder;
# kan-s1: B-spline edges (grid 5, order 3) over 192 features, 3 hidden layers, a SiLU base branch
# nascell-s1: an NB201 cell (conv3x3 on 3 edges, a skip, a conv1x1), 2 cells a stage; neuralode-s3: RK4, 7 steps of a
# 1-hidden-layer ReLU field; gmlp-s1: patch 16, 2 blocks, token mixing by a 1x1 Conv1d, a 32-wide tiny attention
# xcit-s1: patch 16, 4 heads of 32, 10 blocks with the local patch interaction; stn-s1: 2 spatial transformers,
# bilinear, zero padding; aft-s7: AFT-full, D 64, 1024 tokens (a 1024 x 1024 position bias a block)
# res2net-s4: scale 2, width 32, stages of 1, 2, 3 bottlenecks; hourglass-s8: 2 stacks of depth 3, 64 channels;
# retnet-s2: 4 heads of 32, 8 blocks, SwiGLU; convmixer-s5: patch 16, width 256, 13 blocks of kernel 5;
# wavenet-s10: 40 channels in, 6 layers of kernel 2 (dilation 1-32), 128 residual, 256 skip, 256 out, T 1024;
# t5enc-s3: 4 heads of 32, 5 blocks, 64 buckets shared by the blocks
# llama-s3: 12 heads of 32, 1 key/value head, SDPA, no head; maxvit-s1: window 7, 2 stages; focalnet-s11: 3 stages
# hardnet-s1: HarDNet-DS (1x1 + depthwise 3x3 layers), 5 stages of 4-16 layers, 128 px; nystromformer-s5: 2 heads of
# 32, 4 pre-norm blocks, 32 landmarks over 128 tokens, 8 pseudo-inverse steps, a depthwise 17 x 1 conv on v, mean head
# rednet-s8: 8 bottlenecks, 5x5 involutions by nn.Unfold, 128 px; bigbird-s2: 2 heads of 32, 2 post-norm blocks, 32
# blocks of 32 tokens, 1 random block, no global tokens, mean head
# dgcnn-s8: 2 EdgeConvs (64, 128) on k 8 neighbours, a Gather of rows, 256 points; deformattn-s5: 4 levels (strides
# 8-64), 8 heads of 16, 2 points, 5 pre-norm layers, 128 px
# condconv-s3: 9 mbconv blocks in 5 stages (x4, depthwise 3x3), every conv dynamic (2 experts, Sigmoid, one routing a
# block), 160 px; tabnet-s5: 4 steps of 2 shared and 2 own GLU layers, sparsemax, ghost BN (512: one at batch 1), 32
# features
# roihead-s2: 3 stages to stride 16, 64 fixed boxes, RoiAlign 7 x 7 (adaptive sampling), 2 head convs of 256, 256 px;
# sinkhorn-s4: 64 keypoints, a keypoint MLP, 5 layers of 8 SDPA heads of 8, 10 Sinkhorn iterations, no dustbin
# nmsdet-s8: 4 stages to stride 32, one level, 20 classes, the top 500 points, score > 0.6, class-aware NMS, 256 px


def test_specs_are_seeded_and_reproducible():
    for fam in FAMILIES:
        a, b = arch_spec(fam, 7), arch_spec(fam, 7)
        assert a == b
        assert arch_spec(fam, 8) != a          # another seed is another architecture
        assert len(a["configs"]) == 3 and a["configs"][0]["batch"] == 1
    import torch
    s = arch_spec("vit", 3)
    m1, m2 = build_model(s, s["configs"][0]["size"]), build_model(s, s["configs"][0]["size"])
    for (k, v1), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(v1, v2), k          # the same weights: the same ONNX file


def test_every_family_exports_and_runs_on_cpu_ep(tmp_path):
    assert set(SMALL) == set(FAMILIES)               # a new family needs a small seed here
    archs = [f"{f}-s{s}" for f, s in SMALL.items()]
    run_script([REPO / "model_zoo/build_corpus.py", "--set", f"archs=[{','.join(archs)}]", "--set", "max_configs=1",
                "--set", "workers=1"], tmp_path)
    man = json.loads((tmp_path / "model_zoo/models/corpus_manifest.json").read_text())
    assert not man["failed"], man["failed"]
    assert set(man["archs"]) == set(archs)
    for stem, e in man["files"].items():
        assert e["relative_error_cpu"] <= 1e-3       # validated against PyTorch
        sess = ort.InferenceSession(str(tmp_path / "model_zoo/models" / e["file"]), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal(e["input_shape"], dtype=np.float32)
        y = sess.run(None, {sess.get_inputs()[0].name: x})[0]
        assert np.isfinite(y).all()
        # a detector's kept boxes are rows of [M, 7] (M data-dependent); every other family's output is batch-first
        assert y.shape[1] == 7 if e["family"] == "nmsdet" else y.shape[0] == e["batch"]
        spec = arch_spec(e["family"], e["seed"])
        assert stem == file_stem(spec, e["batch"], e["size"])
        assert tuple(e["input_shape"]) == input_shape(spec, e["batch"], e["size"])


def _export_and_run(tmp_path, fam, seed, size, batch):
    """A generated architecture through the project's export path, run once on the CPU EP:
    (spec, model, input shape, onnx path, session, input, output)."""
    from hase.model_zoo.torchvision_exporter import export_one
    spec = arch_spec(fam, seed)
    model = build_model(spec, size)
    shape = input_shape(spec, batch, size)
    out = tmp_path / f"{file_stem(spec, batch, size)}.onnx"
    export_one(model, batch, size, 17, out, shape=shape)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    return spec, model, shape, out, sess, x, sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _matches_pytorch(model, x, y):
    """ORT's output y is finite, equal to PyTorch's on x, and not constant."""
    import torch
    from hase.model_zoo.torchvision_exporter import relative_error
    assert np.isfinite(y).all()
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    assert relative_error(y, ref) <= 1e-3
    assert np.ptp(y) > 0                             # not a constant output


@pytest.mark.parametrize("fam,seed", [("vocoder", 6), ("superres", 6), ("superres", 1), ("gnn", 5), ("gnn", 6)])
def test_new_family_exports_runs_and_has_its_output_shape(tmp_path, fam, seed):
    """The exam v9 held-out families at their smallest size, batch 2: the project's export path, the CPU EP, the
    output shape each family promises (vocoder [B, 1, S x hop], superres [B, 3, scale H, scale W], gnn [B, classes] or
    [B, N, classes]), ORT equal to PyTorch; vocoder-s6: HiFi-GAN v1 MRF; superres-s6: x4 by two bilinear Resize +
    conv stages; superres-s1: RCAN groups with channel attention, nearest Resize, a bicubic global skip; gnn-s5:
    8-head GAT with an additive -1e9 mask; gnn-s6: 1-head GAT masked by Where, LayerNorm, max readout."""
    size, batch = 32, 2
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, batch)
    if fam == "vocoder":
        assert shape == (batch, size, 80)
        want = (batch, 1, size * int(np.prod(spec["strides"])))
    elif fam == "superres":
        assert shape == (batch, 3, size, size)
        want = (batch, 3, size * spec["scale"], size * spec["scale"])
    else:
        assert shape == (batch, size, spec["f_in"] + size)
        want = (batch, size, spec["classes"]) if spec["readout"] == "node" else (batch, spec["classes"])
    assert y.shape == want
    _matches_pytorch(model, x, y)
    if fam == "gnn":                                 # the adjacency columns are read as the graph: no edges differ
        x2 = x.copy()
        x2[..., spec["f_in"]:] = -10.0
        assert not np.allclose(sess.run(None, {sess.get_inputs()[0].name: x2})[0], y, atol=1e-5)


@pytest.mark.parametrize("fam,seed", [("diffusion", 3), ("diffusion", 5), ("implicit", 7), ("implicit", 3),
                                      ("tasnet", 1), ("tasnet", 2)])
def test_v10_family_exports_runs_and_has_its_output_shape(tmp_path, fam, seed):
    """The exam v10 held-out families at their smallest size, batch 2: the project's export path, the CPU EP, the
    output shape each family promises (diffusion [B, out_ch, H, W], implicit [B, N, out], tasnet [B, sources,
    (T' - 1) L / 2 + L]), ORT equal to PyTorch, the ops that define each family in the graph; diffusion-s3: 3 levels,
    Linear q/k/v SDPA at the lowest and in the middle, nearest Resize ups; diffusion-s5: a 4-channel latent,
    ConvTranspose2d, a learned variance; implicit-s7: SIREN over a NeRF encoding, density + colour with view
    directions; implicit-s3: a Gaussian Fourier MatMul, Sin layers, an RGB head; tasnet-s1: causal, per-frame norm,
    skip path, shared decoder; tasnet-s2: global layer norm, 2 x 8 blocks, one decoder per source."""
    import onnx
    size, batch = {"diffusion": 32, "implicit": 1024, "tasnet": 4000}[fam], 2
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, batch)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    if fam == "diffusion":
        assert shape == (batch, spec["in_ch"], size, size)
        want = (batch, spec["out_ch"], size, size)
        assert {"Sin", "Cos", "Softmax", "InstanceNormalization", "Concat", "ReduceMean"} <= ops  # GroupNorm
    elif fam == "implicit":
        assert shape == (batch, size, 3)
        want = (batch, size, spec["out"])
        assert {"Sin", "Cos", "Concat", "MatMul"} <= ops
    else:
        assert shape == (batch, 1, size)
        frames = (size - spec["kernel"]) // spec["stride"] + 1
        want = (batch, spec["sources"], (frames - 1) * spec["stride"] + spec["kernel"])
        assert {"ConvTranspose", "PRelu", "ReduceMean", "Sqrt"} <= ops
    assert y.shape == want
    _matches_pytorch(model, x, y)
    if fam == "implicit":                            # per-point: reversing the points reverses the output
        y2 = sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(x[:, ::-1])})[0]
        assert np.allclose(y2[:, ::-1], y, atol=1e-5)
    if fam == "diffusion":                           # the timestep comes from the input: ORT cannot fold Sin/Cos away
        so = ort.SessionOptions()
        so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
        assert {"Sin", "Cos"} <= {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node}


@pytest.mark.parametrize("fam,seed", [("hrnet", 4), ("hrnet", 15), ("raft", 0), ("raft", 6), ("raft", 9),
                                      ("fttransformer", 2), ("fttransformer", 5)])
def test_v11_family_exports_runs_and_has_its_output_shape(tmp_path, fam, seed):
    """The exam v11 held-out families at their smallest size, batch 2: the project's export path, the CPU EP, the
    output shape each family promises (hrnet [B, classes] or [B, classes, H/4, W/4], raft [B, 2, H, W],
    fttransformer [B, classes] from [B, F]), ORT equal to PyTorch, the ops that define each family in the graph;
    hrnet-s4: 3 branches of bottlenecks, the HRNetV2 head (Concat of all branches at 1/4); hrnet-s15: 2 branches,
    a pose head on the 1/4 branch alone (the last fusion makes only that one); raft-s0: 4 AvgPool levels looked up by
    GatherElements, SepConvGRU, convex upsampling; raft-s6: a local cost volume, the context from frame 1's
    features; raft-s9: GridSample lookup; fttransformer-s2: periodic embeddings (Sin, Cos, a batched MatMul), the
    CLS query alone in the last layer; fttransformer-s5: linear embeddings, manual attention, 100 classes."""
    import onnx
    size, batch = {"hrnet": 192, "raft": 128, "fttransformer": 16}[fam], 2
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, batch)
    nodes = [n.op_type for n in onnx.load(str(out)).graph.node]
    ops = set(nodes)
    if fam == "hrnet":
        assert shape == (batch, 3, size, size)
        n = spec["stages"]
        want = (batch, spec["classes"]) if spec["head"] == "cls" else (batch, spec["classes"], size // 4, size // 4)
        assert {"Conv", "Resize", "Add", "Relu"} <= ops
        ups = 0                                      # one Resize per up-fusion (branch j into a higher i), + v2's
        for k in range(2, n + 1):
            for m in range(spec["modules"][k - 2]):
                outs = 1 if k == n and m == spec["modules"][k - 2] - 1 and spec["head"] == "pose" else k
                ups += sum(j > i for i in range(outs) for j in range(k))
        assert nodes.count("Resize") == ups + (n - 1 if spec["head"] == "seg" else 0)
    elif fam == "raft":
        assert shape == (batch, 6, size, size)
        want = (batch, 2, size, size)
        assert {"Conv", "Sigmoid", "Tanh", "Mul"} <= ops
        if spec["corr"] == "allpairs":
            assert {"MatMul", "GridSample" if spec["lookup"] == "grid_sample" else "GatherElements"} <= ops
        else:
            assert "ReduceMean" in ops and "MatMul" not in ops
        assert ("AveragePool" in ops) == (spec["levels"] > 1) and ("Softmax" in ops) == (spec["up"] == "convex")
    else:
        assert shape == (batch, size) and out.stem == f"fttransformer-s{seed}_bs{batch}_1x{size}"
        want = (batch, spec["classes"])
        assert {"LayerNormalization", "MatMul", "Concat"} <= ops
        assert ({"Sin", "Cos"} <= ops) == (spec["embed"] == "periodic")
    assert y.shape == want
    _matches_pytorch(model, x, y)
    if fam == "raft":                                # the flow reads the second frame too
        x2 = x.copy()
        x2[:, 3:] = x[:, 3:, ::-1]
        assert not np.allclose(sess.run(None, {sess.get_inputs()[0].name: x2})[0], y, atol=1e-4)
    if fam == "fttransformer":                       # per row: reversing the rows reverses the output
        y2 = sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(x[::-1])})[0]
        assert np.allclose(y2[::-1], y, atol=1e-5)


def test_committed_split_is_disjoint_and_big_enough():
    s = corpus.load_split()
    assert not set(s.train) & set(s.exam)
    fam_seed = lambda archs: {(s.family[a], a.rsplit("-s", 1)[1]) for a in archs if s.family[a] != "named"}  # noqa
    assert not fam_seed(s.train) & fam_seed(s.exam)
    for fam in s.held_out_families:
        assert not [a for a in s.train if s.family[a] == fam]
    allv = s.train + s.exam
    assert len(allv) >= 120 and sum(not s.is_cnn(a) for a in allv) >= 0.4 * len(allv)
    assert len(s.held_out_families) >= 3 and sum(g == "named" for g in s.exam_group.values()) >= 6


def test_hybrid_attention_grid_follows_the_strided_convs():
    """hybrid-s8000 at 224 px: its maps go 224 -> 112 -> 56 -> 28 -> 14 -> 7 -> 4 (a stride-2 conv with padding gives
    ceil(n / 2)); the BatchNorm blocks' token count was size // 2^k (3 at the last stage), so the export failed with
    'size of tensor a (16) must match ... (9)'. Sizes that halve evenly build the same model as before."""
    import torch
    from hase.model_zoo.generator import build_model, input_shape, spec_of
    s = spec_of("hybrid-s8000")
    assert s["norm"] == "bn" and {c["size"] for c in s["configs"]} == {128, 224}
    for size in (224, 128):
        with torch.no_grad():
            assert tuple(build_model(s, size)(torch.randn(*input_shape(s, 1, size))).shape) == (1, s["classes"])


def test_split_with_an_overlap_is_refused(tmp_path):
    d = yaml.safe_load(corpus.SPLIT_FILE.read_text())
    d["exam"]["fresh_seeds"]["vit"] = {"seeds": [3, 5]}        # vit-s3 trains
    bad = tmp_path / "split.yaml"
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(HaseError, match="both splits"):
        corpus.load_split(bad)
    d = yaml.safe_load(corpus.SPLIT_FILE.read_text())
    d["train"]["named"].append(d["exam"]["named"][0])          # an exam named model trains
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(HaseError, match="both splits"):
        corpus.load_split(bad)


def test_scorer_refuses_training_architectures():
    s = corpus.load_split()
    d = yaml.safe_load(corpus.SPLIT_FILE.read_text())
    named, held = d["exam"]["named"][0], next(iter(d["exam"]["held_out_families"]))
    s.refuse_trained([f"{held}-s0_bs1_224x224", f"{named}_bs8_224x224"])     # exam models: fine
    with pytest.raises(HaseError, match="refusing to score"):
        s.refuse_trained([f"{held}-s0_bs1_224x224", "vit-s3_bs1_64x64"])
    with pytest.raises(HaseError, match="refusing to score"):                # the retired v3 exam trains now
        s.refuse_trained(["conformer-s0_bs1_224x224"])
    with pytest.raises(HaseError, match="refusing to score"):                # the retired v1 exam trains now
        s.refuse_trained(["swin-s0_bs1_224x224"])


def committed_records(n=12):
    recs = corpus_records()
    return [recs[m] for m in sorted(recs)[:n]]


def test_node_model_names_unseen_types_and_their_share(tmp_path):
    from hase.inference.node_model import NodeModel
    recs = committed_records()
    ks = [k for r in recs for k in r["kernels"]]
    rng = np.random.default_rng(0)
    # a synthetic target that follows the FLOPs: the model must learn it and keep it after a save/load
    g = np.array([1.0 + (k.get("flops") or 0) / 1e8 for k in ks])
    h = 5.0 + rng.random(len(ks))
    nm = NodeModel().fit(ks, g, h, {"n_estimators": 60})
    nm.save(tmp_path / "nm")
    nm2 = NodeModel.load(tmp_path / "nm")
    pg, ph = nm2.predict(ks)
    assert np.median(np.abs(pg / g - 1)) < 0.2 and np.all(ph > 3)
    # a kernel whose type no training node had: predicted (never a crash), named, and counted
    odd = dict(ks[0], type="NoSuchOp", op_type="NoSuchOp", id="NoSuchOp#0")
    assert nm2.unseen_types([odd, ks[1]]) == ["NoSuchOp"]
    assert list(nm2.unseen([odd, ks[1]])) == [True, False]
    pg2, _ = nm2.predict([odd])
    assert np.isfinite(pg2).all()
    from hase.training.train_kernel_model import load_predictor
    assert isinstance(load_predictor(tmp_path / "nm"), NodeModel)   # found where a kernel predictor is


def test_node_model_learns_gpu_time_from_a_pooled_gpu_told_apart_by_a_feature(tmp_path):
    """NodeModel.fit gpu_pool: another GPU's nodes teach the GPU-time trees (a feature says which GPU) and never the
    host trees: with this GPU's own data on half of the nodes, the pooled GPU (here 1.5x slower, on all of them)
    is priced at this GPU's speed once the flag is learned; a saved and loaded model predicts the same."""
    from hase.inference.node_model import POOL_FEATURE, NodeModel
    ks = [k for r in committed_records() for k in r["kernels"]]
    g = np.array([2.0 + (k.get("flops") or 0) / 1e8 for k in ks])
    own = np.array([i % 2 == 0 for i in range(len(ks))])
    nm = NodeModel().fit([k for k, o in zip(ks, own) if o], g[own], np.full(own.sum(), 5.0),
                         {"n_estimators": 200, "learning_rate": 0.2}, gpu_pool=(ks, 1.5 * g))
    lacks = sum(k["type"] not in {o["type"] for o, t in zip(ks, own) if t} for k in ks)   # types only at odd places
    assert nm.manifest["gpu_pool"] == {"feature": POOL_FEATURE, "nodes": len(ks) - lacks,
                                       "nodes_of_types_this_gpu_lacks": lacks}
    # a type only the pooled GPU ran stays unseen here (its kin or the fallback prices it, with the warning)
    odd = dict(ks[0], type="OnlyThere", op_type="OnlyThere")
    nm2 = NodeModel().fit(ks[:50], g[:50], np.full(50, 5.0), {"n_estimators": 5}, gpu_pool=([odd] + ks[:50], g[:51]))
    assert nm2.unseen_types([odd]) == ["OnlyThere"] and nm2.manifest["gpu_pool"]["nodes_of_types_this_gpu_lacks"] == 1
    nm.save(tmp_path / "nm")
    pg, ph = NodeModel.load(tmp_path / "nm").predict(ks)
    assert np.median(pg / g) == pytest.approx(1.0, abs=0.08)        # this GPU's speed, not the pool's 1.5x
    assert np.median(ph) == pytest.approx(5.0, abs=0.1)              # host trees: this GPU's rows only
    assert np.allclose(nm.predict(ks)[0], pg, rtol=1e-3)


def test_node_model_learns_a_view_ops_dispatch_from_its_neighbours():
    """A view op between two launching nodes dispatches slower (4.5 us) than one next to another view (2.5 us):
    the context comes from the record's execution order, in training and in prediction alike."""
    from hase.inference.node_model import NodeModel, with_context, launchless
    every = corpus_records()
    # runs of views (dlrm's Squeeze/Unsqueeze) and views between GEMMs (an encoder's Reshapes)
    recs = [every[m] for m in sorted(every) if m.startswith(("dlrm-s0_", "encoder-s0_", "cnn_plain-s0_"))]
    ctx = [k for r in recs for k in with_context(r["kernels"])]
    assert any(launchless(k) for k in ctx) and not launchless({"category": "conv", "ep": "CUDAExecutionProvider"})
    first, last = ctx[0], with_context(recs[0]["kernels"])[-1]
    assert first["ctx_prev_launchless"] == 1.0 and last["ctx_next_launchless"] == 1.0

    def truth(k):
        if not launchless(k):
            return 8.0
        return 4.5 if not (k["ctx_prev_launchless"] or k["ctx_next_launchless"]) else 2.5
    h = np.array([truth(k) for k in ctx])
    assert (h == 4.5).any() and (h == 2.5).any()
    nm = NodeModel().fit(ctx, np.ones(len(ctx)), h, {"n_estimators": 100, "learning_rate": 0.3})
    # a Squeeze between two Relus, then between two views: only the neighbours differ. A Squeeze trains in both
    # contexts (dlrm's runs of views, the encoder's between GEMMs); the first Reshape's shapes are those of the 3
    # Reshapes that train only inside runs of views, so its shape and its context tie (with the axis features
    # the trees took its shape: 2.8-3.8 us over seeds)
    sq = next(k for r in recs for k in r["kernels"] if k["op_type"] == "Squeeze")
    relu = next(k for r in recs for k in r["kernels"] if not launchless(k))
    view = dict(sq)
    _, between_launches = nm.predict([relu, sq, relu])
    _, between_views = nm.predict([view, sq, view])
    assert between_launches[1] == pytest.approx(4.5, abs=0.4) and between_views[1] == pytest.approx(2.5, abs=0.4)


def test_node_model_prices_a_recurrent_node_per_step():
    """An LSTM's time is its steps x a step's time: trained on sequences of 32-256 steps, a 1024-step node is
    predicted about 4x a 256-step one (trees alone cannot extrapolate past what they saw)."""
    from hase.inference.node_model import NodeModel, one_step, recurrent_steps
    recs = corpus_records()
    lstm = next(k for m in sorted(recs) if m.startswith("rnn-") for k in recs[m]["kernels"] if k["op_type"] == "LSTM")

    def at(t, b=1):
        def sh(e):
            return dict(e, shape=[t, b] + list(e["shape"][2:])) if e and len(e.get("shape") or []) >= 3 else e
        return dict(lstm, inputs=[sh(lstm["inputs"][0])] + lstm["inputs"][1:], outputs=[sh(e) for e in lstm["outputs"]])
    others = [k for r in committed_records(6) for k in r["kernels"]]
    train = [at(t, b) for t in (32, 64, 128, 256) for b in (1, 4, 16)] * 4 + others
    per_step_us = 6.0   # a step costs the same whatever the length
    g = np.array([per_step_us * recurrent_steps(k) if k["op_type"] == "LSTM" else 3.0 for k in train])
    nm = NodeModel().fit(train, g, g * 2, {"n_estimators": 60})
    pg, ph = nm.predict([at(256), at(1024)])
    assert pg[1] / pg[0] == pytest.approx(4.0, rel=0.05) and ph[1] / ph[0] == pytest.approx(4.0, rel=0.05)
    assert pg[1] == pytest.approx(per_step_us * recurrent_steps(at(1024)), rel=0.15)
    assert one_step(at(1024))["inputs"][0]["shape"][0] == 1 and recurrent_steps(others[0]) == 1
    # phase 2 counts the whole sequence (its records said 0 FLOPs for LSTM/GRU before): steps x the step's GEMMs
    from hase.ort_analysis.flops import kernel_flops
    k = at(1024, 4)
    full = kernel_flops(k["op_type"], k["type"], k["attributes"], k["inputs"], k["outputs"])
    assert full == recurrent_steps(k) * one_step(k)["flops"] > 0
def test_float16_twins_are_exported_beside_and_outside_the_split(tmp_path):
    """build_corpus dtype=float16: <arch>-fp16_bs..., every float tensor in float16, validated against the float32
    PyTorch model, in the manifest as a 'precision_twin' of its architecture: no split holds it, so no fit trains on it
    and no exam scores it (the GPU job measures it beside its float32 model)."""
    import onnx
    from hase.utils import paths
    run_script([REPO / "model_zoo/build_corpus.py", "--set", "archs=[cnn_mobile-s1]", "--set", "max_configs=1",
                "--set", "dtype=float16"], tmp_path)
    models = tmp_path / "model_zoo" / "models"
    (f,) = [p for p in models.glob("*.onnx")]
    assert f.name.startswith("cnn_mobile-s1-fp16_bs") and paths.model_arch(f.stem) == "cnn_mobile-s1-fp16"
    m = onnx.load(str(f), load_external_data=False)
    assert m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert {t.data_type for t in m.graph.initializer} <= {onnx.TensorProto.FLOAT16, onnx.TensorProto.INT64}
    man = json.loads((models / "corpus_manifest.json").read_text())
    e = man["files"][f.stem]
    assert e["split"] == "precision_twin" and e["twin_of"] == "cnn_mobile-s1" and e["dtype"] == "float16"
    assert 0 <= e["relative_error_cpu"] < 0.05
    split = corpus.load_split()
    assert "cnn_mobile-s1-fp16" not in split.train + split.exam and "cnn_mobile-s1" in split.train + split.exam
    bad = run_script([REPO / "model_zoo/build_corpus.py", "--set", "archs=[cnn_mobile-s1]", "--set",
                      "dtype=int8"], tmp_path, check=False)
    assert bad.returncode == 2 and "dtype must be float32 or float16" in bad.stderr


def test_registry_warns_on_an_unknown_op(tmp_path):
    """An op the registry lacks is named in a warning by phase 2 and still gets a kernel type."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Softsign", ["x"], ["y"])], "g", [x], [y])
    p = tmp_path / "softsign_bs1_1x4.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), p)
    r = run_script([REPO / "ort_analysis/fusion_detector.py", "--device", "cpu", "--model", str(p)], tmp_path)
    assert "Softsign is not in the kernel registry" in r.stderr + r.stdout
    rec = json.loads((tmp_path / "ort_analysis/ort_kernel_record/softsign_bs1_1x4.cpu.json").read_text())
    assert [k["op_type"] for k in rec["kernels"]] == ["Softsign"]


def test_import_corpus_takes_a_labels_only_job(tmp_path):
    """A LABELS_ONLY corpus job packs empty trace tables beside its clean labels: the import keeps the labels (and
    the machine's description from the log), writes no trace table; a folder with neither is one line naming it."""
    import gzip
    import subprocess
    import sys
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    for f in ("trace_sessions.csv.gz", "trace_nodes.csv.gz"):
        (src / f).write_bytes(b"")
    rows = "model,session,e2e_clean_median_ms\nresnet50_bs1_224x224,0,1.34\nresnet50_bs1_224x224,1,1.36\n"
    (src / "clean_sessions.csv.gz").write_bytes(gzip.compress(rows.encode()))
    (src / "log.txt").write_text("stage machine 0\nNVIDIA H200, GPU-x\nstage export 14\nmodels: 1\n")
    run = lambda s, d: subprocess.run([sys.executable, str(REPO / "benchmark/import_corpus.py"), str(s), str(d)],  # noqa: E731
                                      capture_output=True, text=True, timeout=120)
    r = run(src, dest)
    assert r.returncode == 0, r.stderr[-800:]
    got = lzma.decompress((dest / "clean_sessions.csv.xz").read_bytes()).decode()
    assert "1.36" in got and "GPU-x" in (dest / "machine.txt").read_text()
    assert not (dest / "trace_sessions.csv.xz").exists() and not (dest / "trace_nodes.csv.xz").exists()
    (src / "clean_sessions.csv.gz").unlink()
    bad = run(src, tmp_path / "d2")
    assert bad.returncode != 0 and "no trace sessions and no clean labels" in bad.stderr and "Traceback" not in bad.stderr


def test_named_records_are_cut_out_of_the_text_and_equal_a_whole_parse(tmp_path):
    """records_in_file(models=...) parses only the named records (the corpus records are 1.6 GB of JSON): what it
    returns equals the whole file's parse, with default or compact separators, a later shard still wins, a model in
    no file is named in the error, and a file whose records it cannot all locate is parsed whole."""
    from hase.graph_model.dag_critical_path import _named_records, available_records
    rec = lambda m, n: {"model": m, "kernels": [{"id": f"k{n}", "attributes": {"axis": 1}}],  # noqa: E731
                        "edges": [[0, 1]], "note": 'a "quoted" name: "b"'}
    base = tmp_path / "corpus_records.json.xz"
    base.write_bytes(lzma.compress(json.dumps({"a": rec("a", 1), "b": rec("b", 2), "c": rec("c", 3)}).encode()))
    shard = tmp_path / "corpus_records.machine_q.json.xz"
    shard.write_bytes(lzma.compress(json.dumps({"b": rec("b", 9), "d": rec("d", 4)}, separators=(",", ":")).encode()))
    assert _named_records(base, ["a", "c"]) == {"a": rec("a", 1), "c": rec("c", 3)}
    assert _named_records(shard, ["a", "b"]) == {"b": rec("b", 9)}
    whole = records_in_file(base)
    assert records_in_file(base, models=["b", "d", "a"]) == {m: whole[m] for m in ("b", "d", "a")}
    assert whole["b"]["kernels"][0]["id"] == "k9"
    assert available_records(base, ["d", "z"]) == ({"d": whole["d"]}, ["z"])
    with pytest.raises(HaseError, match="no CUDA record for z"):
        records_in_file(base, models=["a", "z"])
    # records it cannot all locate: one without its "model" first, or a nested {"model": ...}: the file is parsed whole
    for other in ({"kernels": [], "edges": []}, dict(rec("e", 5), kernels=[{"id": "k", "attributes": {"model": "x"}}])):
        odd = tmp_path / "odd.json.xz"
        odd.write_bytes(lzma.compress(json.dumps({"a": rec("a", 1), "e": other}).encode()))
        assert _named_records(odd, ["e"]) is None and records_in_file(odd, models=["e"])["e"] == other


def test_import_writes_new_records_as_a_shard_that_readers_merge(tmp_path):
    """A job's records not yet in --records-to land in a shard beside it (X.<dest>.json.xz), never a rewrite of the
    whole file; records_in_file reads the file and its shards, a later shard's record of a model winning."""
    import gzip
    import subprocess
    import sys
    rec = lambda n: {"kernels": [{"id": f"k{n}"}], "edges": []}  # noqa: E731
    base = tmp_path / "recs" / "corpus_records.json.xz"
    base.parent.mkdir()
    base.write_bytes(lzma.compress(json.dumps({"a": rec(1), "b": rec(2)}).encode()))
    before = base.read_bytes()
    src = tmp_path / "src"
    src.mkdir()
    (src / "trace_sessions.csv.gz").write_bytes(b"")
    (src / "trace_nodes.csv.gz").write_bytes(b"")
    (src / "clean_sessions.csv.gz").write_bytes(gzip.compress(b"model,session,e2e_clean_median_ms\nb,0,1.0\n"))
    (src / "machine.txt").write_text("NVIDIA H200\n")
    (src / "records.json.xz").write_bytes(lzma.compress(json.dumps({"b": rec(9), "c": rec(3)}).encode()))
    r = subprocess.run([sys.executable, str(REPO / "benchmark/import_corpus.py"), str(src), str(tmp_path / "machine_q"),
                        "--records-to", str(base)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    shard = base.with_name("corpus_records.machine_q.json.xz")
    assert base.read_bytes() == before and set(json.loads(lzma.decompress(shard.read_bytes()))) == {"c"}
    every = records_in_file(base)
    assert set(every) == {"a", "b", "c"} and every["b"]["kernels"][0]["id"] == "k2"   # b was there: kept
    shard.write_bytes(lzma.compress(json.dumps({"a": rec(7)}).encode()))
    assert records_in_file(base, models=["a"])["a"]["kernels"][0]["id"] == "k7"
    shard.write_bytes(lzma.compress(b"[1]"))
    with pytest.raises(HaseError, match="not a records file"):
        records_in_file(base)


def test_split_sessions_reads_labels_only_machines(tmp_path):
    """An exam measured only by LABELS_ONLY jobs (a GPU with no trace tables) is scored from its clean labels: the
    split keeps the split's models and drops the rest; a glob that matches nothing is one line naming it."""
    import pandas as pd
    from hase.inference.fit_corpus_timeline import split_sessions
    m = tmp_path / "machine_x"
    m.mkdir()
    pd.DataFrame({"model": ["resnet50_bs1_224x224", "resnet50_bs1_224x224", "vgg11_bn_bs1_224x224"],
                  "session": [0, 1, 0], "e2e_clean_median_ms": [1.34, 1.36, 1.0],
                  "clean_calib_host_index_us": [7.0, 7.1, 7.2]}).to_csv(m / "clean_sessions.csv", index=False)
    sessions, nodes, models, dirs, clean = split_sessions([str(tmp_path / "machine_*")], "EXHAUSTIVE", ["resnet50"])
    assert sessions.empty and nodes.empty and models == [] and dirs == []
    assert sorted(clean["e2e_clean_median_ms"]) == [1.34, 1.36] and set(clean["machine"]) == {"machine_x"}
    with pytest.raises(HaseError, match=r"none_\*: file not found"):
        split_sessions([str(tmp_path / "none_*")], "EXHAUSTIVE", ["resnet50"])


def test_anchor_offsets_read_an_exam_machine_against_the_others(tmp_path):
    """score_exam.anchor_offsets: an exam machine whose anchors run 10% slower than on the two other machines reads
    x1.10 (batch 1 too), and the post-hoc scaled score of predictions that were 10% low is then exact."""
    import pandas as pd
    from hase.inference.score_exam import anchor_offsets
    rows = {"machine_a": 1.0, "machine_b": 1.0, "machine_x": 1.1}
    for m, f in rows.items():
        (tmp_path / m).mkdir()
        pd.DataFrame({"model": ["resnet50_bs1_224x224", "resnet50_bs8_224x224", "vit-s2_bs1_56x56"],
                      "session": [0, 0, 0], "e2e_clean_median_ms": [1.4 * f, 2.5 * f, 1.8 * f],
                      "clean_calib_host_index_us": [7.0, 7.0, 7.0]}).to_csv(tmp_path / m / "clean_sessions.csv",
                                                                             index=False)
    d = pd.DataFrame({"model": ["e1", "e2"], "e2e_ms": [2.2, 4.4], "pred_ms": [2.0, 4.0]})
    out = anchor_offsets([str(tmp_path / "machine_*")], ["machine_x"], d)
    row = out["by_machine"]["machine_x"]
    assert row["models"] == 3 and row["median_ratio"] == pytest.approx(1.1) and row["batch1_median_ratio"] == pytest.approx(1.1)
    assert out["offset"] == pytest.approx(1.1) and out["offset_scaled_post_hoc"]["mape_pct"] == pytest.approx(0, abs=1e-9)
    assert anchor_offsets([str(tmp_path / "machine_x")], ["machine_x"], d) == {}   # no other machine: nothing to read


def test_join_exams_adds_a_scored_exam_to_training_and_nothing_else():
    """fit_corpus_timeline join_exams: exam v11's architectures join v11's training split (its traces teach the
    terms); exam v13, frozen before that fit, stays out of it."""
    from hase.inference.fit_corpus_timeline import training_archs
    from hase.utils import paths
    v11 = corpus.load_split()
    assert training_archs(corpus.load_split(), []) == v11.train
    split = corpus.load_split()
    archs = training_archs(split, ["model_zoo/corpus_split.yaml"])
    assert set(archs) == set(v11.train) | set(v11.exam) and len(archs) == len(set(archs))
    assert split.family["hrnet-s0"] == "hrnet"
    v13 = corpus.load_split(paths.REPO / "model_zoo" / "corpus_split_v13.yaml")
    assert not set(archs) & set(v13.exam)
    with pytest.raises(HaseError, match="corpus split file not found"):
        training_archs(corpus.load_split(), ["model_zoo/nope.yaml"])


def test_a_loaded_node_model_predicts_without_xgboost_from_a_cache(tmp_path, monkeypatch):
    """NodeModel.load gives the trees as numpy arrays (CompactForest): the same predictions as the fitted boosters
    (to 1e-3), and a second load reads the arrays cached under HASE_HOME instead of the tree files, so a later
    `hase predict` imports neither xgboost nor scikit-learn (1.45 s -> 0.52 s a call on this 2-core machine)."""
    from hase.inference import node_model
    from hase.inference.node_model import NodeModel
    from hase.training.kernel_predictor import CompactForest
    monkeypatch.setenv("HASE_HOME", str(tmp_path / "home"))
    ks = [k for r in committed_records()[:3] for k in r["kernels"]]
    g = np.array([1.0 + (k.get("flops") or 0) / 1e8 for k in ks])
    nm = NodeModel().fit(ks, g, 5.0 + 0 * g, {"n_estimators": 40})
    nm.save(tmp_path / "nm")
    loaded = NodeModel.load(tmp_path / "nm")
    assert all(isinstance(b, CompactForest) for b in loaded.boosters.values())
    for a, b in zip(nm.predict(ks), loaded.predict(ks)):
        assert np.allclose(a, b, rtol=1e-3, atol=1e-6)

    def no_trees(p):
        raise AssertionError(f"read {p}")
    monkeypatch.setattr(node_model, "_read_booster", no_trees)
    again = NodeModel.load(tmp_path / "nm")             # from the cache
    assert np.array_equal(again.predict(ks)[0], loaded.predict(ks)[0])
    nm.save(tmp_path / "nm")                            # the tree files change: the cache is not used
    with pytest.raises(AssertionError, match="read"):
        NodeModel.load(tmp_path / "nm")


def test_an_unseen_op_with_a_trained_kin_is_priced_as_the_kin():
    """Less runs ORT's binary-elementwise template like Greater: with Greater trained, a Less node
    is predicted exactly as a Greater node of the same shapes, named in kin_types, and not counted as fallback;
    with no kin trained it stays unseen (generic features), and a type outside KIN is never given a kin. The
    committed H200 node model has trained a Less since exam v16 joined its training (session 32): it is made one that
    never saw one by dropping its type code (the trees are untouched; only the code's lookup goes)."""
    from hase.inference.node_model import NodeModel, KIN
    nm = NodeModel.load(REPO / "inference" / "results" / "nvidia-h200" / "corpus" / "node_model")
    nm.type_codes = {k: v for k, v in nm.type_codes.items() if k != "Less"}
    assert "Greater" in nm.type_codes and "Less" not in nm.type_codes
    recs = committed_records(60)
    base = next(k for r in recs for k in r["kernels"] if k["type"] == "Add")
    gt = dict(base, type="Greater", op_type="Greater", id="g", category="elementwise")
    le = dict(base, type="Less", op_type="Less", id="le", category="other")   # as records file it
    odd = dict(base, type="NoSuchOp", op_type="NoSuchOp", id="x")
    (g_gt, h_gt), (g_le, h_le) = nm.predict([gt]), nm.predict([le])   # alone: a node's neighbours are features
    assert g_le[0] == pytest.approx(g_gt[0]) and h_le[0] == pytest.approx(h_gt[0])
    g = np.concatenate([g_le, g_gt])
    assert nm.kin_types([le, odd]) == {"Less": "Greater"}
    assert nm.unseen_types([le, odd]) == ["NoSuchOp"] and list(nm.unseen([le, odd])) == [False, True]
    assert nm.fallback_share([le, gt], g[:2]) == 0.0
    bare = NodeModel({"Add": 0}, nm.boosters, nm.manifest)   # no comparison op trained: no kin to lend
    assert bare.unseen_types([le]) == ["Less"] and "NoSuchOp" not in KIN


def test_a_recurrent_kin_is_still_priced_per_step():
    """LSTM priced as GRU (both cuDNN recurrent kernels) keeps the per-step law: twice the steps, about twice the time.
    The committed node models have both since exam v13 joined the H100's training (rnn's LSTMs): the model is made
    one that never saw an LSTM by dropping its type code (the trees are untouched; only the code's lookup goes)."""
    from hase.inference.node_model import NodeModel
    nm = NodeModel.load(REPO / "inference" / "results" / "nvidia-h100" / "corpus" / "node_model")
    nm.type_codes = {k: v for k, v in nm.type_codes.items() if k != "LSTM"}
    assert "GRU" in nm.type_codes and "LSTM" not in nm.type_codes
    recs = corpus_records()
    gru = next(k for r in recs.values() for k in r["kernels"] if k["type"] == "GRU")
    lstm = dict(gru, type="LSTM", op_type="LSTM", id="lstm")
    assert nm.kin_types([lstm]) == {"LSTM": "GRU"} and nm.unseen_types([lstm]) == []
    x = lstm["inputs"][0]   # [T, N, features] (layout 0): twice the time steps
    longer = dict(lstm, inputs=[dict(x, shape=[2 * x["shape"][0], *x["shape"][1:]]), *lstm["inputs"][1:]])
    g1, _ = nm.predict([lstm])
    g2, _ = nm.predict([longer])
    assert 1.5 < g2[0] / g1[0] < 2.5


def test_kan_bspline_bases_are_a_partition_of_unity_and_vqvae_snaps_to_its_codes():
    """The exam v12 candidate families compute what they say: a B-spline basis of order k on a uniform grid sums to
    1 inside [-1, 1] (Cox-de Boor written out in ONNX ops), and a VQ-VAE's quantizer returns rows of its codebook."""
    import torch
    spec = dict(arch_spec("kan", 1))
    kan = build_model(spec, 12)
    layer = [m for m in kan if hasattr(m, "basis")][0]
    x = torch.linspace(-0.999, 0.999, 101)[:, None].expand(101, 12)
    b = layer.basis(x)
    assert b.shape == (101, 12, spec["grid"] + spec["order"])
    assert torch.allclose(b.sum(-1), torch.ones(101, 12), atol=1e-5) and (b >= -1e-6).all()
    vq_spec = arch_spec("vqvae", 2)
    vq = build_model(vq_spec, 64)[1]
    z = torch.randn(2, vq_spec["code_dim"], 4, 4)
    q = vq(z).permute(0, 2, 3, 1).reshape(-1, vq_spec["code_dim"])
    e = vq.codebook.detach()
    hit = (q.detach()[:, None, :] == e[None]).all(-1)           # every output vector is a code, exactly (a Gather)
    assert (hit.sum(-1) == 1).all()
    f = z.permute(0, 2, 3, 1).reshape(-1, vq_spec["code_dim"])
    near = ((f[:, None, :] - e[None]) ** 2).sum(-1).argmin(-1)
    assert torch.equal(hit.float().argmax(-1), near)            # ... the nearest one to its input


def test_exam_v13_families_compute_what_they_say():
    """nascell: a cell holds exactly its drawn non-'none' edges; neuralode: RK4 converges faster than Euler as the
    steps grow (the same weights: steps and solver draw no parameters); gmlp: its gating mixes tokens (a change in
    one patch moves every token's output)."""
    import torch
    spec = arch_spec("nascell", 4)
    cell = [m for m in build_model(spec, 32).modules() if type(m).__name__ == "Cell"][0]
    assert set(cell.ops) == {e for e, o in spec["edges"].items() if o != "none"}
    ode = dict(arch_spec("neuralode", 3))
    x = torch.randn(4, 16)
    out = {}
    for solver in ("euler", "rk4"):
        for steps in (2, 4, 64):
            m = build_model({**ode, "solver": solver, "steps": steps}, 16)
            with torch.no_grad():
                out[solver, steps] = m(x)
    err = {k: (v - out[k[0], 64]).abs().max().item() for k, v in out.items() if k[1] < 64}
    assert err["rk4", 4] < err["rk4", 2] and err["euler", 4] < err["euler", 2]
    assert err["rk4", 2] < err["euler", 2] / 4 and err["rk4", 4] < err["euler", 4] / 4
    g = arch_spec("gmlp", 1)
    m = build_model(g, 64)
    block = m.blocks[0]
    t = torch.randn(1, (64 // g["patch"]) ** 2, g["dim"])
    t2 = t.clone()
    t2[0, 0] += torch.randn(g["dim"])   # not a constant: the LayerNorm would take it out
    with torch.no_grad():
        moved = (block(t2) - block(t)).abs().amax(-1)[0]
    assert (moved[1:] > 1e-6).all()       # tokens other than the changed one moved: the gating mixes tokens


def test_exam_v13_is_a_new_exam_over_v11s_training_split():
    """corpus_split_v13.yaml: v11's training split unchanged, an exam disjoint from it and from exams v11 and v12,
    three held-out families no other split names (exam v12's held-out families get fresh seeds), >= 6 named models."""
    from hase.utils import paths
    v11 = corpus.load_split()
    v12, v13 = (corpus.load_split(paths.REPO / "model_zoo" / f"corpus_split_v{n}.yaml") for n in (12, 13))
    assert set(v13.train) == set(v11.train) and not set(v13.exam) & (set(v11.exam) | set(v12.exam))
    assert not set(v13.exam) & set(v13.train)
    held = set(v13.held_out_families)
    seen = {s.family[a] for s in (v11, v12) for a in s.train + s.exam}
    assert len(held) >= 3 and not held & seen
    assert sum(v13.exam_group[a] == "named" for a in v13.exam) >= 6
    assert {v13.family[a] for a in v13.exam if v13.exam_group[a] == "fresh seed"} == seen - {"named"}
    assert sum(not v13.is_cnn(a) for a in v13.exam) >= 0.4 * len(v13.exam)


def test_exam_v14_is_a_new_exam_over_v11s_training_split():
    """corpus_split_v14.yaml: v11's training split unchanged, an exam disjoint from it and from exams v11-v13 (the
    H100's exam v13, scored and read, may join the H100's training), three held-out families no other split names,
    fresh seeds of every family seen before, >= 6 named models in no other split, >= 40% not CNNs."""
    from hase.utils import paths
    v11 = corpus.load_split()
    v12, v13, v14 = (corpus.load_split(paths.REPO / "model_zoo" / f"corpus_split_v{n}.yaml") for n in (12, 13, 14))
    assert set(v14.train) == set(v11.train) and not set(v14.exam) & (set(v11.exam) | set(v12.exam) | set(v13.exam))
    assert not set(v14.exam) & set(v14.train)
    held = set(v14.held_out_families)
    seen = {s.family[a] for s in (v11, v12, v13) for a in s.train + s.exam}
    assert held == {"xcit", "stn", "aft"} and not held & seen
    assert {v14.family[a] for a in v14.exam if v14.exam_group[a] == "fresh seed"} == seen - {"named"}
    named = [a for a in v14.exam if v14.exam_group[a] == "named"]
    assert len(named) >= 6 and not set(named) & {a for s in (v11, v12, v13) for a in s.train + s.exam}
    assert sum(not v14.is_cnn(a) for a in v14.exam) >= 0.4 * len(v14.exam)
    assert len(v14.exam) == 131


def test_exam_v12_is_a_new_exam_over_v11s_training_split(tmp_path):
    """corpus_split_v12.yaml: v11's training split unchanged (train: from), an exam disjoint from it and from exam v11
    (models measured for v11 judge nothing here), three held-out families no other split names, >= 6 named models."""
    from hase.utils import paths
    v11, v12 = corpus.load_split(), corpus.load_split(paths.REPO / "model_zoo" / "corpus_split_v12.yaml")
    assert set(v12.train) == set(v11.train) and not set(v12.exam) & set(v11.exam)
    assert not set(v12.exam) & set(v12.train)
    held = set(v12.held_out_families)
    assert len(held) >= 3 and not held & {v11.family[a] for a in v11.train + v11.exam}
    assert sum(v12.exam_group[a] == "named" for a in v12.exam) >= 6
    assert {v12.family[a] for a in v12.exam if v12.exam_group[a] == "fresh seed"} == \
        {v11.family[a] for a in v11.train + v11.exam if v11.family[a] != "named"}   # every family v11 knows
    bad = paths.REPO / "model_zoo" / "corpus_split_v12.yaml"
    text = bad.read_text().replace("from: model_zoo/corpus_split.yaml", "from: model_zoo/nope.yaml")
    f = tmp_path / "split.yaml"
    f.write_text(text)
    with pytest.raises(HaseError, match="from 'model_zoo/nope.yaml': corpus split file not found"):
        corpus.load_split(f)


@pytest.mark.parametrize("fam,seed", [("xcit", 1), ("stn", 1), ("stn", 0), ("aft", 0), ("aft", 7)])
def test_v14_family_exports_runs_and_has_its_output_shape(tmp_path, fam, seed):
    """The exam v14 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, the ops that define each family in the graph; xcit: the attention map is D_h x D_h, so its Softmax runs
    over D_h, not over the tokens; stn: GridSample after a MatMul grid (no AffineGrid at opset 17); aft-simple has no
    position: permuting the tokens leaves the output as it was; aft-full's S x S position biases do not."""
    import onnx
    size, batch = {"xcit": 96, "stn": 64, "aft": 32}[fam], 2
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, batch)
    graph = onnx.shape_inference.infer_shapes(onnx.load(str(out))).graph
    ops = {n.op_type for n in graph.node}
    assert y.shape == (batch, spec["classes"])
    _matches_pytorch(model, x, y)
    if fam == "xcit":
        assert shape == (batch, 3, size, size)
        dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.value_info}
        soft = [dims.get(n.output[0]) for n in graph.node if n.op_type == "Softmax"]
        dh = spec["dim"] // spec["heads"]
        assert soft and all(d and d[-2:] == [dh, dh] for d in soft), soft
        assert ("Conv" in ops) and (spec["lpi"] == any(n.op_type == "Conv" and any(a.name == "group" and a.i > 1
                                                                                    for a in n.attribute)
                                                       for n in graph.node))
    elif fam == "stn":
        assert shape == (batch, 3, size, size)
        assert "GridSample" in ops and "AffineGrid" not in ops and "MatMul" in ops
        assert sum(n.op_type == "GridSample" for n in graph.node) == spec["transformers"]
    else:
        assert shape == (batch, size, spec["dim"])
        assert {"Sigmoid", "Exp" if spec["variant"] == "full" else "Softmax"} <= ops
        perm = np.random.default_rng(1).permutation(size)
        y2 = sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(x[:, perm])})[0]
        assert np.allclose(y2, y, rtol=1e-4, atol=1e-5) == (spec["variant"] == "simple")


def test_exam_v15_is_a_new_exam_over_v11s_training_split():
    """corpus_split_v15.yaml: v11's training split unchanged, an exam disjoint from it and from exams v11-v14 (the
    H100's exams v13 and v14, scored and read, may join the H100's training), three held-out families no other split
    names, fresh seeds of every family seen before, >= 6 named models in no other split, >= 40% not CNNs."""
    from hase.utils import paths
    v11 = corpus.load_split()
    older = [corpus.load_split(paths.REPO / "model_zoo" / f"corpus_split_v{n}.yaml") for n in (12, 13, 14)]
    v15 = corpus.load_split(paths.REPO / "model_zoo" / "corpus_split_v15.yaml")
    assert set(v15.train) == set(v11.train) and not set(v15.exam) & set(v15.train)
    assert not set(v15.exam) & {a for s in [v11, *older] for a in s.exam}
    held = set(v15.held_out_families)
    seen = {s.family[a] for s in [v11, *older] for a in s.train + s.exam}
    assert held == {"res2net", "hourglass", "retnet"} and not held & seen
    assert {v15.family[a] for a in v15.exam if v15.exam_group[a] == "fresh seed"} == seen - {"named"}
    named = [a for a in v15.exam if v15.exam_group[a] == "named"]
    assert len(named) >= 6 and not set(named) & {a for s in [v11, *older] for a in s.train + s.exam}
    assert sum(not v15.is_cnn(a) for a in v15.exam) >= 0.4 * len(v15.exam)
    assert len(v15.exam) == 137


@pytest.mark.parametrize("fam,seed", [("res2net", 0), ("res2net", 4), ("hourglass", 8), ("retnet", 2),
                                      ("retnet", 0)])
def test_v15_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v15 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure in the graph; res2net: one Split a bottleneck into `scale` slices
    and scale - 1 3x3 convs on them; hourglass: [B, joints, H/4, W/4] heatmaps, a nearest Resize per level and
    stack, BatchNormalization left before convs (pre-activation: nothing to fold into); retnet: retention is causal
    (in one block, moving the last token moves only the last output) and has no Softmax."""
    import onnx
    size = {"res2net": 96, "hourglass": 128, "retnet": 32}[fam]
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    _matches_pytorch(model, x, y)
    if fam == "res2net":
        assert y.shape == (2, spec["classes"])
        blocks = sum(spec["blocks"])
        assert ops.count("Split") == blocks
        convs_3x3 = [n for n in graph.node if n.op_type == "Conv"
                     and [a.ints for a in n.attribute if a.name == "kernel_shape"][0] == [3, 3]]
        assert len(convs_3x3) == blocks * (spec["scale"] - 1) + (spec["stem"] == 3)
        assert ("Sigmoid" in ops) == spec["se"]
    elif fam == "hourglass":
        assert y.shape == (2, spec["joints"], size // 4, size // 4)
        assert ops.count("Resize") == spec["stacks"] * spec["depth"] and "BatchNormalization" in ops
    else:
        import torch
        assert y.shape == (2, spec["classes"]) and "Softmax" not in ops and "InstanceNormalization" in ops
        blk = model.blocks[0]
        with torch.no_grad():
            t = torch.from_numpy(x)
            a = blk(t, model.decay)
            t2 = t.clone()
            t2[:, -1] += 1.0
            b = blk(t2, model.decay)
        assert torch.allclose(a[:, :-1], b[:, :-1], atol=1e-5) and not torch.allclose(a[:, -1], b[:, -1])


def test_an_architecture_that_fails_to_build_is_listed_in_the_manifest(tmp_path):
    """build_corpus on one architecture that cannot be built (no torchvision model of that name): the run goes on,
    and the manifest still says which failed and why, though nothing exported."""
    r = run_script([REPO / "model_zoo/build_corpus.py", "--set", "archs=[no_such_net]", "--set", "max_configs=1",
                    "--set", "workers=1"], tmp_path, check=False)
    man = json.loads((tmp_path / "model_zoo/models/corpus_manifest.json").read_text())
    assert set(man["failed"]) == {"no_such_net"} and man["failed"]["no_such_net"] and not man["files"], (r.stderr, man)


def test_an_exam_in_chunks_covers_every_architecture_once_and_a_bad_chunk_is_one_line(tmp_path):
    """build_corpus chunk=i/n (an exam spread over n machines): the n parts are disjoint, together the whole exam, each
    within one architecture of the others in size and each mixing families; chunk 5/4 or 'half' is one line naming
    `chunk` and a non-zero exit, before anything is exported."""
    from hase.model_zoo.build_corpus import chunk_of
    split = corpus.load_split(REPO / "model_zoo/corpus_split_v24.yaml")
    parts = [chunk_of(split.exam, f"{i}/4") for i in range(1, 5)]
    assert sorted(a for p in parts for a in p) == sorted(split.exam)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert all(len({split.family[a] for a in p}) >= 10 for p in parts)
    assert chunk_of(split.exam, "") == list(split.exam)
    from hase.utils.errors import HaseError
    with pytest.raises(HaseError, match="chunk: '5/4': i must be between 1 and n"):
        chunk_of(split.exam, "5/4")
    r = run_script([REPO / "model_zoo/build_corpus.py", "--set", "split=exam", "--set",
                    "split_file=model_zoo/corpus_split_v24.yaml", "--set", "chunk=half"], tmp_path, check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: chunk: must be i/n"), r.stderr
    assert not (tmp_path / "model_zoo/models/corpus_manifest.json").exists()


def _assert_a_new_exam(new, before: list, held_out: set, n_exam: int):
    """What every exam since v16 promises against the splits before it: disjoint from its own training split and
    from every earlier split by architecture and by (family, seed); exactly `held_out` held out whole, no earlier
    split naming them; fresh seeds of every family seen before; >= 6 named models in no earlier split, half of them
    CNNs; >= 40% not CNNs overall; n_exam architectures."""
    assert not set(new.exam) & set(new.train)
    everything = {a for s in before for a in s.train + s.exam}
    assert not set(new.exam) & everything
    fam_seed = lambda s, archs: {(s.family[a], a.rsplit("-s", 1)[1]) for a in archs if s.family[a] != "named"}  # noqa
    assert not fam_seed(new, new.exam) & {fs for s in before for fs in fam_seed(s, s.train + s.exam)}
    held = set(new.held_out_families)
    seen = {s.family[a] for s in before for a in s.train + s.exam}
    assert held == held_out and not held & seen
    assert {new.family[a] for a in new.exam if new.exam_group[a] == "fresh seed"} == seen - {"named"}
    named = [a for a in new.exam if new.exam_group[a] == "named"]
    assert len(named) >= 6 and not set(named) & everything
    assert sum(not new.is_cnn(a) for a in named) == len(named) // 2
    assert sum(not new.is_cnn(a) for a in new.exam) >= 0.4 * len(new.exam)
    assert len(new.exam) == n_exam


@pytest.mark.parametrize("version,joined,trains,families,held_out,n_exam", [
    # v16: res2net, hourglass and retnet (exam v15's held-out families) train now
    (16, (15,), {"res2net-s0", "hourglass-s8", "retnet-s4", "timm-skresnet34"},
     {"tcn-s15001": "tcn", "timm-fastvit_mci0": "named"}, {"convmixer", "wavenet", "t5enc"}, 143),
    # v17: convmixer, wavenet and t5enc train now
    (17, (15, 16), {"convmixer-s0", "wavenet-s8", "t5enc-s4", "retnet-s4", "timm-selecsls60", "ssm-s16001"},
     {"t5enc-s3": "t5enc", "timm-gcvit_xtiny": "named"}, {"llama", "maxvit", "focalnet"}, 149),
    # v18: llama, maxvit and focalnet train now
    (18, (15, 16, 17), {"llama-s0", "maxvit-s8", "focalnet-s4", "t5enc-s17001", "timm-efficientvit_m3"},
     {"levit-s3": "levit", "timm-dpn48b": "named"}, {"levit", "poolformer", "mobilevit"}, 155),
    # v19: levit, poolformer and mobilevit train now
    (19, (15, 16, 17, 18), {"levit-s0", "poolformer-s8", "mobilevit-s4", "focalnet-s18001", "timm-dpn48b",
                            "timm-swinv2_cr_tiny_224"},
     {"resmlp-s3": "resmlp", "ghostnet-s8": "ghostnet", "timm-fasternet_t1": "named"}, {"resmlp", "ghostnet"}, 152),
    # v20: resmlp and ghostnet train now
    (20, (15, 16, 17, 18, 19), {"resmlp-s0", "ghostnet-s8", "levit-s19001", "timm-fasternet_t1",
                                "timm-eva02_small_patch14_224", "timm-dpn48b"},
     {"hardnet-s3": "hardnet", "nystromformer-s8": "nystromformer", "ghostnet-s20001": "ghostnet",
      "timm-nest_small": "named"}, {"hardnet", "nystromformer"}, 156),
    # v21: hardnet and nystromformer train now
    pytest.param(21, (15, 16, 17, 18, 19, 20), {"hardnet-s0", "nystromformer-s8", "ghostnet-s20001", "timm-nest_small",
                                                "timm-inception_v4", "resmlp-s20000"},
                 {"rednet-s3": "rednet", "bigbird-s8": "bigbird", "hardnet-s21001": "hardnet",
                  "nystromformer-s21000": "nystromformer", "timm-xcit_small_12_p16_224": "named"},
                 {"rednet", "bigbird"}, 160, id="v21"),
    # v22: rednet and bigbird train now
    pytest.param(22, (15, 16, 17, 18, 19, 20, 21), {"rednet-s0", "bigbird-s8", "hardnet-s21001", "hardnet-s0",
                                                    "timm-xcit_small_12_p16_224", "timm-inception_resnet_v2"},
                 {"dgcnn-s3": "dgcnn", "deformattn-s8": "deformattn", "rednet-s22001": "rednet",
                  "bigbird-s22000": "bigbird", "pointnet-s22000": "pointnet", "timm-swiftformer_l1": "named"},
                 {"dgcnn", "deformattn"}, 164, id="v22"),
    # v23: dgcnn and deformattn train now
    pytest.param(23, (15, 16, 17, 18, 19, 20, 21, 22), {"dgcnn-s0", "deformattn-s8", "pointnet-s22000", "rednet-s22001",
                                                        "timm-swiftformer_l1", "timm-hrnet_w18",
                                                        "timm-efficientnet_cc_b0_4e"},
                 {"condconv-s3": "condconv", "tabnet-s8": "tabnet", "dgcnn-s23001": "dgcnn",
                  "deformattn-s23000": "deformattn", "fttransformer-s23000": "fttransformer",
                  "timm-lowformer_b1": "named"},
                 {"condconv", "tabnet"}, 168, id="v23"),
    # v24: condconv and tabnet train now
    pytest.param(24, (15, 16, 17, 18, 19, 20, 21, 22, 23), {"condconv-s0", "tabnet-s8", "dgcnn-s23001",
                                                            "deformattn-s23000", "timm-lowformer_b1",
                                                            "timm-tresnet_l", "rednet-s0"},
                 {"roihead-s3": "roihead", "sinkhorn-s8": "sinkhorn", "condconv-s24001": "condconv",
                  "tabnet-s24000": "tabnet", "ssm-s24000": "ssm", "timm-davit_base": "named"},
                 {"roihead", "sinkhorn"}, 172, id="v24"),
    # v25: roihead and sinkhorn train now
    pytest.param(25, (15, 16, 17, 18, 19, 20, 21, 22, 23, 24), {"roihead-s0", "sinkhorn-s8", "condconv-s24001",
                                                                "tabnet-s24000", "timm-davit_base", "rednet-s0"},
                 {"nmsdet-s3": "nmsdet", "roihead-s25001": "roihead", "sinkhorn-s25000": "sinkhorn",
                  "ssm-s25000": "ssm", "timm-deit_base_patch16_224": "named"},
                 {"nmsdet"}, 167, id="v25")])
def test_exam_is_a_new_exam_over_v11s_training_and_the_joined_exams(version, joined, trains, families, held_out,
                                                                    n_exam):
    """corpus_split_v<N>.yaml (N = 16-25): v11's training split plus the joined exams' architectures (train:
    join_exams), an exam disjoint from it and from every earlier split by architecture and by (family, seed), the
    held-out families (three; v19-v24 two; v25 one) no other split names, fresh seeds of every family seen before,
    >= 6 named models in no other split, half of them CNNs, >= 40% not CNNs overall."""
    from hase.utils import paths
    v11 = corpus.load_split()
    older = {n: corpus.load_split(paths.REPO / "model_zoo" / f"corpus_split_v{n}.yaml") for n in range(12, version)}
    new = corpus.load_split(paths.REPO / "model_zoo" / f"corpus_split_v{version}.yaml")
    assert set(new.train) == set(v11.train).union(*(older[n].exam for n in joined))
    assert len(new.train) == len(set(new.train))
    assert trains <= set(new.train)
    assert all(new.family[a] == f for a, f in families.items())
    _assert_a_new_exam(new, [v11, *older.values()], held_out, n_exam)


def test_join_exams_in_a_split_file_trains_the_joined_exam(tmp_path):
    """A split's train: {from, join_exams}: the joined exam's architectures train, so an exam that names one of them
    is refused, and a joined file that does not exist is named."""
    d = yaml.safe_load((REPO / "model_zoo/corpus_split_v16.yaml").read_text())
    d["exam"]["fresh_seeds"]["retnet"] = {"seeds": [[0, 1]]}          # retnet-s0: exam v15's, trains in v16
    bad = tmp_path / "split.yaml"
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(HaseError, match="both splits"):
        corpus.load_split(bad)
    d = yaml.safe_load((REPO / "model_zoo/corpus_split_v16.yaml").read_text())
    d["train"]["join_exams"] = ["model_zoo/nope.yaml"]
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(HaseError, match="join_exams 'model_zoo/nope.yaml'"):
        corpus.load_split(bad)


@pytest.mark.parametrize("fam,seed", [("convmixer", 5), ("convmixer", 9), ("wavenet", 10), ("wavenet", 4),
                                      ("t5enc", 3), ("t5enc", 7)])
def test_v16_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v16 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure in the graph; convmixer: a patch conv of stride = patch, then per
    block one depthwise kxk conv with 'same' pads and one 1x1 conv, each followed by GELU and a BatchNormalization
    left in the graph (nothing before it to fold into); wavenet: [B, out, T], groups 1 everywhere, one Pad and one
    dilated conv per layer (dilations doubling within a cycle), and causal (moving the last step moves only the
    last output step); t5enc: [B, T, D], one Softmax per block, no LayerNormalization, Sin or Cos, the bias table
    Gathered once (shared) or once per block, and Toeplitz bucket ids (a function of key - query only)."""
    import onnx
    size = {"convmixer": 96, "wavenet": 1024, "t5enc": 64}[fam]
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    attr = lambda n, k: next((list(a.ints) if a.ints else a.i for a in n.attribute if a.name == k), None)  # noqa
    convs = [n for n in graph.node if n.op_type == "Conv"]
    _matches_pytorch(model, x, y)
    if fam == "convmixer":
        d, k, p, depth = spec["dim"], spec["k"], spec["patch"], spec["depth"]
        assert y.shape == (2, spec["classes"])
        assert attr(convs[0], "kernel_shape") == [p, p] and attr(convs[0], "strides") == [p, p]
        dw = [n for n in convs if attr(n, "group") == d]
        assert len(dw) == depth and all(attr(n, "kernel_shape") == [k, k] and attr(n, "pads") == [k // 2] * 4
                                        for n in dw)
        assert len(convs) == 1 + 2 * depth and ops.count("BatchNormalization") == 1 + 2 * depth
        assert ops.count("Erf") == 1 + 2 * depth and "Pad" not in ops
    elif fam == "wavenet":
        n = spec["cycles"] * spec["layers"]
        assert y.shape == (2, spec["out_ch"], size)
        assert all(attr(c, "group") in (None, 1) for c in convs)
        assert len(convs) == 2 + 3 * n and ops.count("Pad") == n
        dil = [attr(c, "dilations")[0] for c in convs if attr(c, "kernel_shape") == [spec["k"]]]
        assert dil == [2 ** (j % spec["layers"]) for j in range(n)]
        x2 = x.copy()
        x2[..., -1] += 1.0
        y2 = sess.run(None, {sess.get_inputs()[0].name: x2})[0]
        assert np.allclose(y2[..., :-1], y[..., :-1], rtol=1e-4, atol=1e-5)
        assert not np.allclose(y2[..., -1], y[..., -1], rtol=1e-4, atol=1e-5)
    else:
        depth = spec["depth"]
        assert y.shape == (2, size, spec["dim"])
        assert ops.count("Softmax") == depth and not {"LayerNormalization", "Sin", "Cos"} & set(ops)
        assert ops.count("Gather") == (depth if spec["bias_per_layer"] else 1)
        assert ops.count("ReduceMean") == 2 * depth + 1           # RMSNorm written out: two a block and a final one
        ids = model.buckets.numpy()
        assert ids.shape == (size, size) and (ids[1:, 1:] == ids[:-1, :-1]).all()
        assert ids.min() == 0 and ids.max() < spec["buckets"] and ids[0, 1] != ids[1, 0]


@pytest.mark.parametrize("fam,seed", [("llama", 3), ("llama", 0), ("maxvit", 1), ("maxvit", 4), ("focalnet", 11),
                                      ("focalnet", 3)])
def test_v17_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v17 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; llama: [B, T, D or vocab], causal (moving the last step moves
    only the last output step), one Softmax per block unless SDPA fused it away, no LayerNormalization, rotary
    tables as constants (no Sin or Cos in the graph), grouped-query heads expanded when there are fewer key/value
    heads; maxvit: two attention partitions per block (one Softmax each), a depthwise 3x3 conv per block, a stride-2
    one first in each stage, the bias table Gathered when it has one; focalnet: per block `levels` depthwise convs of
    kernel k0 + 2 l and one 1x1 modulator conv, no Softmax."""
    import onnx
    size = {"llama": 32, "maxvit": None, "focalnet": 128}[fam] or arch_spec(fam, seed)["configs"][0]["size"]
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    attr = lambda n, k: next((list(a.ints) if a.ints else a.i for a in n.attribute if a.name == k), None)  # noqa
    convs = [n for n in graph.node if n.op_type == "Conv"]
    _matches_pytorch(model, x, y)
    if fam == "llama":
        depth = spec["depth"]
        assert y.shape == (2, size, spec["vocab"] or spec["dim"])
        assert not {"LayerNormalization", "Sin", "Cos", "Conv"} & set(ops)
        assert ops.count("Softmax") == depth
        if spec["kv_heads"] < spec["heads"]:
            assert ops.count("Expand") >= 2 * depth
        x2 = x.copy()
        x2[:, -1] += 1.0
        y2 = sess.run(None, {sess.get_inputs()[0].name: x2})[0]
        assert np.allclose(y2[:, :-1], y[:, :-1], rtol=1e-4, atol=1e-5)
        assert not np.allclose(y2[:, -1], y[:, -1], rtol=1e-4, atol=1e-5)
    elif fam == "maxvit":
        blocks = sum(spec["depths"])
        assert y.shape == (2, spec["classes"])
        assert ops.count("Softmax") == 2 * blocks
        dw = [n for n in convs if attr(n, "kernel_shape") == [3, 3] and (attr(n, "group") or 1) > 1]
        assert len(dw) == blocks and sum(attr(n, "strides") == [2, 2] for n in dw) == spec["stages"]
        assert (ops.count("Gather") >= 2 * blocks) == spec["rel_bias"]
    else:
        blocks, L = sum(spec["depths"]), spec["levels"]
        assert y.shape == (2, spec["classes"]) and "Softmax" not in ops
        dw = [n for n in convs if (attr(n, "group") or 1) > 1]
        assert sorted(attr(n, "kernel_shape")[0] for n in dw) == sorted(
            [spec["k0"] + 2 * lv for lv in range(L)] * blocks)
        assert sum(attr(n, "kernel_shape") == [1, 1] for n in convs) == blocks


@pytest.mark.parametrize("fam,seed", [("levit", 0), ("levit", 3), ("poolformer", 1), ("poolformer", 4),
                                      ("mobilevit", 2), ("mobilevit", 5)])
def test_v18_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v18 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; levit: one Softmax per attention (the blocks' and two shrinking
    ones), each adding a bias Gathered from its table by constant ids, Linear + BatchNorm everywhere (3 per
    attention, 2 per MLP, 1 at the head; the stem's fold into its 4 convs), Hardswish, no LayerNormalization; poolformer: per block two
    GroupNorms (InstanceNormalization in the graph) and an AvgPool of kernel pool_k minus its input, no Softmax;
    mobilevit: one Softmax per transformer layer unless SDPA fused it, a depthwise 3x3 conv per MV2 block (3 + 3), a
    Concat fusing each of the 3 MobileViT blocks."""
    import onnx
    size = {"levit": 128, "poolformer": 128, "mobilevit": 128}[fam]
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    attr = lambda n, k: next((list(a.ints) if a.ints else a.i for a in n.attribute if a.name == k), None)  # noqa
    convs = [n for n in graph.node if n.op_type == "Conv"]
    _matches_pytorch(model, x, y)
    assert y.shape == (2, spec["classes"])
    if fam == "levit":
        n_attn = sum(spec["depths"]) + 2
        assert ops.count("Softmax") == n_attn and ops.count("Gather") >= n_attn
        assert ops.count("BatchNormalization") == 1 + 3 * n_attn + 2 * n_attn   # the stem's fold into its convs
        assert "HardSwish" in ops and "LayerNormalization" not in ops and len(convs) == 4
    elif fam == "poolformer":
        blocks = sum(spec["depths"])
        assert ops.count("InstanceNormalization") == 2 * blocks + 1 and "Softmax" not in ops
        pools = [n for n in graph.node if n.op_type == "AveragePool"]
        assert len(pools) == blocks and all(attr(n, "kernel_shape") == [spec["pool_k"]] * 2 for n in pools)
        assert ops.count("Sub") >= blocks
    else:
        layers = sum(spec["vit_depths"])
        if spec["attn"] == "manual":
            assert ops.count("Softmax") == layers
        dw = [n for n in convs if (attr(n, "group") or 1) > 1]
        assert len(dw) == 6 and all(attr(n, "kernel_shape") == [3, 3] for n in dw)
        assert ops.count("Concat") >= 3 and ops.count("LayerNormalization") == 2 * layers + 3


@pytest.mark.parametrize("fam,seed", [("resmlp", 1), ("resmlp", 3), ("ghostnet", 1), ("ghostnet", 2)])
def test_v19_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v19 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; resmlp: one patch conv, no Softmax and no normalization by
    statistics (no LayerNormalization, one ReduceMean: the token mean), per block 3 MatMuls (the cross-patch Linear
    and the channel MLP), one Erf (GELU) and 6 Muls (two Affines, two layer scales, GELU's two), two Transposes per
    block around the cross-patch Linear ('linear') or none (the weight MatMul'ed from the left, 'matmul');
    ghostnet: per bottleneck two ghost modules (two Concats, each a 1x1 conv and a stride-1 depthwise 3x3 conv), a
    depthwise stride-2 conv on the main path and on the shortcut of each of the 4 striding stages, one HardSigmoid
    per squeeze-and-excite block, no Softmax."""
    import onnx
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, 128, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    attr = lambda n, k: next((list(a.ints) if a.ints else a.i for a in n.attribute if a.name == k), None)  # noqa
    convs = [n for n in graph.node if n.op_type == "Conv"]
    _matches_pytorch(model, x, y)
    assert y.shape == (2, spec["classes"]) and "Softmax" not in ops
    if fam == "resmlp":
        depth, p = spec["depth"], spec["patch"]
        assert len(convs) == 1 and attr(convs[0], "kernel_shape") == attr(convs[0], "strides") == [p, p]
        assert "LayerNormalization" not in ops and ops.count("ReduceMean") == 1
        assert ops.count("MatMul") == 3 * depth and ops.count("Erf") == depth and ops.count("Mul") == 6 * depth + 1
        assert ops.count("Transpose") == 1 + (2 * depth if spec["token_mix"] == "linear" else 0)
    else:
        blocks = 1 + sum(spec["depths"])
        n_se = sum(d for d, se in zip(spec["depths"], spec["se"]) if se)
        dw = [n for n in convs if (attr(n, "group") or 1) > 1]
        assert ops.count("Concat") == 2 * blocks and ops.count("HardSigmoid") == n_se
        assert sum(attr(n, "strides") == [2, 2] for n in dw) == 8
        cheap = [n for n in dw if attr(n, "strides") == [1, 1] and attr(n, "kernel_shape") == [3, 3]]
        assert len(cheap) >= 2 * blocks
        assert len(convs) == 4 * blocks + 4 + 2 * 5 + 2 * n_se + 3   # stem, head, conv head; 5 shortcuts


@pytest.mark.parametrize("fam,seed", [("hardnet", 1), ("hardnet", 2), ("nystromformer", 4), ("nystromformer", 3)])
def test_v20_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v20 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; hardnet: no attention (no Softmax, no MatMul), one Concat per even
    layer of a block (layer l reads layers l - 2^i, as many inputs as powers of two divide l) and one for the block's
    output (its odd layers and its last), the convs of the stem, the layers (1x1 + depthwise 3x3 in HarDNet-DS) and the
    1x1 transitions, an activation (Relu, or Clip for ReLU6) after each but the depthwise convs, a max pool and 2x2
    average pools (HarDNet-DS: depthwise stride-2 convs instead); nystromformer-s4: post-norm, a depthwise 65 x 1 conv
    on v, the sequence out; -s3: 128 landmarks over 256 tokens, no conv; per block 3 Softmax maps, 10 MatMuls (4
    Linears, 6 attention products) and 4 per pseudo-inverse step (3 Subs of the identity each), 2 segment means."""
    import onnx
    from hase.model_zoo.generator import hardnet_links
    spec = arch_spec(fam, seed)
    size = 128 if fam == "hardnet" else max(128, 2 * spec["landmarks"])
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    attr = lambda n, k: next((list(a.ints) if a.ints else a.i for a in n.attribute if a.name == k), None)  # noqa
    convs = [n for n in graph.node if n.op_type == "Conv"]
    dw = [n for n in convs if (attr(n, "group") or 1) > 1]
    _matches_pytorch(model, x, y)
    if fam == "hardnet":
        layers, stages, downs = sum(spec["layers"]), len(spec["layers"]), sum(spec["down"])
        assert y.shape == (2, spec["classes"]) and "Softmax" not in ops and "MatMul" not in ops
        fan_in = []
        for g, n in zip(spec["growth"], spec["layers"]):
            links, _, _ = hardnet_links(n, g, spec["grmul"], 1)
            assert n < 8 or links[8] == [7, 6, 4, 0]        # layer 8 reads layers 7, 6, 4 and the block's input
            fan_in += [len(links[j]) for j in range(2, n + 1, 2)] + [len(range(1, n + 1, 2)) + (n % 2 == 0)]
        assert sorted(len(n.input) for n in graph.node if n.op_type == "Concat") == sorted(fan_in)
        assert ops.count("Clip" if spec["act"] == "relu6" else "Relu") == 2 + layers + stages
        if spec["depthwise"]:
            assert len(convs) == 3 + 2 * layers + stages + downs and len(dw) == 1 + layers + downs
            assert "MaxPool" not in ops and "AveragePool" not in ops
        else:
            assert len(convs) == 2 + layers + stages and not dw
            assert ops.count("MaxPool") == 1 and ops.count("AveragePool") == downs
    else:
        depth, k = spec["depth"], spec["conv_k"]
        want = (2, size, spec["dim"]) if spec["head"] == "seq" else (2, spec["classes"])
        assert shape == (2, size, spec["dim"]) and y.shape == want
        assert ops.count("Softmax") == 3 * depth
        assert ops.count("MatMul") == depth * (10 + 4 * spec["pinv_iters"])
        assert ops.count("Sub") == depth * 3 * spec["pinv_iters"]
        assert ops.count("ReduceMean") == 2 * depth + (spec["head"] == "mean")
        assert ops.count("LayerNormalization") == 2 * depth + (spec["norm"] == "pre")
        assert len(convs) == (depth if k else 0) and len(dw) == len(convs)
        assert all(attr(n, "kernel_shape") == [k, 1] and attr(n, "group") == spec["heads"] for n in convs)


@pytest.mark.parametrize("fam,seed", [("rednet", 8), ("rednet", 3), ("bigbird", 2), ("bigbird", 3)])
def test_v21_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v21 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; rednet: no MatMul, one Softmax (over the k^2 taps) and one
    BatchNormalization left after it per involution (a bottleneck's, the stem's), the convs of the stem, of each
    bottleneck (1x1 in, the kernel generator's reduce and span, 1x1 out), 4 shortcuts and the stem involution's two,
    an AveragePool before each of the 3 strided kernel generators; nn.Unfold exported as im2col (Gathers) with one
    ReduceSum an involution, or k^2 shifted Slices with one Mul a tap; an involution equal to the product of its
    Softmax kernels with F.unfold's neighbourhoods; bigbird: per block 2 Pads (the key and value windows), 2 Gathers
    of the random blocks where it has them, one Softmax (and one more for the global queries), 4 Linear MatMuls, 2
    sparse-attention products and 4 more with global tokens; one block's attention is block-sparse: a token moved
    outside a query block's window, random blocks and global tokens leaves that block's output as it was, and moves
    its own block's, its neighbours' and (global tokens) the first token's."""
    import onnx
    import torch
    spec = arch_spec(fam, seed)
    size = 128 if fam == "rednet" else 8 * spec["block"]
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    _matches_pytorch(model, x, y)
    if fam == "rednet":
        blocks, k = sum(spec["depths"]), spec["k"]
        n_inv = blocks + spec["stem_inv"]
        assert y.shape == (2, spec["classes"]) and "MatMul" not in ops
        assert ops.count("Softmax") == ops.count("BatchNormalization") == n_inv
        assert ops.count("Conv") == 2 + 4 * blocks + 4 + 2 * spec["stem_inv"]
        assert ops.count("AveragePool") == 3 and ops.count("MaxPool") == 1
        if spec["unfold"] == "unfold":
            assert ops.count("ReduceSum") == n_inv and ops.count("Gather") >= 2 * n_inv and "Split" not in ops
        else:
            assert "ReduceSum" not in ops and "Gather" not in ops and ops.count("Split") == n_inv
            assert ops.count("Mul") == k * k * blocks + 9 * spec["stem_inv"]
        invs = [m for m in model.modules() if type(m).__name__ == "Involution"]
        assert len(invs) == n_inv
        inv = next(m for m in invs if m.stride == 2)
        g, c, h = inv.g, inv.c, inv.hw
        t = torch.randn(2, c, 2 * h, 2 * h)
        with torch.no_grad():
            w = torch.softmax(inv.span(inv.reduce(inv.pool(t))).reshape(2, g, 1, k * k, h, h), dim=3)
            u = torch.nn.functional.unfold(t, k, padding=(k - 1) // 2, stride=2).reshape(2, g, c // g, k * k, h, h)
            assert torch.allclose(inv(t), (w * u).sum(dim=3).reshape(2, c, h, h), atol=1e-5)
    else:
        from hase.model_zoo.generator import bigbird_random_blocks
        depth, r, gl, w = spec["depth"], spec["rand_blocks"], spec["global_tokens"], spec["block"]
        want = (2, size, spec["dim"]) if spec["head"] == "seq" else (2, spec["classes"])
        assert shape == (2, size, spec["dim"]) and y.shape == want
        assert ops.count("Softmax") == depth * (1 + (gl > 0))
        assert ops.count("MatMul") == depth * (4 + 2 + 4 * (gl > 0))
        assert ops.count("Pad") == 2 * depth and ops.count("Gather") == (2 * depth if r else 0)
        assert ops.count("LayerNormalization") == 2 * depth + (spec["norm"] == "pre")
        nb = size // w
        rand = bigbird_random_blocks(nb, r, 1 if gl else 0, seed, 0) if r else np.zeros((nb, 0), dtype=int)
        attn = model.blocks[0].attn
        t = torch.randn(1, size, spec["dim"])
        moved = nb - 1                                      # the last block: in few windows
        t2 = t.clone()
        t2[:, moved * w + w // 2] += 1.0
        with torch.no_grad():
            a, b = attn(t).reshape(nb, w, -1), attn(t2).reshape(nb, w, -1)
        for q in range(nb):
            sees = abs(q - moved) <= 1 or moved in rand[q]
            rows = slice(gl, w) if q == 0 else slice(0, w)   # block 0's first gl rows are the global queries
            assert torch.allclose(a[q, rows], b[q, rows], atol=1e-6) != sees, q
        if gl:
            assert not torch.allclose(a[0, 0], b[0, 0], atol=1e-6)   # a global query sees every token


@pytest.mark.parametrize("fam,seed", [("dgcnn", 2), ("dgcnn", 5), ("deformattn", 7), ("deformattn", 5)])
def test_v22_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v22 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; dgcnn: one kNN graph per EdgeConv (a MatMul, a ReduceSum and a
    TopK each: the graph recomputed from every layer's features), the neighbours gathered by Gathers of rows or by
    one GatherElements an EdgeConv, 1 or 2 1x1 convs an EdgeConv and the Conv1d after them, a max over the neighbours
    and one over the points; the output does not depend on the points' order; the first EdgeConv equal to a
    brute-force one (float64 distances, argsort, edge features [xj - xi, xi], its convs, a max); deformattn: one
    GridSample per layer and level (bilinear, zeros, align_corners 0), one Softmax a layer, no MatMul but the
    Linears' (6 a layer: no query-key product), a GroupNorm per level; one layer's attention equal to a bilinear
    lookup written out (each query's pixel centre + its offsets in the level's pixels, four taps, zeros outside,
    weighted by the Softmax over levels x points)."""
    import onnx
    import torch
    size = 256 if fam == "dgcnn" else 128
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    _matches_pytorch(model, x, y)
    assert y.shape == (2, spec["classes"])
    if fam == "dgcnn":
        e, k, head = len(spec["edges"]), spec["k"], len(spec["head"])
        assert shape == (2, 3, size)
        assert ops.count("TopK") == ops.count("ReduceSum") == e and ops.count("MatMul") == e + head
        assert ops.count("Conv") == e * spec["convs"] + 1 and ops.count("ReduceMax") == e + 1
        assert ops.count("LeakyRelu") == e * spec["convs"] + 1 + head
        assert ops.count("ReduceMean") == (spec["pool"] == "max_avg")
        if spec["gather"] == "elements":
            assert ops.count("GatherElements") == e and "Gather" not in ops
        else:
            assert ops.count("Gather") == e and "GatherElements" not in ops
        perm = np.random.default_rng(1).permutation(size)     # a point set: its order does not matter
        y2 = sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(x[:, :, perm])})[0]
        assert np.allclose(y2, y, atol=1e-5 * np.abs(y).max())
        ec = model.edges[0]
        pts = torch.from_numpy(np.random.default_rng(2).standard_normal((1, 3, size), dtype=np.float32))
        with torch.no_grad():
            p = pts[0].T                                                    # [N, 3]
            nearest = torch.cdist(p.double(), p.double()).argsort(-1)[:, :k]  # the point itself first
            xi = p[:, None, :].expand(size, k, 3)
            edges = torch.cat([p[nearest] - xi, xi], -1).permute(2, 0, 1)[None]   # [1, 6, N, k]
            assert torch.allclose(ec(pts), ec.conv(edges).amax(-1), atol=1e-5)
    else:
        from hase.model_zoo.generator import deformattn_levels
        depth, L, P, h, d = spec["depth"], spec["levels"], spec["points"], spec["heads"], spec["dim"]
        assert shape == (2, 3, size, size)
        assert ops.count("GridSample") == depth * L and ops.count("Softmax") == depth
        assert ops.count("MatMul") == 6 * depth and ops.count("Gemm") == 1
        assert ops.count("LayerNormalization") == 2 * depth + (spec["norm"] == "pre")
        assert ops.count("InstanceNormalization") == L                      # GroupNorm(32)
        assert ops.count("Conv") == 1 + 4 * (2 * spec["blocks"] + 1) + L
        attr = lambda n, a: next(onnx.helper.get_attribute_value(t) for t in n.attribute if t.name == a)  # noqa
        for n in (n for n in graph.node if n.op_type == "GridSample"):
            assert (attr(n, "mode"), attr(n, "padding_mode"), attr(n, "align_corners")) == (b"bilinear", b"zeros", 0)
        sides = [sd for _, sd in deformattn_levels(spec, size)]
        n_tok, dh = sum(sd * sd for sd in sides), d // h
        attn = model.layers[0].attn
        g = torch.Generator().manual_seed(0)
        q, src = torch.randn(1, n_tok, d, generator=g), torch.randn(1, n_tok, d, generator=g)
        with torch.no_grad():
            got = attn(q, src)[0]
            v = attn.value(src)[0]
            off = attn.off(q)[0].reshape(n_tok, h, L, P, 2)
            w = torch.softmax(attn.attw(q)[0].reshape(n_tok, h, L * P), -1).reshape(n_tok, h, L, P)
            centre = torch.cat([torch.stack(torch.meshgrid(torch.arange(sd), torch.arange(sd), indexing="ij"), -1)
                                .reshape(-1, 2).flip(-1).add(0.5).div(sd) for sd in sides])   # (x, y) in [0, 1]
            y_ref, start, heads = torch.zeros(n_tok, h, dh), 0, torch.arange(h)[None, :, None]
            for lv, sd in enumerate(sides):
                vmap = v[start:start + sd * sd].reshape(sd, sd, h, dh)           # [row, column, head, dh]
                start += sd * sd
                px = centre[:, None, None, 0] * sd + off[:, :, lv, :, 0] - 0.5   # [N, h, P]: pixel coordinates
                py = centre[:, None, None, 1] * sd + off[:, :, lv, :, 1] - 0.5
                for dx in (0, 1):
                    for dy in (0, 1):
                        xi, yi = px.floor() + dx, py.floor() + dy
                        inside = (xi >= 0) & (xi < sd) & (yi >= 0) & (yi < sd)
                        tap = (1 - (px - xi).abs()) * (1 - (py - yi).abs()) * inside * w[:, :, lv]
                        val = vmap[yi.clamp(0, sd - 1).long(), xi.clamp(0, sd - 1).long(), heads]   # [N, h, P, dh]
                        y_ref += (val * tap[..., None]).sum(2)
            assert torch.allclose(got, attn.out(y_ref.reshape(n_tok, d)), atol=1e-4)


def _sparse_mask_reference(z: np.ndarray, kind: str) -> np.ndarray:
    """Each row's mask in float64, written apart from the model: sparsemax, the Euclidean projection onto the simplex
    (sorted, the largest k with 1 + k z_(k) > the sum of the k largest); entmax 1.5, max(z / 2 - tau, 0)^2 with tau
    found by bisection so that the row sums to 1; softmax."""
    if kind == "softmax":
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if kind == "sparsemax":
        u = -np.sort(-z, -1)
        k = np.arange(1, z.shape[-1] + 1)
        css = u.cumsum(-1)
        rho = ((1 + k * u) > css).sum(-1, keepdims=True)
        tau = (np.take_along_axis(css, rho - 1, -1) - 1) / rho
        return np.maximum(z - tau, 0)
    h = z / 2
    lo, hi = h.max(-1, keepdims=True) - 1, h.max(-1, keepdims=True)
    for _ in range(100):
        mid = (lo + hi) / 2
        over = (np.maximum(h - mid, 0) ** 2).sum(-1, keepdims=True) > 1
        lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    return np.maximum(h - (lo + hi) / 2, 0) ** 2


@pytest.mark.parametrize("fam,seed", [("condconv", 5), ("condconv", 16), ("tabnet", 5), ("tabnet", 1)])
def test_v23_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v23 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; condconv: one MatMul a dynamic conv, of the routing [B, K] and an
    initializer [K, C_out C_in/g k k] (the experts), reshaped into the weight of a Conv that has no initializer and
    B g groups (the batch folded into the groups), one Softmax a router (or a Sigmoid after its Linear); a sample's
    output its own (another sample beside it changes nothing in ORT); a dynamic conv equal to a static conv per
    sample with its experts mixed by the routing written out; tabnet: a TopK over all F features, a CumSum (two:
    entmax 1.5) and a GatherElements a step (sparsemax, entmax 1.5) or one Softmax, a GLU (Split) a GLU layer, the
    shared Linears' weights the same in every step that uses them; every step's mask non-negative and summing to
    1, equal to the mask written apart (a simplex projection, an entmax threshold by bisection, a softmax), the
    forward written out from the modules (prior *= gamma - mask, the masked features, ReLU'd decision parts summed)
    equal to the model's; ghost BN at a batch of two virtual batches and a part: one BN a virtual batch, a Concat a
    ghost BN, ORT equal to PyTorch."""
    import onnx
    import torch
    import torch.nn.functional as F
    size = 128 if fam == "condconv" else 64
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    inits = {i.name: tuple(i.dims) for i in graph.initializer}
    made_by = {o: n for n in graph.node for o in n.output}
    attr = lambda n, a: next(onnx.helper.get_attribute_value(t) for t in n.attribute if t.name == a)  # noqa
    _matches_pytorch(model, x, y)
    assert y.shape == (2, spec["classes"])
    if fam == "condconv":
        from hase.model_zoo.generator import _div4, condconv_blocks, condconv_kernels
        K, blocks, kernels = spec["experts"], condconv_blocks(spec), condconv_kernels(spec)
        assert shape == (2, 3, size, size)
        mm = [n for n in graph.node if n.op_type == "MatMul"]
        assert sorted(inits[n.input[1]] for n in mm) == sorted((K, k) for k in kernels)
        dyn = [n for n in graph.node if n.op_type == "Conv" and n.input[1] not in inits]
        assert len(dyn) == len(kernels)
        for n in dyn:                                   # weight = Reshape(MatMul(routing, experts))
            assert made_by[n.input[1]].op_type == "Reshape" and made_by[made_by[n.input[1]].input[0]] in mm
        groups = []
        for ci, co, _ in blocks:                        # B g: 2 for a dense conv, 2 x channels for a depthwise one
            if spec["block"] == "basic":
                groups += [2, 2]
            else:
                groups += [2 * _div4(ci * spec["expand"])] + ([2, 2] if spec["dynamic"] == "all" else [])
        assert sorted(attr(n, "group") for n in dyn) == sorted(groups)
        routers = len(blocks) if spec["router"] == "block" else len(kernels)
        if spec["routing"] == "softmax":
            assert ops.count("Softmax") == routers
        else:
            assert sum(made_by[n.input[0]].op_type == "Gemm" for n in graph.node if n.op_type == "Sigmoid") == routers
        x2 = x.copy()
        x2[1] = np.random.default_rng(99).standard_normal(x2[1].shape, dtype=np.float32)
        y2 = sess.run(None, {sess.get_inputs()[0].name: x2})[0]
        assert np.allclose(y2[0], y[0], rtol=0, atol=1e-6 * np.abs(y).max()) and not np.allclose(y2[1], y[1])
        dc = next(c for c in model.blocks[0].convs if hasattr(c, "experts"))       # a dynamic conv
        g = torch.Generator().manual_seed(0)
        t = torch.randn(2, dc.cg * dc.groups, 16, 16, generator=g)
        with torch.no_grad():
            z = torch.randn(2, K, generator=g)                  # a block's routing, as its router would make it
            r = dc.router(t) if dc.router is not None else z.softmax(-1) if spec["routing"] == "softmax" else z.sigmoid()
            got = dc(t, r)
            experts = dc.experts.reshape(K, dc.cout, dc.cg, dc.k, dc.k)
            ref = torch.cat([F.conv2d(t[b:b + 1], sum(r[b, i] * experts[i] for i in range(K)), None, dc.stride,
                                      dc.k // 2, groups=dc.groups) for b in range(2)])
            assert torch.allclose(got, dc.bn(ref), atol=1e-5)
            if spec["routing"] == "softmax":
                assert torch.allclose(r.sum(-1), torch.ones(2))
    else:
        nd, steps, per = spec["n_d"], spec["steps"], spec["shared"] + spec["independent"]
        glu = per * (steps + 1)
        assert shape == (2, size)
        assert ops.count("Split") == glu and ops.count("MatMul") == glu + steps + 1
        assert ops.count("BatchNormalization") == 1 + glu + steps
        root = lambda v: root(made_by[v].input[0]) if v in made_by and made_by[v].op_type == "Identity" else v  # noqa
        weights = {root(n.input[1]) for n in graph.node if n.op_type == "MatMul"}    # equal initializers: Identity
        assert weights <= set(inits) and len(weights) == glu - spec["shared"] * steps + steps + 1   # shared: steps + 1
        if spec["mask"] == "softmax":
            assert ops.count("Softmax") == steps and "TopK" not in ops
        else:
            assert ops.count("TopK") == ops.count("GatherElements") == steps
            assert ops.count("CumSum") == steps * (1 if spec["mask"] == "sparsemax" else 2)
        with torch.no_grad():
            xt = torch.from_numpy(x)
            xb = model.bn(xt)
            a, prior, acc = model.initial(xb)[:, nd:], torch.ones_like(xb), 0
            for att, feat in zip(model.att, model.feat):
                m = att(a, prior)
                want = _sparse_mask_reference((att.bn(att.fc(a)) * prior).double().numpy(), spec["mask"])
                assert np.allclose(m.numpy(), want, atol=1e-5)
                assert (m >= 0).all() and torch.allclose(m.sum(-1), torch.ones(2), atol=1e-5)
                prior = (spec["gamma"] - m) * prior
                yv = feat(m * xb)
                acc, a = acc + torch.relu(yv[:, :nd]), yv[:, nd:]
            assert torch.allclose(model.head(acc), model(xt), atol=1e-6)
        if spec["norm"] == "ghost":
            b = 2 * spec["vbs"] + 3
            _, model_b, _, out_b, _, x_b, y_b = _export_and_run(tmp_path, fam, seed, size, b)
            ops_b = [n.op_type for n in onnx.load(str(out_b)).graph.node]
            assert ops_b.count("BatchNormalization") == 1 + 3 * (glu + steps)
            assert ops_b.count("Concat") == glu + steps
            _matches_pytorch(model_b, x_b, y_b)


def _roi_align_reference(f: np.ndarray, box: np.ndarray, o: int, scale: float, ratio: int, aligned: bool):
    """One box's o x o bins in float64, written apart from torchvision (the RoiAlign of Mask R-CNN): the box scaled to
    the map (less half a pixel where aligned; else at least 1 x 1), each bin the mean of ratio x ratio (adaptive:
    ceil(box / o)) bilinear samples at the sub-bin centres, a sample outside [-1, H] x [-1, W] zero, clamped inside."""
    c, h, w = f.shape
    off = 0.5 if aligned else 0.0
    x1, y1, x2, y2 = box * scale - off
    bw, bh = x2 - x1, y2 - y1
    if not aligned:
        bw, bh = max(bw, 1.0), max(bh, 1.0)
    gh = ratio or int(np.ceil(bh / o))
    gw = ratio or int(np.ceil(bw / o))
    out = np.zeros((c, o, o))
    for i in range(o):
        for j in range(o):
            acc = np.zeros(c)
            for iy in range(gh):
                for ix in range(gw):
                    y = y1 + i * bh / o + (iy + 0.5) * bh / o / gh
                    x = x1 + j * bw / o + (ix + 0.5) * bw / o / gw
                    if y < -1 or y > h or x < -1 or x > w:
                        continue
                    y, x = max(y, 0.0), max(x, 0.0)
                    y0, x0 = min(int(y), h - 1), min(int(x), w - 1)
                    y1_, x1_ = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                    y, x = (y0 if y0 >= h - 1 else y), (x0 if x0 >= w - 1 else x)
                    ly, lx = y - y0, x - x0
                    acc += ((1 - ly) * (1 - lx) * f[:, y0, x0] + (1 - ly) * lx * f[:, y0, x1_]
                            + ly * (1 - lx) * f[:, y1_, x0] + ly * lx * f[:, y1_, x1_])
            out[:, i, j] = acc / (gh * gw)
    return out


@pytest.mark.parametrize("fam,seed", [("roihead", 2), ("roihead", 7), ("sinkhorn", 8), ("sinkhorn", 3)])
def test_v24_family_exports_runs_and_does_what_it_says(tmp_path, fam, seed):
    """The exam v24 held-out families at a small size, batch 2: the project's export path, the CPU EP, ORT equal to
    PyTorch, and each family's defining structure; roihead: one RoiAlign over [B R] rois of the map at the spec's
    stride (its output size, sampling ratio and coordinate mode the spec's), a TopK of R over all anchors and one
    sorting the R indices where the boxes are proposals (else the fixed boxes a constant of the graph), the output [B,
    R, classes + box deltas]; a sample's output its own (another sample beside it changes nothing in ORT);
    torchvision's roi_align equal to the bins written apart (bilinear samples averaged); sinkhorn: two ReduceLogSumExp
    an iteration, one MatMul the score matrix (and each attention layer's two, or its SDPA's); the log assignment
    equal to the Sinkhorn iterations written out in float64 from the model's scores; every column of the assignment
    summing to its marginal (1, a dustbin's N), the rows nearer theirs after T iterations than after one (within 5%
    after 30 or more)."""
    import onnx
    import torch
    size = 256 if fam == "roihead" else 64
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, fam, seed, size, 2)
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    attr = lambda n, a: next(onnx.helper.get_attribute_value(t) for t in n.attribute if t.name == a)  # noqa
    _matches_pytorch(model, x, y)
    if fam == "roihead":
        from torchvision.ops import roi_align
        from hase.model_zoo.generator import roihead_fixed_boxes
        R, o, nc = model.R, spec["out"], spec["classes"]
        assert shape == (2, 3, size, size)
        assert y.shape == (2, R, nc + 4 * (nc if spec["deltas"] == "class" else 1))
        (ra,) = [n for n in graph.node if n.op_type == "RoiAlign"]
        assert attr(ra, "output_height") == attr(ra, "output_width") == o
        assert attr(ra, "sampling_ratio") == spec["sampling"]
        assert np.isclose(attr(ra, "spatial_scale"), 1 / spec["stride"])
        mode = attr(ra, "coordinate_transformation_mode")
        assert mode == (b"half_pixel" if spec["aligned"] else b"output_half_pixel")
        if spec["boxes"] == "proposals":
            tks = [n for n in graph.node if n.op_type == "TopK"]    # the top R anchors, then their indices sorted
            assert len(tks) == 2 and sorted(attr(n, "largest") for n in tks) == [0, 1]
            assert R == min(spec["rois"], 3 * (size // spec["stride"]) ** 2)
            for tk in tks:
                assert inits.get(tk.input[1]) is None or int(np.ravel(inits[tk.input[1]])[0]) == R
            assert "Exp" in ops
        else:
            assert "TopK" not in ops and R == spec["rois"]
            want = roihead_fixed_boxes(spec, size)
            assert any(v.shape[-2:] == (R, 4) and np.array_equal(v.reshape(R, 4), want) for v in inits.values())
        x2 = x.copy()
        x2[1] = np.random.default_rng(99).standard_normal(x2[1].shape, dtype=np.float32)
        y2 = sess.run(None, {sess.get_inputs()[0].name: x2})[0]
        assert np.allclose(y2[0], y[0], rtol=0, atol=1e-6 * np.abs(y).max()) and not np.allclose(y2[1], y[1])
        g = np.random.default_rng(seed)
        f = g.standard_normal((1, 4, 12, 12)).astype(np.float32)
        boxes = np.array([[3.0, 5.0, 60.0, 40.0], [0.0, 0.0, 95.0, 95.0], [20.5, 30.25, 24.0, 33.0]], np.float32)
        scale = 1 / 8
        rois = torch.from_numpy(np.concatenate([np.zeros((3, 1), np.float32), boxes], 1))
        got = roi_align(torch.from_numpy(f), rois, output_size=o, spatial_scale=scale,
                        sampling_ratio=spec["sampling"], aligned=spec["aligned"]).numpy()
        for k in range(3):
            want = _roi_align_reference(f[0].astype(np.float64), boxes[k], o, scale, spec["sampling"],
                                        spec["aligned"])
            assert np.allclose(got[k], want, atol=1e-5)
    else:
        N, T = size, spec["iters"]
        n = N + 1 if spec["dustbin"] else N
        assert shape == (2, 2, N, spec["f_in"]) and y.shape == (2, n, n)
        assert ops.count("ReduceLogSumExp") == 2 * T
        per_layer = 0 if spec["layers"] == 0 else 2 if spec["attn"] == "manual" else None
        if per_layer is not None:
            assert ops.count("MatMul") - sum(
                1 for nd in graph.node if nd.op_type == "MatMul" and nd.input[1] in inits) == 1 + per_layer * spec[
                    "layers"]
        with torch.no_grad():
            xt = torch.from_numpy(x)
            d = model.desc(xt[..., 3:]) + model.kenc(xt[..., :3]) if spec["kenc"] else model.desc(xt)
            for i, layer in enumerate(model.layers):
                d = layer(d, d if i % 2 == 0 else d.flip(1))
            d = model.final(d).double().numpy()
        z = d[:, 0] @ d[:, 1].transpose(0, 2, 1) / np.sqrt(spec["dim"])
        if spec["dustbin"]:
            a = float(model.bin.detach())
            z = np.concatenate([np.concatenate([z, np.full((2, N, 1), a)], 2), np.full((2, 1, N + 1), a)], 1)
            norm = -np.log(2 * N)
            mu = np.full(n, norm)
            mu[-1] = np.log(N) + norm
        else:
            norm = -np.log(N)
            mu = np.full(n, norm)
        lse = lambda v, ax: v.max(ax) + np.log(np.exp(v - v.max(ax, keepdims=True)).sum(ax))  # noqa
        u, v = np.zeros((2, n)), np.zeros((2, n))
        off = []                                        # each iteration's worst row marginal, relative
        for _ in range(T):
            u = mu - lse(z + v[:, None, :], 2)
            v = mu - lse(z + u[:, :, None], 1)
            off.append(np.abs(lse(z + u[:, :, None] + v[:, None, :], 2) - mu).max())
        want = z + u[:, :, None] + v[:, None, :] - norm
        assert np.allclose(y, want, atol=1e-4 * np.abs(want).max())
        cols = np.exp(y).sum(1)
        assert np.allclose(cols, np.exp(mu - norm), rtol=1e-4)
        assert off[-1] < off[0]                         # the rows move towards their marginals
        if T >= 30:
            assert np.allclose(np.exp(want).sum(2), np.exp(mu - norm), rtol=0.05)


def _iou(a, b):
    """IoU of two [x1, y1, x2, y2] boxes."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@pytest.mark.parametrize("seed", [8, 4])
def test_v25_family_exports_runs_and_does_what_it_says(tmp_path, seed):
    """The exam v25 held-out family at 256 px, batch 2: the project's export path, the CPU EP, ORT equal to PyTorch;
    nmsdet-s8 (20 classes, score > 0.6, class-aware), nmsdet-s4 (two levels, one class, no threshold): one
    NonMaxSuppression over both images' boxes, a NonZero exactly where the spec has a threshold, TopKs for the top K,
    its sort and the kept rows' sort; the output [M, 7] with M <= B max_det, in image order, every score over the
    threshold, no two kept boxes of one image (and class, class-aware) overlapping more than the IoU threshold, and an
    image's rows its own (another image beside it changes nothing)."""
    import onnx
    from hase.model_zoo.generator import nmsdet_points
    spec, model, shape, out, sess, x, y = _export_and_run(tmp_path, "nmsdet", seed, 256, 2)
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert spec["levels"] == (1 if seed == 8 else 2) and (spec["threshold"] > 0) == (seed == 8)
    assert ops.count("NonMaxSuppression") == 1 and ops.count("TopK") == 3
    assert ops.count("NonZero") == (1 if spec["threshold"] > 0 else 0)
    assert model.K == min(spec["topk"], nmsdet_points(spec, 256))
    assert y.ndim == 2 and y.shape[1] == 7 and 0 < y.shape[0] <= 2 * spec["max_det"]
    _matches_pytorch(model, x, y)
    img, boxes, score, cls = y[:, 0], y[:, 1:5], y[:, 5], y[:, 6]
    assert set(np.unique(img)) <= {0.0, 1.0} and np.all(np.diff(img) >= 0)
    assert np.all(score > spec["threshold"]) and np.all((cls >= 0) & (cls < spec["classes"]))
    assert np.all(boxes[:, 2:] >= boxes[:, :2]) and boxes.min() >= 0 and boxes.max() <= 256
    for i in range(len(y)):
        for j in range(i + 1, len(y)):
            same = img[i] == img[j] and (spec["nms"] == "agnostic" or cls[i] == cls[j])
            assert not same or _iou(boxes[i], boxes[j]) <= spec["iou"] + 1e-6
    x2 = x.copy()
    x2[1] = np.random.default_rng(99).standard_normal(x2[1].shape, dtype=np.float32)
    y2 = sess.run(None, {sess.get_inputs()[0].name: x2})[0]
    assert np.array_equal(y2[y2[:, 0] == 0], y[y[:, 0] == 0])
    assert not np.array_equal(y2[y2[:, 0] == 1], y[y[:, 0] == 1])
