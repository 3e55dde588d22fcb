"""The corpus split (model_zoo/corpus_split.yaml): which architectures train Hase's terms and which judge it.

  python model_zoo/corpus.py            # the split, counted per family, and its disjointness check

Library: `load_split()` -> Split (train / exam architecture lists, family of each), `Split.check()` raises if
the two share an architecture or a (family, seed), `Split.refuse_trained(models)` is the exam scorer's guard.
"""
from dataclasses import dataclass, field
from pathlib import Path


import yaml  # noqa: E402

from hase.model_zoo.generator import FAMILIES, spec_of  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402

SPLIT_FILE = paths.REPO / "model_zoo" / "corpus_split.yaml"
CNN_FAMILIES = {"cnn_plain", "cnn_mobile", "cnn_grouped", "unet", "fpn", "convnext", "tcn", "dense",
                "gan", "yolo", "video3d", "deeplab", "vocoder", "superres", "tasnet", "hrnet", "raft", "vqvae",
                "capsnet", "nascell", "stn", "res2net", "hourglass", "convmixer", "wavenet", "focalnet",
                "poolformer", "ghostnet", "hardnet", "rednet", "condconv", "roihead", "nmsdet"}
# tcn, vocoder, tasnet: 1-D convs; video3d: 3-D; raft: conv encoders and ConvGRU updates around a parameter-free
# correlation (MatMul, AvgPool, a Gather or GridSample lookup), no attention
# not CNNs: the attention and mixing families, rnn (LSTM/GRU; a Conv1d front-end at most), linattn (linear
# attention over image tokens, convs around it as in hybrid), moe (a ViT with expert MLPs) and detr (a CNN backbone,
# but encoder and decoder attention after it, as in hybrid), pointnet (per-point MLPs, global max pooling, kNN graphs
# by MatMul/TopK/Gather: no spatial convolution), wav2vec (a Conv1d front-end, then a transformer, as conformer),
# dlrm (embedding Gathers, MatMul interactions and MLPs: no convolution), gnn (dense-adjacency MatMuls, masked
# attention Softmax, Linear layers: no convolution), diffusion (a conv UNet, but self-attention at its low resolutions
# and a timestep MLP, as hybrid), implicit (coordinate MLPs: Fourier encoding, Linear layers, no convolution) and
# fttransformer (per-feature embeddings and attention layers over tabular features: no convolution) and kan (spline
# edge functions written out as elementwise ops, MatMuls: no convolution). vqvae (conv encoder and decoder around a
# codebook lookup) and capsnet (two convs, then capsule MatMuls and routing) count as CNNs; so does nascell (cells of
# convs and pools); neuralode (an MLP field integrated by unrolled steps) and gmlp (token-mixing Linears) do not;
# stn (conv stages around GridSample resampling) counts as a CNN; xcit and aft (attention without a T x T map) do not;
# res2net and hourglass (convolution only) count as CNNs; retnet (retention: a T x T map without Softmax) does not;
# convmixer (depthwise and pointwise convs only) and wavenet (causal dilated 1-D convs and 1x1 convs only, as tcn)
# count as CNNs; t5enc (self-attention with a relative position bias) does not; focalnet (depthwise convs gating a
# Linear's query, no attention map, as convnext) counts as a CNN; llama and maxvit (attention) do not; poolformer
# (pooling as the token mixer, 1x1 convs) counts as a CNN; levit and mobilevit (attention) do not; ghostnet (1x1 and
# depthwise convs, Concat) counts as a CNN; resmlp (token-mixing Linears, as gmlp) does not; hardnet (3x3 or 1x1 and
# depthwise convs, harmonic Concats, pools) counts as a CNN; nystromformer (landmark attention, Softmax maps) does not;
# rednet (involution: per-pixel kernels generated from the input, a Softmax over the k x k taps of one pixel's
# kernel, no query-key attention map, as skresnet's branch Softmax) counts as a CNN; bigbird (block-sparse attention)
# does not; dgcnn (EdgeConvs on kNN graphs by MatMul/TopK/Gather, 1x1 convs over the edges: no spatial convolution, as
# pointnet) and deformattn (a conv backbone, then deformable attention over its tokens, as detr) do not; condconv
# (dynamic convs: per-sample kernels mixed from experts by a routing MatMul, no attention map, as efficientnet_cc_b0_4e)
# counts as a CNN; tabnet (Linears, GLUs and sparse feature masks over tabular features: no convolution, as
# fttransformer) does not; roihead (a conv backbone, RoiAlign of boxes, an FC or conv box head: no attention, as
# fpn and yolo) counts as a CNN; sinkhorn (self/cross attention over keypoints, a MatMul score matrix, log-domain
# Sinkhorn normalisation: no convolution, as pointnet) does not; nmsdet (a conv backbone and head, then TopK,
# NonZero and NonMaxSuppression over the boxes: no attention, as yolo) counts as a CNN
# named models that are CNNs (for the corpus's non-CNN share); every other named model has attention or mixing
NAMED_CNN = {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "mobilenet_v2",
             "mobilenet_v3_small", "mobilenet_v3_large", "vgg11", "vgg16_bn", "densenet121", "densenet169",
             "efficientnet_b0", "efficientnet_b1", "efficientnet_v2_s", "convnext_tiny", "shufflenet_v2_x1_0",
             "shufflenet_v2_x2_0", "squeezenet1_1", "mnasnet1_0", "mnasnet0_5", "googlenet", "resnext50_32x4d",
             "regnet_x_400mf", "regnet_y_800mf", "efficientnet_b3",
             "convnext_small", "shufflenet_v2_x1_5", "resnext101_32x8d", "regnet_y_1_6gf", "efficientnet_b2",
             "mnasnet1_3", "timm-resnest14d", "timm-dla34", "timm-repvit_m1", "timm-ghostnet_100", "timm-rexnet_100", "timm-tinynet_a", "timm-mobileone_s0",
             "regnet_x_1_6gf", "densenet201", "inception_v3", "vgg13", "timm-hgnetv2_b0", "timm-ese_vovnet19b_dw",
             "timm-res2net50_26w_4s", "timm-mixnet_s", "timm-inception_next_tiny",
             "regnet_y_3_2gf", "efficientnet_b4", "wide_resnet101_2", "convnext_base", "efficientnet_v2_m",
             "shufflenet_v2_x0_5", "vgg19_bn", "timm-resnet26d", "timm-lcnet_100", "timm-ghostnetv2_100",
             "timm-selecsls42b", "timm-hrnet_w18_small",
             "alexnet", "squeezenet1_0", "densenet161", "resnext101_64x4d", "regnet_x_3_2gf", "mnasnet0_75",
             "vgg11_bn", "timm-dpn68", "timm-cspresnet50", "timm-mobilenetv4_conv_small", "timm-regnetz_b16",
             # exam v12's named CNNs (left out of this set until session 27: v12's non-CNN share read 57% instead of 50%)
             "timm-resnet18d", "timm-seresnext26t_32x4d", "timm-cs3darknet_s", "timm-regnety_004", "timm-rexnetr_100",
             "timm-mixnet_l", "timm-lcnet_050", "timm-hgnetv2_b1",
             # exam v13's named CNNs
             "timm-fbnetc_100", "timm-hardcorenas_a", "timm-dla46x_c", "timm-vovnet39a", "timm-gernet_s",
             "timm-regnetx_002", "timm-eca_resnet33ts", "timm-mobilenetv4_conv_medium",
             # exam v14's named CNNs (gcresnet33ts: a global-context pooling block, as eca_resnet33ts's channel gate)
             "timm-fasternet_t0", "timm-semnasnet_075", "timm-spnasnet_100", "timm-resnet10t", "timm-dla60x_c",
             "timm-gcresnet33ts", "timm-nf_regnet_b0", "timm-darknet17",
             # exam v15's named CNNs
             "timm-efficientnet_es", "timm-mobileone_s1", "timm-ese_vovnet39b", "timm-cs3darknet_focus_s",
             "timm-ecaresnet26t", "timm-dla60_res2net", "timm-fbnetv3_d", "timm-skresnet34",
             # exam v16's named CNNs (efficientnet_cc_b0_4e: CondConv, per-sample expert kernels mixed by a routing
             # MatMul; rdnet_tiny: DenseNet revisited, depthwise convs and concatenation)
             "timm-mobilenetv1_100", "timm-efficientnet_cc_b0_4e", "timm-rdnet_tiny", "timm-hgnet_small",
             "timm-ghostnetv3_100", "timm-resnetaa34d", "timm-gernet_m", "timm-selecsls60",
             # exam v17's named CNNs
             "timm-regnety_016", "timm-resnet34d", "timm-dla102", "timm-ecaresnet50t", "timm-repvgg_b0",
             "timm-gcresnext26ts", "timm-res2next50", "timm-tf_efficientnet_lite1",
             # exam v18's named CNNs (resnest26d: split attention, a channel softmax over radix groups, no token
             # attention map)
             "timm-resnet26t", "timm-mobilenetv2_110d", "timm-regnetx_006", "timm-resnest26d", "timm-dpn48b",
             "timm-mnasnet_100", "timm-hardcorenas_c", "timm-seresnext26ts",
             # exam v19's named CNNs (resnet50_gn: GroupNorm; nf_resnet26: no normalization layers, weights
             # standardized in the graph)
             "timm-resnet50_gn", "timm-nf_resnet26", "timm-resnetblur18", "timm-efficientnet_em",
             "timm-cs3darknet_m", "timm-hgnetv2_b2", "timm-regnety_008", "timm-fasternet_t1",
             # exam v20's named CNNs (resnetv2_50d_evos: EvoNorm-S0, no BatchNorm; skresnext50_32x4d: selective
             # kernels, a Softmax over two branches, no token attention map, as skresnet34; mambaout_kobe: gated
             # depthwise-conv blocks, no attention)
             "timm-inception_v4", "timm-resnetv2_50d_evos", "timm-gernet_l", "timm-rexnet_130",
             "timm-skresnext50_32x4d", "timm-efficientnet_x_b3", "timm-mambaout_kobe", "timm-regnetz_c16",
             # exam v21's named CNNs (dm_nfnet_f0: no normalization layers, weights standardized in the graph, as
             # nf_resnet26; mixnet_xl: mixed depthwise kernels)
             "timm-inception_resnet_v2", "timm-cs3edgenet_x", "timm-mobilenetv4_conv_large", "timm-darknet53",
             "timm-dm_nfnet_f0", "timm-fbnetv3_g", "timm-mixnet_xl", "timm-xception65",
             # exam v22's named CNNs (resnest50d_4s2x40d: split attention, a channel Softmax over 4 radix groups, no
             # token attention map, as resnest26d; dpn92: dual-path residual Add and dense Concat)
             "timm-hrnet_w18", "timm-dpn92", "timm-cs3sedarknet_x", "timm-ese_vovnet57b",
             "timm-resnest50d_4s2x40d", "timm-hgnetv2_b4", "timm-xception71", "timm-inception_next_small",
             # exam v23's named CNNs (gcresnet50t: global-context blocks, a spatial Softmax pooling, no token attention
             # map, as gcresnet33ts; convformer_s36: separable-conv token mixers, as poolformer's pooling)
             "timm-tresnet_l", "timm-convformer_s36", "timm-gcresnet50t", "timm-res2net50_26w_8s",
             "timm-darknetaa53", "timm-dla102x", "timm-fasternet_m", "timm-regnetz_d8",
             # exam v24's named CNNs (ecaresnet101d: efficient channel attention, a Conv1d over the pooled channels,
             # no token attention map, as eca_resnet33ts; ghostnetv2_160: DFC attention, depthwise convs gating the
             # features, as ghostnetv2_100)
             "timm-resnetrs101", "timm-ecaresnet101d", "timm-xception41p", "timm-dla169",
             "timm-ghostnetv2_160", "timm-hgnet_base", "timm-mobilenetv4_conv_aa_large", "timm-convnextv2_tiny",
             # exam v25's named CNNs (mambaout_tiny: gated depthwise-conv blocks, neither an SSM nor attention)
             "timm-efficientnet_b3", "timm-resnext101_32x8d", "timm-densenet264d", "timm-hrnet_w32",
             "timm-rexnet_200", "timm-regnety_080", "timm-vovnet57a", "timm-mambaout_tiny"}


@dataclass
class Split:
    train: list = field(default_factory=list)       # architecture names
    exam: list = field(default_factory=list)
    family: dict = field(default_factory=dict)      # arch -> family ('named' for named models)
    exam_group: dict = field(default_factory=dict)  # exam arch -> 'held-out family' | 'fresh seed' | 'named'
    held_out_families: list = field(default_factory=list)

    def check(self) -> None:
        both = set(self.train) & set(self.exam)
        if both:
            raise HaseError(f"architectures in both splits: {sorted(both)[:5]}", SPLIT_FILE)
        seeds = lambda archs: {(self.family[a], spec_of(a)["seed"]) for a in archs if self.family[a] != "named"}  # noqa: E731
        shared = seeds(self.train) & seeds(self.exam)
        if shared:
            raise HaseError(f"(family, seed) in both splits: {sorted(shared)[:5]}", SPLIT_FILE)
        leaked = [a for a in self.train if self.family[a] in self.held_out_families]
        if leaked:
            raise HaseError(f"held-out family in the training split: {leaked[:5]}", SPLIT_FILE)

    def refuse_trained(self, models) -> None:
        """The exam scorer's guard: a model whose architecture trained a term is not an exam model."""
        trained = sorted({paths.model_arch(m) for m in models} & set(self.train))
        if trained:
            raise HaseError(f"refusing to score {len(trained)} architecture(s) of the training split as exam: "
                            f"{', '.join(trained[:5])}")

    def is_cnn(self, arch: str) -> bool:
        return self.family[arch] in CNN_FAMILIES or arch in NAMED_CNN

    def split_of(self, arch: str) -> str:
        return "train" if arch in self.train else "exam" if arch in self.exam else "outside"


def _seeds(block: dict) -> list:
    """seeds: [first, end) or a list of such ranges."""
    rs = block["seeds"]
    rs = [rs] if rs and not isinstance(rs[0], (list, tuple)) else rs
    return [s for lo, hi in rs for s in range(int(lo), int(hi))]


def joined_exam_archs(files, have, family: dict, where=None) -> list:
    """The architectures of each scored exam in `files` (split files) that are not in `have`, in order; their
    families go into `family`. Used by load_split (a split's `train: join_exams`) and by fit_corpus_timeline."""
    out, seen = [], set(have)
    for f in files or []:
        p = paths.REPO / f
        if not p.exists():
            raise HaseError(f"train: join_exams '{f}': corpus split file not found", where or p)
        joined = load_split(p)
        new = [a for a in joined.exam if a not in seen]
        out += new
        seen.update(new)
        family.update({a: joined.family[a] for a in new})
    return out


def load_split(path=SPLIT_FILE) -> Split:
    path = Path(path)
    if not path.exists():
        raise HaseError("corpus split file not found", path)
    d = yaml.safe_load(path.read_text())
    joins = []
    if isinstance(d.get("train"), dict) and "from" in d["train"]:   # a later exam over an earlier version's training
        base = paths.REPO / d["train"]["from"]                       # split, unchanged (corpus_split_v12.yaml)
        if not base.exists():
            raise HaseError(f"train: from '{d['train']['from']}': corpus split file not found", path)
        # join_exams: split files whose exam was scored and read; its architectures join this training split
        # (corpus_split_v16.yaml: v11's training and exam v15), as fit_corpus_timeline's join_exams does at fit time
        joins = list(d["train"].get("join_exams") or [])
        d["train"] = yaml.safe_load(base.read_text())["train"]
    s = Split(held_out_families=list(d["exam"]["held_out_families"] or {}))
    for fam in list(d["train"]["families"]) + s.held_out_families + list(d["exam"]["fresh_seeds"]):
        if fam not in FAMILIES:
            raise HaseError(f"unknown family '{fam}'", path)
    for fam, blk in d["train"]["families"].items():
        for seed in _seeds(blk):
            s.train.append(f"{fam}-s{seed}")
            s.family[s.train[-1]] = fam
    for a in d["train"]["named"]:
        s.train.append(a)
        s.family[a] = "named"
    s.train += joined_exam_archs(joins, s.train, s.family, path)
    for grp, key in (("held-out family", "held_out_families"), ("fresh seed", "fresh_seeds")):
        for fam, blk in (d["exam"][key] or {}).items():
            for seed in _seeds(blk):
                a = f"{fam}-s{seed}"
                s.exam.append(a)
                s.family[a], s.exam_group[a] = fam, grp
    for a in d["exam"]["named"]:
        s.exam.append(a)
        s.family[a], s.exam_group[a] = "named", "named"
    s.check()
    return s


def main() -> int:
    s = load_split()
    from collections import Counter
    for name, archs in (("train", s.train), ("exam", s.exam)):
        fams = Counter(s.family[a] for a in archs)
        print(f"{name}: {len(archs)} architectures ({sum(not s.is_cnn(a) for a in archs)} not CNNs): "
              + ", ".join(f"{f} {n}" for f, n in sorted(fams.items())))
    allv = s.train + s.exam
    print(f"corpus: {len(allv)} architectures, {100 * sum(not s.is_cnn(a) for a in allv) / len(allv):.0f}% not "
          f"CNNs; splits disjoint by architecture and (family, seed)")
    return 0


if __name__ == "__main__":
    run_main(main)
