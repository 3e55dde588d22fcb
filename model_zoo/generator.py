"""Phase 1b: a seeded generator of model architectures across families, exported to ONNX (opset 17).

  python model_zoo/build_corpus.py --set split=train         # export every training architecture, 3 configs each
  python model_zoo/build_corpus.py --set 'archs=[vit-s3]' --set max_configs=1
  python model_zoo/corpus.py                                  # the split, counted per family (no export)

An architecture is `<family>-s<seed>` (generated) or a named torchvision (`resnet18`) or timm (`timm-<name>`)
model. `arch_spec(family, seed)` is a pure function of the two: the same seed gives the same graph and the
same configs on any machine. Families (each with its own parameter ranges, FAMILIES below):
  cnn_plain    dense convs: basic/bottleneck blocks, kernel 1-7, stride, dilation
  cnn_mobile   inverted residuals: depthwise kxk, squeeze-and-excite, channel shuffle, ReLU/HardSwish/SiLU
  cnn_grouped  ResNeXt/RegNet bottlenecks: grouped 3x3 convs of group width 8-64, optional SE
  vit          patch embedding + pre-norm transformer blocks (manual attention or SDPA), class token or pooling
  swin         windowed attention on a 2-D grid, shifted windows, relative bias, patch merging
  hybrid       conv stages then attention stages over the flattened map (MobileViT/LeViT/EfficientFormer-like)
  mixer        MLP-Mixer (token and channel MLPs) or PoolFormer (avg-pool mixing, GroupNorm)
  encoder      BERT-like post-norm encoder over a float input [B, S, D] (sequence 32-1024)
  pvt          Pyramid Vision Transformer (v1/v2): 2-4 stages of patch embedding (overlapping or not) and
               spatial-reduction attention (keys/values from a stride-sr conv, sr 8/4/2/1), optional conv FFN
  decoder      GPT-like pre-norm causal decoder over a float input [B, S, D] (sequence 32-1024): an -inf mask
               added to the scores or SDPA is_causal, tanh or exact GELU, a per-token head of 512-4096
  unet         U-Net for segmentation: 2-4 levels down (max-pool or stride-2 conv) and up (transposed conv or
               nearest/bilinear upsample + conv), skips by concatenation, a 1x1 conv to 2-21 classes
  conformer    speech Conformer encoder over a float input [B, T, F] (T 64-1024 frames, F 80 or 128 mel bins):
               two stride-2 Conv2d subsampling, then macaron blocks (half-step SiLU FFNs, self-attention, a
               convolution module: pointwise Conv1d, GLU, depthwise Conv1d of kernel 7-31, BatchNorm1d)
  fpn          detector: a residual or inverted-residual backbone of 3-5 stages, a feature pyramid (lateral 1x1
               convs, nearest x2 Resize top-down, optional stride-2 bottom-up PAN path), a head shared over
               levels whose outputs are flattened into one [B, anchors, 4 + classes] tensor
  convnext     ConvNeXt (v1/v2): 4x4 patchify stem, 2-4 stages of depthwise kxk conv, channels-last LayerNorm,
               Linear-GELU-Linear MLP with layer scale, optional global response norm (ReduceL2)
  tcn          temporal convolution network over a float input [B, T, C_in] (T 64-2048, C_in 40-128): 6-24
               residual blocks of dilated Conv1d (kernel 2-7, dilation 1..2^k, causal or same padding, optionally
               depthwise-separable), WaveNet-gated/GLU/ReLU/GELU, no norm/BatchNorm/LayerNorm, summed skips
  perceiver    Perceiver over an image: patch or conv stem to tokens + learned positions, a learned latent array
               (32-256 x 128-512) that cross-attends to the tokens 1-2 times (manual or nn.MultiheadAttention),
               2-8 pre-norm latent self-attention blocks, mean over the latents
  dense        densely connected CNNs: DenseNet (BN-act-conv bottleneck layers, each output concatenated to all
               before it; BN-conv1x1 + avg-pool transitions) or VoVNet (3-5 conv3x3, optionally depthwise-separable,
               concatenated once per block, a 1x1 conv, optional effective-SE with HardSigmoid; max-pool between)
  rnn          recurrent stack over a float input [B, T, C_in] (T 32-512, C_in 64-512): an optional Conv1d-BN-ReLU
               front-end (kernel 3/5, stride 1/2), 1-4 layers of nn.LSTM or nn.GRU (hidden 64-512, optionally
               bidirectional; exported as ONNX LSTM/GRU nodes, one per layer, never unrolled), then the sequence
               itself, a per-step Linear head or a mean over time + Linear
  linattn      linear attention over image tokens: EfficientViT-like (conv stem, MBConv stages with depthwise kxk,
               ReLU linear attention ReLU(Q) (ReLU(K)^T [V, 1]) normalised by its last column, optional multi-scale
               tokens from depthwise 3/5 + grouped 1x1 convs on QKV) or a linear transformer / Performer-like
               variant (patch or conv stem, pre-norm blocks of elu+1 feature attention by MatMul or Einsum, MLP)
  ssm          state-space sequence model over a float input [B, T, C_in] (T 64-1024, C_in 64-256), computed in
               parallel (no Loop/Scan): a Linear to d_model 64-384, 2-8 pre-norm residual blocks (LayerNorm or a
               written-out RMSNorm) of either S4D (real diagonal A < 0, state 8-64, the kernel
               K[t] = C diag(exp(t dt A)) B from arange and exp, applied as a causal depthwise Conv1d of length T or
               a cap 32-256, D skip, GELU, Linear) or Mamba-like selective SSM (expand 2, a causal depthwise Conv1d
               of kernel 4, SiLU, softplus input-dependent dt per head, SSD chunked scan: cumsum of log-decays, exp,
               lower-triangular masked matmuls within chunks of 16-64, the state carried over <= 16 chunks by
               unrolled matmuls, SiLU gate), then the sequence, a per-step Linear or a mean over time + Linear
  gan          image generator over [B, C, s, s] to RGB of at most 256 x 256: a latent grid (C 64-256, s 4-16;
               DCGAN-like, width 128-512 halving over 3-5 up stages to 32) or an image (C 3, s 32-256; a kxk stem of
               width 32-64, 0-2 stride-2 downs, as many ups, and 0-2 more for x2/x4 super-resolution: pix2pix,
               CycleGAN, ESRGAN-like); up stages of a stride-2 ConvTranspose2d or nearest/bilinear Upsample + 3x3
               conv (1-2 convs each), BatchNorm, InstanceNorm or none, ReLU/LeakyReLU, 0-9 residual blocks at the
               bottleneck, a conv + Tanh to RGB
  moe          ViT whose MLP is a mixture of 4-16 experts (in every block or every other; depth 2-8, D 96-512): a
               router Linear, softmax then TopK k 1-2 (or TopK of the logits then softmax), the weights put back at
               their experts by ScatterElements or a one-hot Equal mask, every expert computed densely (Einsum over
               stacked [E, H, D] weights or a MatMul batched over E, all experts' hidden width at most 32 D) and
               summed with the gate weights; patch or conv stem, 8 x 8 to 24 x 24 tokens
  detr         detection transformer: a ResNet-like backbone of 3-4 stages (basic or bottleneck, stride 16 or 32,
               input 256-512), a 1x1 conv to D 128-256, learned positions, 1-4 post-norm encoder layers, 1-4
               decoder layers of 20-100 learned object queries (self-attention, cross-attention to the memory,
               positions on queries and keys; manual, SDPA or nn.MultiheadAttention), a class Linear and a 3-layer
               box MLP + sigmoid, concatenated into [B, queries, classes + 1 + 4]
  yolo         single-stage detector (YOLOv5/v8-like): Conv-BN-SiLU/LeakyReLU, a 3x3 or 6x6 stride-2 stem, 4 stages
               of a stride-2 conv and C2f (Split, bottlenecks with residuals, Concat) or C3 blocks (widths 64-1024
               capped at 512-1024, x 0.25-0.75; depths 3-6-6-3 x 0.33-0.67), SPPF (3 chained MaxPool k 5 stride
               1 + Concat), a PAN neck (nearest x2 Resize + Concat top-down, stride-2 convs + Concat bottom-up), heads
               at 2-3 scales: anchor-based (a 1x1 conv to 1-3 anchors x (5 + classes), Reshape/Transpose, Sigmoid)
               or anchor-free decoupled (3x3 conv towers, box and class 1x1 convs, optional DFL softmax), classes
               1-80, optionally decoded to boxes in pixels, the scales' outputs flattened and concatenated
  pointnet     point-cloud classifier over [B, 3, N] (N 256-4096 points): PointNet (shared MLPs as Conv1d k 1 +
               BatchNorm + ReLU, an optional input T-Net and feature T-Net predicting a 3x3 / 64x64 matrix applied by
               MatMul, global max over the points by ReduceMax or MaxPool1d) or DGCNN (N 256-1024: 2-4 EdgeConvs:
               pairwise distances by MatMul, TopK k 10-20 nearest neighbours, a Gather of their features, Conv2d 1x1
               + BatchNorm + LeakyReLU, max over k; the graph recomputed per layer or once on the coordinates; a
               Conv1d to 512-1024, max and mean pooling), then a Linear-BN-ReLU head to 10-40 classes
  wav2vec      speech encoder over a raw waveform [B, 1, T] (T 4000-32000 samples): a feature extractor of 5-7 strided
               Conv1d (kernel 10 stride 5, then 3/2 and 2/2, widths 256-512, GroupNorm on the first or LayerNorm on
               every layer, GELU), LayerNorm + Linear projection to D 256-768, a grouped Conv1d positional embedding
               (kernel 64-128, groups 8-16, GELU), 2-8 post- or pre-norm transformer layers (manual or SDPA
               attention, GELU MLP), then the frames, a per-frame CTC Linear or a mean over frames + Linear
  video3d      video classifier over a clip [B, 3, T, H, W] (T 8/12/16 frames fixed per architecture, size H = W
               64-160): C3D (3x3x3 Conv3d-BatchNorm3d-ReLU, MaxPool3d 1x2x2 after the stem and 2x2x2 between
               stages), R3D (residual basic blocks of 3x3x3 convs, stride 2 in time and space) or R(2+1)D (each
               3x3x3 factorized into 1x3x3 + 3x1x1 convs); stem 32-64 wide, 3-4 stages of 1-2 blocks, widths doubling
               up to 256-512, a global average pool (GlobalAveragePool over T, H, W) and a Linear to 101-600 classes
  deeplab      semantic segmentation (DeepLabv3/v3+): a stride-4 stem, 4 stages of 1-3 basic or bottleneck residual
               blocks (stem 32-64 wide, doubling), output stride 16 (the last stage at stride 1, dilation 2) or 8
               (the last two, dilations 2 and 4); ASPP (a 1x1 conv, 3x3 convs at rates 3-36, optionally depthwise
               separable, image pooling bilinearly upsampled), Concat, a 1x1 projection to 128-256; v3: a 3x3 conv
               and classifier (19/21/150 classes), v3+: a Concat with the stride-4 features (1x1 to 48) and two 3x3
               convs; bilinear Resize (align_corners False) back to the input, 128-512
  dlrm         recommender (DLRM-like) over ONE float tensor [B, 1, n_dense + tables x L] (the corpus tooling feeds
               one float input; size: L 1-8 lookups per table): a bottom MLP on 8-32 dense features to D 16-128,
               the index part cast to int64 rows inside the model (|x| * 7919, Cast, modulo the table's rows), 4-26
               nn.Embedding tables of 1e3-1e5 rows (<= ~32 M parameters in all; a Gather per table, or one Gather
               in the concatenated table after row offsets are added; ReduceSum over L), pairwise dot products of
               the stacked [B, T + 1, D] by MatMul, the upper triangle by a constant-index Gather (or all of it),
               Concat with the dense vector, a top MLP and Sigmoid; batches 1, 64-512 and 1024-2048
  vocoder      neural vocoder (HiFi-GAN/MelGAN-like) over a mel spectrogram [B, S, 80] (size: S 32-256 frames,
               transposed to [B, 80, S] inside): a Conv1d pre-net of kernel 7 (zero or reflection padding), 2-4 up
               stages of LeakyReLU + ConvTranspose1d (stride 2/4/8, kernel 2 x stride; hop 64-512), widths halving
               from 128-512 (at least 16), each followed by HiFi-GAN's multi-receptive-field fusion (residual blocks
               of dilated Conv1d, kernels 3/7/11, dilations 1/3/5, two convs per dilation (v1) or one (v2),
               averaged) or MelGAN's residual stack (kernel 3, dilations 1/3/9, 1x1 shortcut convs), a Conv1d of
               kernel 7 to one channel and Tanh: [B, 1, S x hop]; sizes over ~100 GFLOP at batch 1 are left out
  superres     image super-resolution over [B, 3, H, W] (size: H = W 32-256, the output 2x or 4x it, at most 512):
               a 3x3 head conv, 4-16 residual blocks of width 32-128 (conv-ReLU-conv, residual scaling 0.1 or
               none): EDSR (optional channel attention: global average pool, 1x1 convs, Sigmoid) or RCAN (2-4
               residual groups of channel-attention blocks, a closing conv and a skip each), a long skip from the
               head; per x2 a conv to 4C + PixelShuffle (DepthToSpace) or a nearest/bilinear Resize + conv + ReLU;
               a 3x3 tail conv to RGB, optionally + the input upsampled by a bilinear or bicubic Resize; sizes over
               ~100 GFLOP at batch 1 are left out
  gnn          graph neural network over a dense graph packed into ONE float tensor [B, N, F_in + N] (size: N 32-512
               nodes; F_in 16-128 node features, then the adjacency, sliced inside: edges where the value exceeds
               0.5-2.0 (Greater, Cast), self-loops by Max with the identity): 2-6 layers of hidden 32-256, GCN
               (degree by ReduceSum, Pow -0.5, Mul: D^-1/2 (A + I) D^-1/2 @ X @ W; optionally weighted edges) or
               GAT-like (1-8 heads, additive a^T [Wh_i || Wh_j] scores with LeakyReLU or scaled dot products, masked
               by Where or an additive -1e9, Softmax over the neighbours), ReLU/ELU, optional LayerNorm/BatchNorm
               and residual, then mean/max over the nodes + MLP to 2-40 classes, or per-node logits
  diffusion    denoising-diffusion UNet (DDPM/ADM/Stable-Diffusion-like) over an image or a latent [B, 3|4, H, W]
               (size: H = W 32-128): a per-sample timestep derived inside the graph from the input (1000 x
               Sigmoid(ReduceMean(x))), its sinusoidal embedding (Sin, Cos, Concat) and a 2-layer SiLU MLP to 4 x the
               base width; 2-3 levels (widths 32-192, base x 1-4) of 1-2 residual blocks (GroupNorm of <= 32 groups,
               SiLU, 3x3 conv, the embedding added or as scale-shift, a 1x1 shortcut when widths differ), stride-2
               3x3 conv downs, nearest Resize + 3x3 conv or ConvTranspose2d 4x4 ups, skips by Concat; self-attention
               (GroupNorm, q/k/v by 1x1 conv or Linear, 1-4 heads, manual Softmax or SDPA, at most 32 x 32 tokens) at
               the lowest 1-2 resolutions and in the middle block; GroupNorm, SiLU, 3x3 conv out to the input's
               channels (or twice them: a learned variance); sizes over ~100 GFLOP at batch 1 are left out
  implicit     coordinate MLP (NeRF/SIREN/Fourier-feature-like) over points [B, N, 3] (size: N 1k-64k points, B x N at
               most 1e6): coordinates scaled by 1/bound, a Fourier encoding (NeRF: per-octave Mul by 2^k pi, k < L
               4-10; or Gaussian: MatMul by a [3, 32-128] random matrix of scale 1-10), Sin and Cos, Concat (with the
               input or not); 4-10 Linear layers of width 64-256 with ReLU or Sin (SIREN: sin(w0 (Wx + b)), w0 30 or 1
               on the first), the encoding concatenated back in the middle; one head (SDF, occupancy or RGB: a Linear
               to 1 or 3, Sigmoid or none) or two (NeRF: density by ReLU/Softplus, and colour by a feature Linear,
               optionally Concat with an encoding of the direction x / |x|, Linear-ReLU-Linear, Sigmoid): [B, N, out]
  tasnet       Conv-TasNet-like speech separation over a waveform [B, 1, T] (size: T 4000-32000 samples): a Conv1d
               encoder (N 64-256 filters of kernel L 16-32, stride L / 2) + ReLU, a norm and a 1x1 conv to the
               bottleneck (64-128), R 1-3 repeats x X 4-8 blocks of 1x1 Conv1d to H 128-256, PReLU, global layer norm
               (mean and variance over channels and time, written out) or a per-frame channel norm (causal), a
               depthwise Conv1d of kernel 3 and dilation 2^x (same or causal padding), PReLU, norm, 1x1 convs back
               (residual) and optionally to a skip path (summed), PReLU, a 1x1 conv to 2-3 source masks (Sigmoid or
               ReLU) multiplied with the encoder output, a ConvTranspose1d decoder (shared, or one per source):
               [B, sources, (T' - 1) L / 2 + L] with T' = (T - L) // (L / 2) + 1
  hrnet        HRNet-like multi-resolution CNN over [B, 3, H, W] (size: H = W 192-384, multiples of 32): a stem of
               two stride-2 3x3 conv-BN-ReLU (32-64) to 1/4, stage 1 of 1-4 bottlenecks (64-256 wide) at 1/4, then
               1-3 more stages (2-4 in all), each adding a branch at half the lowest resolution (1/8, 1/16, 1/32;
               widths C, 2C, 4C, 8C with C 16-48), each of 1-3 modules: 1-4 basic or bottleneck blocks per branch,
               then the fusion (every output branch the ReLU of the sum of the others brought to it: stride-2 3x3
               conv-BN chains down, 1x1 conv-BN + nearest or bilinear Resize up); head: HRNet-C classification (a
               bottleneck per branch to 128-1024, stride-2 convs adding downwards, 1x1 conv to 1024-2048, global
               pool, Linear to 1000), pose heatmaps by a 1x1 conv on the 1/4 branch (16-17 joints) or HRNetV2 (all
               branches Resized to 1/4, Concat, 1x1 conv-BN-ReLU, 1x1 conv to 19-150 classes): [B, classes] or
               [B, classes, H/4, W/4]
  raft         RAFT-like optical flow over two frames stacked on the channels [B, 6, H, W] (size: H = W 128-384,
               multiples of 64): one residual conv encoder for both frames (in one batch; a 7x7 stride-2 conv, three
               stages of 1-2 blocks of widths 32-64 x (1, 1.5, 2) to 1/8; instance, batch or group norm; a 1x1 conv
               to 128-256), a context encoder of frame 1 (BatchNorm) or a 3x3 conv on its features to a tanh hidden
               state (64-128) and a ReLU input (64-128); an all-pairs correlation (MatMul [B, HW, C] x [B, C, HW]
               / sqrt(C)) pooled to 1-4 levels by AvgPool, a (2r + 1)^2 window (r 1-4) around the current flow
               looked up in each level every iteration (GridSample, or bilinear written out: Floor, Clip, Cast,
               GatherElements, zeros outside), or a local cost volume computed once (zero-padded slices, Mul,
               ReduceMean per displacement; 1-4 levels by AvgPool of the features, Resized back); 2-6 unrolled
               updates (a motion encoder of convs on the correlation and the flow, a ConvGRU of 3x3 or separable
               1x5 + 5x1 convs with Sigmoid, Tanh, Mul, a flow head) at 1/8; the flow up to [B, 2, H, W] by a
               bilinear Resize x 8 or RAFT's convex upsampling (a mask conv, Softmax over 3x3 neighbours, 7-D Mul and
               ReduceSum, Transpose)
  fttransformer  FT-Transformer over numeric tabular features [B, F] (size: F 8-256): every feature its own
               linear embedding (Mul by W [F, d] + b [F, d], d 64-256, ReLU or not) or a periodic one (Cos, Sin of
               2 pi x c with 8-24 learned frequencies a feature, a per-feature Linear by a batched MatMul, ReLU),
               a CLS token appended (Expand, Concat); 1-6 pre-norm layers (the first one's attention LayerNorm
               optional), 4-8 heads (q/k/v separate or fused, manual Softmax or SDPA; optionally the last layer's
               query the CLS token alone), a ReGLU, GEGLU or GELU FFN of 4/3-8/3 d; LayerNorm, ReLU, Linear to 1-100
               on the CLS token: [B, classes]
  vqvae        VQ-VAE-like image autoencoder over [B, 3, H, W] (size: H = W 64-256): 2-3 stride-2 convs (4x4 or 3x3;
               widths w, 2w, 2w with w 32-128), 0-2 residual blocks, a 1x1 conv to the code dimension (32-256); vector
               quantization against a codebook of 256-4096 codes (squared distances by ReduceSum and a MatMul, ArgMin,
               then a Gather of the codes or a one-hot (Equal, Cast) MatMul); a mirrored decoder (ConvTranspose 4x4
               stride 2, or nearest Resize + 3x3 conv), a 3x3 conv to 3 channels, Tanh or Sigmoid: [B, 3, H, W]
  capsnet      Capsule network with dynamic routing over [B, 1 or 3, H, W] (size: H = W 28-48): a conv (64-256, kernel
               5-9, stride 1-2, ReLU), primary capsules by a stride-2 conv (8-32 capsule maps of 4-8 dimensions,
               squashed: ReduceSum, Sqrt, Div, Mul), prediction vectors by one MatMul batched over the N input
               capsules, 1-3 unrolled routing iterations (Softmax over 5-16 classes, weighted ReduceSum, squash,
               agreement update), class lengths; optionally a reconstruction decoder masked by the longest class
               (Equal, Cast; 3 Linears, Sigmoid): [B, classes] or [B, classes + C H W]
  kan          Kolmogorov-Arnold network over numeric tabular features [B, F] (size: F 8-256; batches 1, 64-256,
               1024-4096): 1-3 hidden layers (16-128) and an output layer (1-100), each edge a learned function: a
               B-spline basis (grid 3-10, order 2-3, Cox-de Boor recursion written out: GreaterOrEqual, Less, And,
               Cast, Sub, Div, Mul, Slice) or Gaussian radial functions (Exp) over LayerNorm'd inputs, flattened and
               a MatMul with the spline coefficients, plus a SiLU base branch (a Linear) or not; LayerNorm between
               layers or not: [B, classes]
  nascell      NAS-Bench-201/DARTS-like cell network over [B, 3, H, W] (size: H = W 32-128): a 3x3 conv-BN stem
               (16-64), 3 stages of 1-5 copies of one drawn cell (4 nodes, every earlier node feeding every later
               one by an edge op: none, skip, ReLU-conv1x1-BN, ReLU-conv3x3-BN, avg-pool 3x3; the DARTS space also
               separable 3x3, dilated 3x3 and max-pool 3x3; a node sums its inputs), a residual stride-2 block
               between stages (widths C, 2C, 4C), BN-ReLU, global pool, Linear to 10-1000
  neuralode    neural ODE over numeric tabular features [B, F] (size: F 8-256; batches 1, 64-256, 1024-4096): a
               Linear lift to D 32-256, an MLP vector field (1-3 hidden layers of 32-256, Tanh/Softplus/ReLU/SiLU,
               the time concatenated as a constant column or not) integrated by 2-10 unrolled fixed steps of Euler,
               midpoint or RK4 (1, 2 or 4 field evaluations a step, the weights shared), a Linear to 1-100:
               [B, classes]: many small MatMuls and elementwise ops
  gmlp         gMLP/aMLP over image patches (size: H = W 64-256, at most 1024 tokens): a patch conv to D 64-256, 2-12
               pre-norm blocks of a channel Linear to d_ffn (2-6 D), GELU, the spatial gating unit (split in two,
               LayerNorm, a token-mixing Linear over the T tokens (by Linear on the transposed map or a 1x1 Conv1d over
               tokens), multiplied with the other half; aMLP: plus a one-head attention of 32-64 computed on the
               block's input), a Linear back to D, a residual; LayerNorm, mean over tokens, Linear to 1000
  xcit         XCiT-like cross-covariance attention over image patches (size: H = W 96-384, at most 2304 tokens): a
               patch conv to D 96-384, 2-12 blocks of LayerNorm, XCA (q and k L2-normalised over the tokens, a D_h x
               D_h attention map per head scaled by a learned temperature, Softmax, applied to v: linear in the
               tokens), optionally a local patch interaction (depthwise 3x3 conv, GELU, BatchNorm, depthwise 3x3 on
               the token grid), an MLP (ratio 2-4); LayerNorm, mean over tokens, Linear to 1000
  stn          spatial-transformer CNN over [B, 3, H, W] (size: H = W 64-256): 1-2 spatial transformers (a small
               localization CNN, max pools, a Linear to the 6 affine parameters started at the identity; the
               sampling grid by a MatMul of the base grid with the affine matrix; GridSample, bilinear or nearest,
               zeros or border padding), each followed by a stage of 1-3 conv-BN-ReLU layers (16-128) and a max pool;
               global pool, Linear to 10-1000
  aft          Attention Free Transformer over a float sequence [B, S, D] (size: S 32-1024; D 64-512): 2-8 pre-norm
               blocks of AFT (simple: Sigmoid(q) times a Softmax-over-tokens weighted sum of v; full: learned S x S
               position biases, exp(w) MatMul exp(k - max k) * v over exp(w) MatMul exp(k - max k)) and a GELU MLP
               (ratio 2 or 4); LayerNorm, mean over tokens, Linear to 10-1000
  res2net      Res2Net-like CNN over [B, 3, H, W] (size: H = W 96-320): a 3x3 or 7x7 stride-2 stem, max pool, 3-4
               stages of 1-3 bottlenecks (a 1x1 conv to scale x width, split in `scale` 2-6 groups of width 8-32,
               each group after the first a 3x3 conv of its own slice plus the previous group's output (the first
               block of a strided stage: each slice alone, the last slice average-pooled), Concat, 1x1 conv,
               optional squeeze-excite, a residual); global pool, Linear to 1000
  hourglass    stacked-hourglass pose network over [B, 3, H, W] (size: H = W 128-384, a multiple of 4 x 2^depth): a
               7x7 stride-2 stem, residual blocks, max pool, 1-3 hourglasses of depth 2-4 (max pool, residual blocks,
               recursion, residual blocks, nearest x2 Resize added to the skip branch's residual blocks), 1x1 heads to
               8-32 heatmaps, intermediate heads merged back by 1x1 convs: [B, joints, H/4, W/4]
  retnet       RetNet-like retention over a float sequence [B, S, D] (size: S 32-1024; D 128-512, heads 2-8): 2-8
               pre-norm blocks of parallel retention (q k^T times a causal decay mask gamma^(n-m), a gamma per head,
               no Softmax, applied to v), a per-head GroupNorm, a SiLU gate, a Linear out, and a GELU or SwiGLU FFN
               (ratio 2-4); LayerNorm, the last token, Linear to 10-1000
  convmixer    ConvMixer over [B, 3, H, W] (size: H = W 96-320, a multiple of the patch): a patch-embedding conv
               (patch 4-16, stride = patch), GELU, BatchNorm; 4-16 blocks of a depthwise kxk conv (k 5-9, 'same'
               padding), GELU, BatchNorm and a residual, then a pointwise 1x1 conv, GELU, BatchNorm (width 128-768
               throughout, one resolution); global average pool, Linear to 10-1000
  wavenet      WaveNet-like stack over a float input [B, C_in, T] (size: T 1024-16000, C_in 1-80): a 1x1 conv to
               32-128 residual channels, 1-3 cycles of 6-10 causal dilated Conv1d layers (kernel 2-3, dilation
               doubling 1..512 within a cycle, left padding by Pad, groups 1), each a gated activation
               tanh(x_f) * sigmoid(x_g), a 1x1 residual conv added back and a 1x1 skip conv (64-256 channels) summed
               over layers; ReLU, 1x1 conv, ReLU, 1x1 conv to 1-256 output channels per step: [B, out, T]
  t5enc        T5-like encoder over a float input [B, T, D] (size: T 32-1024; D 128-768, heads 2-12): no absolute
               positions; 2-12 pre-norm blocks of a written-out RMSNorm, self-attention (no biases, no 1/sqrt(d)
               scale, as T5) plus a relative position bias (a learned [buckets 16-64, heads] table gathered by a
               constant [T, T] table of T5's bidirectional log buckets, [1, heads, T, T], shared by all blocks or one
               per block) before Softmax, and a gated-GELU FFN (GELU(x wi_0) * (x wi_1), wo; ratio 2-4); a final
               RMSNorm: [B, T, D]
  llama        LLaMA-like pre-norm causal decoder over a float input [B, T, D] (size: T 32-1024; D 128-1024): rotary
               position embeddings (constant cos/sin tables, rotate-half by Slice, Neg and Concat; base 1e4 or 5e5)
               on q and k, grouped-query attention (1, 2, 4 or all key/value heads, repeated by Expand and Reshape),
               a causal -inf mask added to the scores or SDPA is_causal, written-out RMSNorm, a SwiGLU FFN
               (SiLU(x W1) * (x W3), W2; hidden 8/3 D rounded to 64, x1-1.3), 2-12 blocks; a final RMSNorm and an
               optional per-token head (1000 or 4096): [B, T, D or vocab]
  maxvit       MaxViT-like over [B, 3, H, W] (size: H = W 96-448, a multiple of window x 2^(stages + 1)): a stem of
               two 3x3 convs (the first stride 2); 2-4 stages of 1-3 blocks, each an MBConv (1x1 expand x4,
               depthwise 3x3 of stride 2 in a stage's first block, squeeze-and-excite, 1x1 project, BatchNorm, GELU;
               a pooled 1x1 shortcut when it strides), then block attention (non-overlapping P x P windows) and
               grid attention (a dilated G x G grid), each LayerNorm, multi-head attention (heads of 32) with an
               optional learned relative position bias gathered by constant ids, a residual and a LayerNorm MLP
               (x4); window 7 or 8; global average pool, LayerNorm, Linear to 10-1000
  focalnet     FocalNet-like over [B, 3, H, W] (size: H = W 128-320, a multiple of 4 x 2^(stages - 1)): a 4x4 patch
               conv and LayerNorm, 3-4 stages (width 64-128 doubling; a 2x2 stride-2 conv between), blocks of
               LayerNorm, focal modulation (a Linear to q, context and L + 1 gates, L = 2-3 levels of depthwise
               kxk conv + GELU on the context (k 3, 5, 7), each gated and summed, a gated global average context,
               a 1x1 conv modulator multiplied into q, a Linear out), a residual and a LayerNorm GELU MLP (x4),
               channels last; global average pool, LayerNorm, Linear to 10-1000
  levit        LeViT-like over [B, 3, H, W] (size: H = W 128-320, a multiple of 16): a stem of four stride-2 3x3
               conv-BN (Hardswish between) to 1/16; 3 stages of 1-4 blocks on tokens, each attention whose q, k, v
               and output are Linear + BatchNorm over the flattened tokens (key dim 16 or 32, value dim 2-4x), a
               learned bias per head gathered by constant relative-offset ids added to the scores, Hardswish before
               the output, and a Linear-BN MLP (x2, Hardswish); between stages a shrinking attention whose queries are
               the stride-2 subsampled tokens; mean over tokens, BatchNorm, Linear to 10-1000
  poolformer   PoolFormer (MetaFormer) over [B, 3, H, W] (size: H = W 128-384, a multiple of 32): a 7x7 stride-4
               conv, 4 stages (widths doubling from 32-96, the third stage deep) with a 3x3 stride-2 conv between;
               blocks of GroupNorm(1), a token mixer AvgPool(k 3 or 5, stride 1, count_include_pad off) minus its
               input, an optional per-channel layer scale, and a GroupNorm 1x1-conv GELU MLP (x3 or x4); GroupNorm,
               global average pool, Linear to 10-1000
  mobilevit    MobileViT-like over [B, 3, H, W] (size: H = W 128-384, a multiple of 64): a stride-2 3x3 conv-BN-SiLU,
               MobileNetV2 blocks (1x1 expand x2-4, depthwise 3x3, 1x1 project, BN, SiLU), then 3 stages of a stride-2
               MV2 block and a MobileViT block: 3x3 and 1x1 convs to D, unfolded into 2x2 patch groups by Reshape and
               Transpose ([B x 4, N, D]), 1-4 pre-norm transformer layers (heads of 32 or 64, SiLU MLP x2), folded
               back, a 1x1 conv, concatenated with the block's input and fused by a 3x3 conv; a 1x1 conv (x4),
               global average pool, Linear to 10-1000
  resmlp       ResMLP-like over [B, 3, H, W] (size: H = W 128-384, a multiple of the patch, at most 576 tokens): a
               patch-embedding conv (patch 8, 14 or 16, stride = patch, width 192-512), 4-16 blocks of an Affine
               norm (a per-channel Mul and Add, no statistics), a cross-patch Linear over the token axis (Transpose,
               Linear N -> N, Transpose; or a [N, N] weight MatMul'ed from the left and a bias), a per-channel layer
               scale and a residual, then an Affine, a Linear GELU Linear channel MLP (x2-4), a layer scale and a
               residual; an Affine, mean over tokens, Linear to 10-1000
  ghostnet     GhostNet-like over [B, 3, H, W] (size: H = W 128-384, a multiple of 32): a stride-2 3x3 conv-BN-ReLU
               (width 8-20), ghost bottlenecks: a ghost module (a 1x1 conv-BN-ReLU to ceil(C / ratio) channels, a
               cheap depthwise 3x3 conv-BN-ReLU making (ratio - 1) more of each, concatenated, sliced to C; ratio 2
               or 3) expanding x2-6, a depthwise kxk stride-2 conv-BN where the block strides (k 3 or 5), an optional
               squeeze-and-excite (ReLU, HardSigmoid), a ghost module without ReLU projecting, and a residual (a
               depthwise-then-1x1 conv-BN shortcut where the shape changes); 5 stages (widths 24, 40, 80, 112, 160
               x0.5-1.3, 1-5 blocks); a 1x1 conv-BN-ReLU (x6), global average pool, a 1x1 conv (1024 or 1280),
               ReLU, Linear to 10-1000
  hardnet      HarDNet-like over [B, 3, H, W] (size: H = W 128-384, a multiple of 32): a stride-2 3x3 conv-BN-act
               (24 or 32), a 3x3 (HarDNet-DS: 1x1) conv-BN-act (48 or 64), a 3x3 stride-2 max pool (DS: a depthwise
               stride-2 3x3 conv-BN); 4-5 stages (HarDNet-39/68-like) of a harmonic dense block of 4-16 layers
               (layer l reads the Concat of layers l - 2^i for every 2^i dividing l, layer 0 the block's input; its
               width growth 10-160 x grmul (1.6 or 1.7)^(links - 1), even; each a 3x3 conv-BN-act, or (DS) a 1x1
               conv-BN-act and a depthwise 3x3 conv-BN; the block's output the Concat of its odd layers and its last),
               a 1x1 conv-BN-act transition (widths 96-1024 x0.5-1), a 2x2 average pool (DS: a depthwise stride-2 conv)
               after every stage but the last (68-like: nor the second); act ReLU or ReLU6 (Clip); global average
               pool, Linear to 10-1000
  nystromformer  Nystromformer encoder over a float sequence [B, S, D] (size: S 128-2048, a multiple of the landmarks,
               at least 2 a segment; D 64-512, heads 2-8 of 32 or 64): learned positions; 2-8 pre- or post-norm blocks
               of Nystrom attention (fused q/k/v Linear; q and k averaged over S / m segments to m = 16-128 landmarks
               (Reshape, ReduceMean); three Softmax maps softmax(q kl^T) [S, m], softmax(ql kl^T) [m, m] and
               softmax(ql k^T) [m, S]; the [m, m] map's Moore-Penrose pseudo-inverse by 3-8 unrolled Newton-Schulz
               steps (each 4 m x m MatMuls and 3 Subs from scaled identities, started at A^T over its largest column
               and row sums); out = k1 (pinv (k3 v)); optionally plus a depthwise (17-65 x 1) Conv2d of v over the
               tokens, a group per head) and a GELU FFN (x2 or x4); a final LayerNorm (pre-norm), then the sequence
               [B, S, D] or a mean over tokens and a Linear to 2-1000
  rednet       RedNet-like (involution) over [B, 3, H, W] (size: H = W 128-320, a multiple of 32): a stride-2 3x3
               conv-BN-ReLU (16 or 32), optionally a 3x3 involution-BN-ReLU, a 3x3 conv-BN-ReLU (32 or 64), a 3x3
               stride-2 max pool; 4 stages (RedNet-26/38/50-like: 1-3, 2-4, 4-6, 1-3 bottlenecks; mid widths 64-512
               x0.5-1, a multiple of the group channels, out x4) of a 1x1 conv-BN-ReLU, a k x k involution (k 3, 5 or
               7; a per-pixel kernel for each group of 8-32 channels generated from the input: a 2x2 average pool
               where it strides, a 1x1 conv-BN-ReLU reducing x2 or x4, a 1x1 conv to groups x k^2, then a Softmax over
               the k^2 taps (SAN's patchwise weights; bounded: with random weights an unbounded kernel, linear in the
               input, squares the activations block after block); applied to the input's k x k neighbourhood either by
               nn.Unfold (exported as im2col: Pad, Gathers, Transpose, Reshape) with a Mul and a ReduceSum over the
               taps, or by k^2 shifted (strided) Slices of the padded input, each a Reshape, a Mul with its tap's
               weights and an Add; stride 2 in the first block of stages 2-4), BN-ReLU, a 1x1 conv-BN, a residual (a
               stride-s 1x1 conv-BN shortcut where the shape changes) and a ReLU; global average pool, Linear to
               10-1000
  bigbird      BigBird/Longformer-like block-sparse encoder over a float sequence [B, S, D] (size: S 256-4096, a
               multiple of the block, at least 8 blocks; D 64-512, heads 2-8 of 32 or 64): learned positions; 2-8 pre-
               or post-norm blocks of sparse attention (fused q/k/v Linear; the sequence in blocks of w = 32-128
               tokens, each query block attending to its own, the previous and the next key blocks (Pad and Slices of
               the blocked keys, Concat), 0-3 random key blocks (a constant index Gather, per layer, from the seed;
               Longformer-like when 0) and the first g = 0-32 tokens as global keys (a broadcast MatMul); a constant
               -inf mask for the padded edge blocks and the global keys already in a window; one Softmax over the
               block's [w, (3 + r) w + g] scores, two MatMuls back; the g global queries attend to all S tokens (their
               own Softmax over [g, S]) and replace their rows by Concat) and a GELU FFN (x2 or x4); a final LayerNorm
               (pre-norm), then the sequence [B, S, D] or a mean over tokens and a Linear to 2-1000
  dgcnn        DGCNN-like point-cloud classifier over [B, 3, N] (size: N 256-2048), the graph always dynamic: 2-4
               EdgeConvs (widths 32-256, each as wide as the last or twice), each on the k nearest neighbours (k 8-32)
               of every point in that layer's input features (-|xi|^2 + 2 xi.xj - |xj|^2 by MatMul and ReduceSum,
               TopK), their features gathered by a Gather of the points-first [B N, C] rows at the flattened indices
               + b N, or by a GatherElements of the channels-first [B, C, N k] at the indices broadcast over C; edge
               features [xj - xi, xi] as [B, 2C, N, k], 1 or 2 shared 1x1 Conv2d-BN-LeakyReLU(0.2), a max over the
               neighbours; the Concat of every EdgeConv's output, a 1x1 Conv1d-BN-LeakyReLU to 256-1024, a global
               max (or max and mean) over the points, a Linear-BN-LeakyReLU head (1-2 layers of 128-512) to 10-40
  deformattn   Deformable-DETR-like encoder over [B, 3, H, W] (size: H = W 128-512, a multiple of 64): a ResNet-like
               backbone (a stride-2 3x3 stem of 32-64, 4 stages of 1-2 basic blocks doubling the width), its stride
               16 and 32 maps (2 levels), 8, 16 and 32 (3) or those and a stride-2 3x3 conv's 64 (4), each a 1x1 conv
               to D 128-256 + GroupNorm(32), flattened and concatenated into [B, N, D] tokens, 2-D sine positions + a
               learned level embedding; 2-6 pre- or post-norm layers of multi-scale deformable attention (4 or 8
               heads; every query samples 2-4 points per head and per level at its own pixel's centre + offsets (a
               Linear of the query, in the level's pixels; Deformable DETR's ray-pattern bias) from that level's
               value map by GridSample (bilinear, zeros, align_corners False), weighted by a Linear + Softmax over
               levels x points and summed, an output Linear; no query-key product) and a ReLU or GELU FFN (x2 or x4);
               a final LayerNorm (pre-norm), a mean over the tokens and a Linear to 10-1000
  condconv     CondConv/DynamicConv CNN over [B, 3, H, W] (size: H = W 128-320, a multiple of 32): a stride-2 3x3
               conv-BN-act stem (16-32), 3-5 stages (widths x1.5 or x2 a stage, at most 320 (mbconv) or 256 (basic);
               1-3 blocks, the first strided) of dynamic convs: a conv's kernel mixed per sample from K = 2-8 experts
               by routing weights from a global average pool, a Linear (or Linear-ReLU-Linear) and a Sigmoid
               (CondConv) or a Softmax over a temperature 1-30 (DynamicConv), one MatMul [B, K] x [K, C_out C_in/g k
               k], run as ONE grouped Conv over the input reshaped to [1, B C_in, H, W] with B g groups (the batch
               folded into the groups: the Conv's weight a computed tensor, not an initializer); one routing a block
               (from its input, shared by its convs) or one a conv; blocks mbconv (1x1 expand x3-6, depthwise 3x3 or
               5x5, optional squeeze-and-excite, 1x1 project, a residual where the shape stays; the depthwise conv
               dynamic, the 1x1s dynamic or static) or basic (two dynamic dense 3x3 convs, a residual, a static 1x1
               conv-BN shortcut where the shape changes); BN, ReLU, Hardswish or SiLU; a 1x1 conv-BN-act to
               512-1280, global average pool, Linear to 10-1000
  tabnet       TabNet over numeric tabular features [B, F] (size: F 16-512): BN, an initial feature transformer, then
               3-8 decision steps; a feature transformer is 1-2 GLU layers shared by all steps (their Linears shared,
               each step's BN its own) and 1-2 of the step's own, each a Linear (no bias) to 2 (n_d + n_a), BN or
               ghost BN (the batch cut into virtual batches of 128-512: a Split, one BN each, Concat), GLU, every
               layer but the first residual and scaled by sqrt(0.5); an attentive transformer is a Linear of the last
               step's attention part (n_a 8-64) to F, BN, times the prior, then sparsemax (a sort: TopK over all F
               features, CumSum, the support size by a compare and a ReduceSum, the threshold by GatherElements, a
               Clip at 0), entmax 1.5 (the same sort, two CumSums, Sqrt, squared) or Softmax; the prior multiplied by
               (gamma - mask), gamma 1-2; the masked features through the step's feature transformer, its decision
               part (n_d 8-64) ReLU'd and summed over the steps; a Linear to 1-100
  roihead      two-stage detector head over [B, 3, H, W] (size: H = W 256-640, a multiple of 64): a stride-2 3x3
               conv-BN-ReLU stem (16-32), 3-4 stages of 1-2 basic blocks (the first strided, widths doubling to at
               most 256), a 1x1 conv of the last map to 64-256 (and, FPN-like, that map upsampled x2 (nearest) onto a
               1x1 lateral of the stage before and a 3x3 conv), one map at stride 8-32; R = 16-256 boxes an image:
               fixed (a constant [R, 4], drawn from the seed) or proposals (an RPN-like 3x3 conv, objectness and
               deltas of 3 anchors a pixel by 1x1 convs, a TopK of R over all H W 3 anchors, the R in anchor order (a
               TopK sorting them), Gathers of their anchors and deltas, decoded (Exp) and clipped); the rois [B R, 5]
               (the batch index column by an Expand and a Concat) through RoiAlign (torchvision's roi_align: output 7
               x 7 or 14 x 14, sampling ratio 0 (adaptive) or 2, aligned or not) to [B R, C, o, o]; a box head:
               Flatten and two FC-ReLU of 256-1024 (o 7, Faster R-CNN's) or 2-4 3x3 conv-BN-ReLU (128-256), a mean and
               an FC-ReLU (o 7 or 14, at most 128 boxes at 14); class logits (2-91) and box deltas (class-specific or
               agnostic) by two Linears, concatenated to [B, R, classes + 4 (classes or 1)]
  sinkhorn     SuperGlue/LoFTR-like matcher over [B, 2, N, 3 + d] (size: N 64-1024 keypoints an image; x, y, score
               and a descriptor of d 64-256 each, both images in one input): descriptors to D 64-256 by a Linear (+ a
               keypoint MLP 3-32-64-D with LayerNorms of (x, y, score)), 0-9 attentional propagation layers
               alternating self and cross (1-8 heads, manual MatMul-Softmax-MatMul or SDPA; cross attends to the
               other image's set, the sets swapped by a flip; an MLP of [x, message]: Linear, LayerNorm, ReLU or
               GELU, Linear; a residual), a final Linear, scores d0 d1^T / sqrt(D) [B, N, N] by MatMul (a learned
               dustbin row and column by Concat, or not: [B, N + 1, N + 1]), T = 3-50 unrolled log-domain Sinkhorn
               iterations (u = log mu - logsumexp over the columns of Z + v, v = log nu - logsumexp over the rows of
               Z + u: two ReduceLogSumExp an iteration), the log assignment Z + u + v - norm
  nmsdet       one-stage detector with its post-processing in the graph, over [B, 3, H, W] (size: H = W 256-640, a
               multiple of 64): a stride-2 3x3 conv-BN-ReLU stem (16-32), 3-4 stages of 1-2 basic blocks (the first
               strided, widths doubling to at most 256); the last 1 or 2 maps, each a 1x1 lateral to 64-128, through a
               head shared by the levels (1-3 3x3 conv-ReLUs; class logits (1, 20 or 80) and 4 box distances by 1x1
               convs, FCOS-like); every point's best class (Sigmoid, ReduceMax, ArgMax), the top K = 100-1000 points
               an image (TopK, then a TopK sorting the K indices), optionally those over a score threshold 0.3-0.6
               (boolean indexing: NonZero, a data-dependent count), boxes decoded (point -/+ exp(distance) x stride,
               clipped); ONE NonMaxSuppression over every image's boxes at once (IoU 0.45-0.7; each box offset by
               its image and, class-aware, its class, torchvision's batched trick), the best B x 100-300 kept, in box
               order; [M, 7] (image, box, score, class), M data-dependent
Configs: batch 1 always, one batch of 4-16 and one of 32-64 (dlrm: 64-512 and 1024-2048; fttransformer, kan,
neuralode and tabnet: 64-256 and 1024-4096), each at a size the family allows (vqvae, capsnet, kan, wavenet, t5enc,
condconv, roihead, sinkhorn: the batch halves until the largest intermediate, a vqvae's distances, a capsnet's
prediction vectors, a kan's spline bases, a wavenet's widest per-step activation, a t5enc's attention scores, a
condconv's per-sample kernels, a roihead's pooled box features, a sinkhorn's attention scores or couplings, is under
2.5e8 floats; nmsdet's until B K, the boxes NonMaxSuppression compares pairwise, is at most 16384); a config
whose forward pass exceeds `max_gflop` is run at a smaller batch (so one run stays under ~30 ms on an H200). hrnet, raft and fttransformer fit their configs in the
spec instead: each at the largest size up to its drawn one that keeps a run under 500 GFLOP (their convs and
MatMuls counted from the spec: exact for hrnet and raft, a slight overestimate for fttransformer), else a halved
batch (not below 16 for the big one; fttransformer 1024).

The corpus split (model_zoo/corpus_split.yaml) names the training and exam architectures; it is committed
before any term is fitted on the corpus and `model_zoo/corpus.py` checks that the two are disjoint.
"""
import inspect
import math
import time
from pathlib import Path


import numpy as np  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

CNN = ("cnn_plain", "cnn_mobile", "cnn_grouped")  # _build_cnn builds these (unet, fpn, convnext, tcn, dense, gan,
# yolo, video3d, deeplab, vocoder, superres, tasnet, hrnet, raft: CNNs built apart)
# new families go at the end: a family's index seeds its specs and weights, so appending keeps the others' as they are
FAMILIES = ("cnn_plain", "cnn_mobile", "cnn_grouped", "vit", "swin", "hybrid", "mixer", "encoder",
            "pvt", "decoder", "unet", "conformer", "fpn", "convnext", "tcn", "perceiver", "dense", "rnn", "linattn",
            "ssm", "gan", "moe", "detr", "yolo", "pointnet", "wav2vec", "video3d", "deeplab", "dlrm", "vocoder",
            "superres", "gnn", "diffusion", "implicit", "tasnet", "hrnet", "raft", "fttransformer", "vqvae",
            "capsnet", "kan", "nascell", "neuralode", "gmlp", "xcit", "stn", "aft", "res2net", "hourglass",
            "retnet", "convmixer", "wavenet", "t5enc", "llama", "maxvit", "focalnet", "levit", "poolformer",
            "mobilevit", "resmlp", "ghostnet", "hardnet", "nystromformer", "rednet", "bigbird", "dgcnn",
            "deformattn", "condconv", "tabnet", "roihead", "sinkhorn", "nmsdet")
# families whose input is a float sequence [B, S, F] (size: S; F: the width D, a conformer's or a vocoder's mel bins,
# a tcn's, an rnn's or an ssm's C_in, an implicit model's 3 coordinates of each of its S points)
SEQUENCE = ("encoder", "decoder", "conformer", "tcn", "rnn", "ssm", "vocoder", "implicit", "aft", "retnet",
            "t5enc", "llama", "nystromformer", "bigbird")
# (a wavenet's input is channels first, [B, C_in, T]: input_shape)
MID_BATCHES, BIG_BATCHES = (4, 8, 16), (32, 64)


# ---------------------------------------------------------------- specs: pure functions of (family, seed)

def _rng(family: str, seed: int) -> np.random.Generator:
    # a stable per-family stream: the family's index, not Python's salted hash
    return np.random.default_rng([FAMILIES.index(family), int(seed)])


def _pick(r, options):
    return options[int(r.integers(len(options)))]


def arch_spec(family: str, seed: int) -> dict:
    """The architecture's hyper-parameters and its configs (batch, size); deterministic."""
    if family not in FAMILIES:
        raise HaseError(f"unknown family '{family}' (known: {', '.join(FAMILIES)})")
    r = _rng(family, seed)
    s = {"family": family, "seed": int(seed), "arch": f"{family}-s{seed}"}
    if family in CNN:
        s.update(stem_k=_pick(r, [3, 5, 7]), stem_w=_pick(r, [16, 24, 32, 48, 64]),
                 stages=int(r.integers(3, 6)), act=_pick(r, ["relu", "hardswish", "silu", "gelu"]),
                 width_mult=float(_pick(r, [1.5, 2.0, 2.5])), classes=_pick(r, [10, 100, 1000]))
        s["depths"] = [int(r.integers(1, 4)) for _ in range(s["stages"])]
        if family == "cnn_plain":
            s.update(block=_pick(r, ["basic", "bottleneck"]), k=_pick(r, [1, 3, 3, 5, 7]),
                     dilate_last=bool(r.random() < 0.3))
        elif family == "cnn_mobile":
            s.update(k=_pick(r, [3, 5, 7]), expand=_pick(r, [2, 3, 4, 6]), se=bool(r.random() < 0.5),
                     shuffle=bool(r.random() < 0.3))
        else:
            s.update(group_width=_pick(r, [8, 16, 24, 32, 48, 64]), bottleneck_ratio=_pick(r, [1, 2, 4]),
                     se=bool(r.random() < 0.4))
        sizes = [128, 160, 192, 224, 256, 288, 320, 384]
    elif family == "vit":
        heads = _pick(r, [3, 4, 6, 8, 12])
        s.update(patch=_pick(r, [8, 14, 16, 32]), heads=heads, dim=heads * _pick(r, [32, 48, 64]),
                 depth=int(r.integers(4, 13)), mlp_ratio=_pick(r, [2, 3, 4]), pool=_pick(r, ["cls", "mean"]),
                 attn=_pick(r, ["manual", "sdpa"]), classes=1000)
        sizes = [s["patch"] * n for n in (7, 8, 10, 12, 14, 16) if s["patch"] * n <= 448]
    elif family == "swin":
        s.update(patch=4, window=_pick(r, [4, 7, 8]), dim=_pick(r, [48, 64, 96]), stages=int(r.integers(2, 5)),
                 head_dim=32, mlp_ratio=_pick(r, [2, 4]), shift=bool(r.random() < 0.7), classes=1000)
        s["depths"] = [int(_pick(r, [1, 2, 2, 3])) for _ in range(s["stages"])]
        unit = s["patch"] * s["window"] * 2 ** (s["stages"] - 1)
        sizes = [unit * n for n in range(1, 9) if 96 <= unit * n <= 448]
    elif family == "hybrid":
        s.update(stem_w=_pick(r, [16, 24, 32]), conv_stages=int(r.integers(1, 4)), k=_pick(r, [3, 5]),
                 attn_stages=int(r.integers(1, 3)), heads=_pick(r, [2, 4, 8]), head_dim=_pick(r, [16, 32]),
                 depth=int(r.integers(1, 4)), norm=_pick(r, ["ln", "bn"]), mlp_ratio=_pick(r, [2, 4]),
                 act=_pick(r, ["gelu", "hardswish", "silu"]), conv_pos=bool(r.random() < 0.5), classes=1000)
        sizes = [128, 160, 192, 224, 256]
    elif family == "mixer":
        s.update(kind=_pick(r, ["mlp_mixer", "poolformer"]), classes=1000)
        if s["kind"] == "mlp_mixer":
            s.update(patch=_pick(r, [16, 32]), dim=_pick(r, [128, 256, 384, 512]), depth=int(r.integers(4, 13)),
                     token_ratio=_pick(r, [0.5, 1.0]), channel_ratio=_pick(r, [2, 4]))
            sizes = [s["patch"] * n for n in (7, 8, 10, 14) if s["patch"] * n <= 448]
        else:
            s.update(dims=[_pick(r, [32, 48, 64])], depths=[int(r.integers(1, 4)) for _ in range(4)],
                     pool_k=_pick(r, [3, 5]), mlp_ratio=_pick(r, [2, 4]))
            s["dims"] = [s["dims"][0] * 2 ** i for i in range(4)]
            sizes = [128, 160, 192, 224, 256]
    elif family == "encoder":
        heads = _pick(r, [2, 4, 8, 12])
        s.update(heads=heads, dim=heads * _pick(r, [32, 64]), depth=int(r.integers(2, 9)),
                 ffn_ratio=_pick(r, [2, 4]), attn=_pick(r, ["manual", "sdpa"]))
        sizes = [32, 64, 128, 256, 384, 512, 768, 1024]
    elif family == "pvt":
        stages = int(r.integers(2, 5))
        head_dim = _pick(r, [32, 48, 64])
        heads = [int(_pick(r, opts)) for opts in ([1, 2], [2, 4], [4, 5, 8], [8, 12])[:stages]]
        depths = [int(r.integers(2, 7)) if i == 2 else int(r.integers(1, 4)) for i in range(stages)]
        sr0 = _pick(r, [8, 4])  # stage i reduces keys/values by sr0 / 2**i (at least 1: plain attention)
        s.update(stages=stages, head_dim=head_dim, heads=heads, dims=[h * head_dim for h in heads], depths=depths,
                 sr=[max(sr0 >> i, 1) for i in range(stages)], overlap=bool(r.random() < 0.7),
                 conv_ffn=bool(r.random() < 0.6), mlp_ratio=_pick(r, [2, 4, 8]), attn=_pick(r, ["manual", "sdpa"]),
                 classes=1000)
        sizes = [128, 160, 192, 224, 256, 288, 320, 384]  # multiples of 32: every stage's map divides by sr
    elif family == "decoder":
        heads = _pick(r, [2, 4, 8, 12, 16])
        s.update(heads=heads, dim=heads * _pick(r, [32, 64]), depth=int(r.integers(2, 9)),
                 ffn_ratio=_pick(r, [2, 4]), attn=_pick(r, ["mask", "sdpa"]), gelu=_pick(r, ["tanh", "none"]),
                 final_norm=bool(r.random() < 0.7), head_width=_pick(r, [512, 1024, 2048, 4096]))
        sizes = [32, 64, 128, 256, 384, 512, 768, 1024]
    elif family == "unet":
        levels = int(r.integers(2, 5))
        s.update(levels=levels, base=_pick(r, [16, 24, 32, 48, 64]), down=_pick(r, ["maxpool", "conv"]),
                 up=_pick(r, ["transpose", "nearest", "bilinear"]), act=_pick(r, ["relu", "silu", "hardswish"]),
                 classes=int(r.integers(2, 22)))
        sizes = [z for z in (128, 160, 192, 224, 256, 320, 384, 448, 512) if z % 2 ** levels == 0]
    elif family == "conformer":
        s.update(mels=_pick(r, [80, 128]), sub_ch=_pick(r, [64, 128, 256]),
                 dim=_pick(r, [144, 176, 256, 320, 384, 512]), heads=_pick(r, [2, 4, 8]), depth=int(r.integers(2, 9)),
                 ffn_ratio=_pick(r, [2, 4]), conv_k=2 * int(r.integers(3, 16)) + 1, attn=_pick(r, ["manual", "sdpa"]))
        sizes = [64, 128, 256, 384, 512, 768, 1024]  # frames, a multiple of 4: the subsampling divides by 4
    elif family == "fpn":
        stages = int(r.integers(3, 6))
        s.update(stages=stages, stem_w=_pick(r, [16, 24, 32, 48]),
                 block=_pick(r, ["basic", "bottleneck", "inverted"]), act=_pick(r, ["relu", "silu"]),
                 levels=min(stages, _pick(r, [3, 4])), neck_w=_pick(r, [64, 96, 128, 192, 256]),
                 pan=bool(r.random() < 0.5), head_convs=int(r.integers(2, 5)), split_towers=bool(r.random() < 0.5),
                 anchors=_pick(r, [1, 3]), classes=_pick(r, [1, 20, 80]))
        s["depths"] = [int(r.integers(1, 4)) for _ in range(stages)]
        if s["block"] == "inverted":
            s.update(dw_k=_pick(r, [3, 5]), expand=_pick(r, [2, 4, 6]))
        # every stage halves the map exactly, so that each top-down x2 upsample meets its lateral
        sizes = [z for z in range(256, 641, 32) if z % 2 ** (stages + 1) == 0]
    elif family == "dense":
        s.update(kind=_pick(r, ["densenet", "vovnet"]), act=_pick(r, ["relu", "silu", "hardswish"]),
                 classes=_pick(r, [10, 100, 1000]))
        if s["kind"] == "densenet":
            s.update(stem_k=_pick(r, [3, 7]), stem_pool=bool(r.random() < 0.6), growth=_pick(r, [12, 16, 24, 32, 48]),
                     bottleneck=_pick(r, [2, 3, 4]), compression=_pick(r, [0.5, 0.75, 1.0]))
            s["depths"] = [int(r.integers(3, 17)) for _ in range(int(r.integers(3, 5)))]
        else:
            s.update(stem_w=_pick(r, [32, 48, 64]), stage_w=_pick(r, [32, 48, 64, 96, 128]),
                     concat_w=_pick(r, [64, 128, 192, 256]), layers=int(r.integers(3, 6)), dw=bool(r.random() < 0.3),
                     ese=bool(r.random() < 0.6))
            s["depths"] = [int(r.integers(1, 3)) for _ in range(int(r.integers(3, 5)))]
        sizes = [128, 160, 192, 224, 256, 288, 320]
    elif family == "convnext":
        stages = int(r.integers(2, 5))
        s.update(stages=stages, dim=_pick(r, [32, 48, 64, 96, 128]), k=_pick(r, [3, 5, 7, 9]),
                 mlp_ratio=_pick(r, [2, 3, 4]), gelu=_pick(r, ["none", "tanh"]), grn=bool(r.random() < 0.4),
                 cf_norm=_pick(r, ["permute", "manual"]), classes=1000)
        s["depths"] = [int(r.integers(2, 7)) if i == 2 else int(r.integers(1, 4)) for i in range(stages)]
        sizes = list(range(128, 385, 32))
    elif family == "tcn":
        # block i dilates by 2 ** (i % (dil_exp + 1)); the widest (512, gated, kernel 7, 24 blocks, T 2048) is
        # about 390 GFLOP at batch 1, under build_corpus's max_gflop
        s.update(c_in=_pick(r, [40, 64, 80, 128]), proj=_pick(r, ["linear", "conv"]),
                 width=_pick(r, [64, 96, 128, 192, 256, 384, 512]), depth=int(r.integers(6, 25)),
                 k=int(r.integers(2, 8)), dil_exp=int(r.integers(2, 9)), pad=_pick(r, ["causal", "same"]),
                 act=_pick(r, ["gated", "glu", "relu", "gelu"]), norm=_pick(r, ["none", "bn", "ln"]),
                 separable=bool(r.random() < 0.4), classes=_pick(r, [10, 35, 128, 527]))
        sizes = [64, 128, 256, 512, 768, 1024, 1536, 2048]  # time steps
    elif family == "rnn":
        # the widest (C_in 512, 4 bidirectional LSTM layers of 512, T 512) is about 26 GFLOP at batch 1
        s.update(c_in=_pick(r, [64, 80, 128, 256, 512]), front=_pick(r, ["none", "conv"]),
                 cell=_pick(r, ["lstm", "gru"]),
                 hidden=_pick(r, [64, 128, 192, 256, 384, 512]), layers=int(r.integers(1, 5)),
                 bidirectional=bool(r.random() < 0.5), head=_pick(r, ["none", "linear", "mean"]),
                 classes=_pick(r, [10, 35, 128, 527]))
        if s["front"] == "conv":
            s.update(conv_w=_pick(r, [64, 128, 256, 512]), conv_k=_pick(r, [3, 5]), conv_stride=_pick(r, [1, 2]))
        sizes = [32, 64, 128, 192, 256, 384, 512]  # time steps
    elif family == "linattn":
        kind = _pick(r, ["relu", "elu"])
        s.update(kind=kind, classes=1000)
        if kind == "relu":  # EfficientViT: stem stride 2 or 4, then 2-3 stages that each halve the map
            stages = int(r.integers(2, 4))
            s.update(stem_stride=_pick(r, [2, 4]), stem_w=_pick(r, [16, 24, 32]), dim=_pick(r, [32, 48, 64]),
                     stages=stages, head_dim=_pick(r, [8, 16, 32]), expand=_pick(r, [2, 4, 6]), k=_pick(r, [3, 5]),
                     scales=_pick(r, [[], [3], [5], [3, 5]]), act=_pick(r, ["hardswish", "relu", "gelu"]))
            s["depths"] = [int(r.integers(1, 4)) for _ in range(stages)]
            unit = s["stem_stride"] * 2 ** stages
        else:  # linear transformer with elu+1 features over patch tokens
            stem = _pick(r, ["patch", "conv"])
            heads = _pick(r, [2, 4, 6, 8])
            s.update(stem=stem, patch=_pick(r, [8, 16] if stem == "patch" else [4, 8, 16]), heads=heads,
                     dim=heads * _pick(r, [32, 48, 64]), depth=int(r.integers(2, 9)), mlp_ratio=_pick(r, [2, 3, 4]),
                     impl=_pick(r, ["matmul", "einsum"]), conv_pos=bool(r.random() < 0.5))
            unit = s["patch"]
        sizes = sorted({unit * -(-z // unit) for z in range(128, 257, 32)} & set(range(128, 257)))
    elif family == "ssm":
        # every size is a multiple of 64, so of any chunk; a chunk grows (up to 64) until T / chunk <= 16
        kind = _pick(r, ["s4d", "mamba"])
        s.update(kind=kind, c_in=_pick(r, [64, 80, 128, 256]), dim=_pick(r, [64, 96, 128, 192, 256, 384]),
                 state=_pick(r, [8, 16, 32, 64]), depth=int(r.integers(2, 9)), norm=_pick(r, ["ln", "rms"]),
                 head=_pick(r, ["none", "linear", "mean"]), classes=_pick(r, [10, 35, 128, 527]))
        if kind == "s4d":
            s.update(k_cap=_pick(r, [0, 32, 64, 128, 256]))  # 0: a kernel as long as the sequence
        else:
            s.update(expand=2, head_dim=_pick(r, [32, 64]), conv_k=4, chunk=_pick(r, [16, 32, 64]))
        sizes = [64, 128, 192, 256, 384, 512, 768, 1024]  # time steps
    elif family == "gan":
        # a generator: from a latent grid [B, z, s, s] (DCGAN-like decoder: a 3x3 conv to the width, 3-5 up stages
        # halving it) or an image [B, 3, s, s] (pix2pix/CycleGAN: 0-2 stride-2 downs and as many ups; ESRGAN-like:
        # 1-2 more ups for x2/x4 super-resolution); residual blocks at the bottleneck; a conv + Tanh to RGB
        source = _pick(r, ["latent", "image"])
        s.update(source=source, up_mode=_pick(r, ["transpose", "nearest", "bilinear"]),
                 norm=_pick(r, ["bn", "in", "none"]), act=_pick(r, ["relu", "lrelu"]),
                 res_blocks=_pick(r, [0, 0, 2, 4, 6, 9]), stage_convs=int(r.integers(1, 3)))
        if source == "latent":
            up = int(r.integers(3, 6))
            s.update(in_ch=_pick(r, [64, 100, 128, 256]), width=_pick(r, [128, 256, 384, 512]), down=0, up=up)
            sizes = [z for z in (4, 6, 8, 12, 16) if 64 <= z * 2 ** up <= 256]  # the output is 64-256 pixels
        else:
            down = int(r.integers(0, 3))
            sr = int(r.integers(0 if down else 1, 3))  # ups beyond the downs: the output is 2**sr times the input
            s.update(in_ch=3, width=_pick(r, [32, 48, 64]), stem_k=_pick(r, [3, 7]), down=down, up=down + sr)
            # the output is at most 256 pixels: a batch of 32 at 512 x 512 took 4.3 GB to export on the CPU
            sizes = [z for z in (32, 48, 64, 96, 128, 160, 192, 256) if z % 2 ** down == 0 and z * 2 ** sr <= 256]
    elif family == "moe":
        # a ViT whose MLPs (every one, or every other as in V-MoE/GShard) are mixtures of 4-16 experts: a router,
        # TopK k of E, every expert computed densely and summed with the gate weights; tokens at most 24 x 24
        stem = _pick(r, ["patch", "conv"])
        heads = _pick(r, [3, 4, 6, 8])
        s.update(stem=stem, patch=_pick(r, [8, 16]), heads=heads, dim=heads * _pick(r, [32, 48, 64]),
                 depth=int(r.integers(2, 9)), mlp_ratio=_pick(r, [2, 4]), attn=_pick(r, ["manual", "sdpa"]),
                 experts=_pick(r, [4, 6, 8, 12, 16]), top_k=int(r.integers(1, 3)), expert_ratio=_pick(r, [1, 2, 4]),
                 moe_every=_pick(r, [1, 2]), order=_pick(r, ["softmax_topk", "topk_softmax"]),
                 gate=_pick(r, ["scatter", "onehot"]), impl=_pick(r, ["einsum", "bmm"]), classes=1000)
        # all experts' hidden width at most 32 D: the widest (D 512, 16 x 2 D, 8 layers, 24 x 24 tokens) is about
        # 170 GFLOP and 145 M parameters at batch 1
        s["expert_ratio"] = min(s["expert_ratio"], 32 // s["experts"])
        sizes = [s["patch"] * n for n in range(8, 25, 2) if 128 <= s["patch"] * n <= 384]
    elif family == "detr":
        # DETR-like: a residual backbone of 3-4 stages (stride 16 or 32), a 1x1 conv to d_model, learned positions,
        # 1-4 post-norm encoder layers, 1-4 decoder layers of 20-100 learned object queries (self-attention, then
        # cross-attention to the memory), a class Linear and a 3-layer box MLP with a sigmoid
        stages = int(r.integers(3, 5))
        s.update(stages=stages, stem_w=_pick(r, [32, 48, 64]), block=_pick(r, ["basic", "bottleneck"]),
                 act=_pick(r, ["relu", "silu"]), dim=_pick(r, [128, 192, 256]), heads=_pick(r, [4, 8]),
                 enc_layers=int(r.integers(1, 5)), dec_layers=int(r.integers(1, 5)),
                 queries=_pick(r, [20, 25, 50, 64, 100]), ffn_ratio=_pick(r, [2, 4, 8]),
                 attn=_pick(r, ["manual", "sdpa", "mha"]), classes=_pick(r, [20, 80, 91]))
        s["depths"] = [int(r.integers(1, 4)) for _ in range(stages)]
        sizes = [z for z in range(256, 513, 64) if z % 2 ** (stages + 1) == 0]  # stride 16: at most 32 x 32 tokens
    elif family == "yolo":
        # YOLOv5/v8-like: widths 64-1024 x width_mult (capped at max_w x width_mult), stage depths 3-6-6-3 x depth_mult;
        # the widest (0.75, 1024, 0.67, C2f, 3 scales, 80 classes) is about 34 M parameters and 86 GFLOP at 640 x 640
        s.update(block=_pick(r, ["c2f", "c3"]), width_mult=_pick(r, [0.25, 0.375, 0.5, 0.75]),
                 depth_mult=_pick(r, [0.33, 0.5, 0.67]), max_w=_pick(r, [512, 768, 1024]),
                 act=_pick(r, ["silu", "silu", "lrelu"]), stem_k=_pick(r, [3, 6]), scales=int(r.integers(2, 4)),
                 head=_pick(r, ["anchor", "free"]), classes=int(r.integers(1, 81)), decode=bool(r.random() < 0.5))
        if s["head"] == "anchor":
            s.update(anchors=int(r.integers(1, 4)))
        else:
            s.update(reg_max=_pick(r, [1, 16]))  # 16: DFL (a softmax over 16 bins per side), 1: the side itself
        sizes = [256, 320, 384, 416, 448, 512, 576, 640]  # multiples of the stride 32
    elif family == "pointnet":
        # over [B, 3, N] points: PointNet (shared MLPs, T-Nets, a global max) or DGCNN (EdgeConv over k nearest
        # neighbours); DGCNN's pairwise distances are N x N and its edge features [B, 2C, N, k]: N at most 1024
        kind = _pick(r, ["pointnet", "dgcnn"])
        s.update(kind=kind, head=_pick(r, [[512, 256], [256, 128], [512]]), classes=_pick(r, [10, 16, 40]))
        if kind == "pointnet":
            s.update(tnet=_pick(r, ["none", "input", "both"]), mlp1=_pick(r, [[64], [64, 64]]),
                     mlp2=_pick(r, [[64, 128], [128], [64, 128, 256]]), emb=_pick(r, [256, 512, 1024]),
                     pool=_pick(r, ["reducemax", "maxpool"]))
            sizes = [256, 512, 1024, 2048, 4096]
        else:
            s.update(k=_pick(r, [10, 16, 20]), edges=_pick(r, [[64, 64], [64, 64, 128], [64, 128, 256],
                                                               [64, 64, 128, 256]]),
                     emb=_pick(r, [512, 1024]), dynamic=bool(r.random() < 0.7))
            sizes = [256, 384, 512, 768, 1024]
    elif family == "wav2vec":
        # wav2vec 2.0 / HuBERT-like over a waveform [B, 1, T]: conv layer 0 is kernel 10 stride 5, the last two kernel
        # 2 stride 2, the others kernel 3 stride 2 (7 layers: stride 320, 49 frames a second at 16 kHz)
        dim = _pick(r, [256, 384, 512, 640, 768])
        s.update(conv_layers=int(r.integers(5, 8)), conv_w=_pick(r, [256, 384, 512]),
                 conv_norm=_pick(r, ["group", "layer"]), dim=dim, heads=dim // _pick(r, [32, 64, 64]),
                 depth=int(r.integers(2, 9)), ffn_ratio=_pick(r, [2, 4]), pos_k=_pick(r, [64, 96, 128]),
                 pos_groups=_pick(r, [8, 16]), norm_first=bool(r.random() < 0.5), attn=_pick(r, ["manual", "sdpa"]),
                 head=_pick(r, ["none", "ctc", "mean"]), classes=_pick(r, [12, 32, 35, 527]))
        # the encoder's weights at most about 36 M parameters: D 768 keeps at most 5 layers of FFN 4 D (with the widest
        # extractor, about 44 M parameters in all: 175 MB)
        s["depth"] = min(s["depth"], max(2, int(36e6 // ((4 + 2 * s["ffn_ratio"]) * dim * dim))))
        sizes = [4000, 8000, 12000, 16000, 24000, 32000]  # samples (0.25-2 s at 16 kHz)
    elif family == "video3d":
        # a video clip [B, 3, T, H, W] (T frames fixed per architecture; size: H = W): C3D (plain 3x3x3 convs, MaxPool3d
        # between stages), R3D (residual 3x3x3 basic blocks, stride-2 convs) or R(2+1)D (each 3x3x3 factorized into a
        # 1x3x3 spatial and a 3x1x1 temporal conv); widths stem x 2**i capped at 256-512
        kind = _pick(r, ["c3d", "r3d", "r2plus1d"])
        s.update(kind=kind, frames=_pick(r, [8, 12, 16]), stem_w=_pick(r, [32, 48, 64]), stages=int(r.integers(3, 5)),
                 max_w=_pick(r, [256, 384, 512]), classes=_pick(r, [101, 174, 400, 600]))
        s["depths"] = [int(r.integers(1, 3)) for _ in range(s["stages"])]
        sizes = [64, 80, 96, 112, 128, 144, 160]  # H = W
    elif family == "deeplab":
        # DeepLabv3/v3+: a residual backbone (stride-4 stem, 4 stages) whose last stage (output stride 16) or last two
        # (8) keep their stride and dilate their 3x3 convs by 2 (and 4), an ASPP head (1x1 conv, 3x3 convs at 3 rates,
        # optionally depthwise-separable, image pooling upsampled back), Concat, a 1x1 projection; v3: a classifier
        # and one bilinear upsampling to the input; v3+: a x4 upsampling, a Concat with the stride-4 features, two
        # 3x3 convs, a classifier and a x4 upsampling
        os_ = _pick(r, [16, 16, 8])
        s.update(block=_pick(r, ["basic", "bottleneck"]), stem_w=_pick(r, [32, 48, 64]), output_stride=os_,
                 aspp_ch=_pick(r, [128, 192, 256]), separable=bool(r.random() < 0.4),
                 rates=_pick(r, [[6, 12, 18], [4, 8, 12], [3, 6, 9]] if os_ == 16 else [[12, 24, 36], [6, 12, 18]]),
                 decoder=_pick(r, ["v3", "v3plus"]), classes=_pick(r, [19, 21, 150]))
        s["depths"] = [int(r.integers(1, 4)) for _ in range(4)]
        # output stride 8 keeps a 64 x 64 map at 512: at most 384 there
        sizes = [z for z in (128, 192, 256, 320, 384, 448, 512) if os_ == 16 or z <= 384]
    elif family == "dlrm":
        # DLRM-like recommender over ONE float input [B, 1, n_dense + tables x L] (size: L lookups per table,
        # sum-pooled; the corpus tooling feeds one float tensor): dense features through a bottom MLP to the
        # embedding width, the index part mapped to int64 rows inside the model (|x| * 7919, Cast, modulo the
        # table's rows: any float input gives valid, spread rows, an integer-valued one a fixed permutation),
        # 4-26 tables of 1e3-1e5 rows (at most ~32 M embedding parameters in all), looked up table by table
        # (one Gather each) or in one concatenated table with row offsets, pairwise dot products by MatMul of the
        # stacked vectors, the upper triangle by a constant-index Gather (or the whole flattened matrix), Concat with
        # the dense vector, a top MLP, Sigmoid
        tables, dim = int(r.integers(4, 27)), _pick(r, [16, 32, 64, 128])
        rows = [int(10 ** r.uniform(3, 5)) for _ in range(tables)]
        scale = min(1.0, 32e6 / (sum(rows) * dim))
        s.update(n_dense=_pick(r, [8, 13, 16, 32]), tables=tables, dim=dim,
                 rows=[max(1000, int(n * scale)) for n in rows], lookup=_pick(r, ["separate", "fused"]),
                 bottom=_pick(r, [[512, 256], [256, 128], [128], [512, 256, 128]]),
                 top=_pick(r, [[512, 256], [1024, 1024, 512, 256], [256, 128], [512, 512, 256]]),
                 interaction=_pick(r, ["triangle", "triangle", "flatten"]), self_dot=bool(r.random() < 0.3))
        sizes = [1, 1, 2, 4, 8]  # lookups per table (1: one-hot, as Criteo)
    elif family == "vocoder":
        # a neural vocoder over a mel spectrogram [B, S, 80] (size: S frames; transposed to [B, 80, S] inside): a
        # Conv1d pre-net of kernel 7, 2-4 up stages (a ConvTranspose1d of stride u in 2/4/8 and kernel 2u, widths
        # halving from 128-512, at least 16), each followed by HiFi-GAN's multi-receptive-field fusion (a residual
        # block per kernel 3/7/11 of dilated convs, averaged) or MelGAN's residual stack (kernel 3, dilations 1, 3,
        # 9, 1x1 shortcut convs), a Conv1d of kernel 7 to one channel and Tanh: a waveform of S x hop samples
        kind = _pick(r, ["hifigan", "hifigan", "melgan"])
        stages = int(r.integers(2, 5))
        hop = _pick(r, [h for h in (64, 128, 256, 256, 512) if 2 ** stages <= h <= 8 ** stages])
        logs = [1] * stages  # log2 of each stride (1-3): hop = 2 ** sum, the big strides first as in HiFi-GAN
        for _ in range(int(math.log2(hop)) - stages):
            i = _pick(r, [j for j in range(stages) if logs[j] < 3])
            logs[i] += 1
        s.update(kind=kind, mels=80, width=_pick(r, [128, 192, 256, 384, 512]), hop=hop,
                 strides=sorted((2 ** v for v in logs), reverse=True), pad=_pick(r, ["zeros", "reflect"]))
        if kind == "hifigan":  # ResBlock1 (v1): two convs per dilation; ResBlock2 (v2): one
            s.update(block=_pick(r, ["v1", "v1", "v2"]), kernels=_pick(r, [[3, 7, 11], [3, 7, 11], [3, 7], [3, 11]]),
                     dilations=_pick(r, [[1, 3, 5], [1, 3, 5], [1, 3]]))
        else:
            s.update(kernels=[3], dilations=[1, 3, 9])
        # batch-1 FLOPs per frame (2 per multiply-add): the sizes keep one frame-batch under ~100 GFLOP
        c, n, per = s["width"], 1, 2 * 7 * 80 * s["width"]
        convs = (2 if s.get("block") == "v1" else 1) * len(s["dilations"]) * sum(s["kernels"])
        for u in s["strides"]:
            co, n = max(c // 2, 16), n * u
            per += 2 * n * c * co * 2 + 2 * n * co * co * (convs if kind == "hifigan" else 5 * 3)
            c = co
        per += 2 * n * c * 7
        sizes = [z for z in (32, 48, 64, 96, 128, 160, 192, 256) if z == 32 or z * per <= 100e9]
    elif family == "superres":
        # image super-resolution over [B, 3, H, W] (size: H = W) to x2 or x4: EDSR (residual blocks conv-ReLU-conv,
        # scaled by 0.1 or not, optionally with channel attention) or RCAN (residual groups of channel-attention
        # blocks, a conv closing each group, a skip around each), a long skip from the head; the upsampler a conv
        # to 4C + PixelShuffle (DepthToSpace) per x2 or a nearest/bilinear Resize + conv + ReLU per x2; optionally a
        # global skip adding the input upsampled by a bilinear or bicubic Resize
        kind = _pick(r, ["edsr", "edsr", "rcan"])
        width, blocks, scale = _pick(r, [32, 48, 64, 96, 128]), int(r.integers(4, 17)), _pick(r, [2, 2, 4])
        s.update(kind=kind, width=width, scale=scale, up=_pick(r, ["shuffle", "shuffle", "nearest", "bilinear"]),
                 res_scale=_pick(r, [0.1, 1.0]), reduction=_pick(r, [4, 8, 16]),
                 global_skip=_pick(r, ["none", "none", "bilinear", "bicubic"]))
        if kind == "rcan":  # 2-4 groups of at least 2 blocks, every block with channel attention
            groups = _pick(r, [2, 3, 4])
            s.update(groups=[max(2, blocks // groups)] * groups, attention=True)
        else:
            s.update(groups=[blocks], attention=bool(r.random() < 0.3))
        # batch-1 multiply-adds per input pixel: head, blocks (2 3x3 convs each), group and body closing convs,
        # the upsampler (36 C^2 per x2 stage at its input's pixels), the tail; the sizes keep one image under
        # ~100 GFLOP and the output at most 512 x 512
        nb, ng = sum(s["groups"]), len(s["groups"]) if kind == "rcan" else 0
        macs = 27 * width + (18 * nb + 9 * ng + 9) * width ** 2 + 36 * width ** 2 * (1 if scale == 2 else 5)
        macs += 27 * width * scale ** 2
        sizes = [z for z in (32, 48, 64, 96, 128, 160, 192, 256)
                 if z * scale <= 512 and (z == 32 or 2 * macs * z * z <= 100e9)]
    elif family == "gnn":
        # a graph neural network over a dense graph packed into ONE float input [B, N, F_in + N] (size: N nodes; the
        # first F_in columns are the node features, the other N the adjacency, sliced inside the model: an edge
        # where the value exceeds a threshold of 0.5-2.0, self-loops added): GCN layers (D^-1/2 (A + I) D^-1/2 X W,
        # the degree by ReduceSum and Pow -0.5; optionally the edges weighted by their excess over the threshold)
        # or GAT-like layers (1-8 heads; additive scores a_src.Wh_i + a_dst.Wh_j, i.e. a^T [Wh_i || Wh_j], with
        # LeakyReLU 0.2, or scaled dot products; masked by Where or an additive -1e9; Softmax over the neighbours)
        conv = _pick(r, ["gcn", "gat"])
        s.update(conv=conv, f_in=_pick(r, [16, 32, 64, 100, 128]), hidden=_pick(r, [32, 64, 128, 256]),
                 layers=int(r.integers(2, 7)), act=_pick(r, ["relu", "elu"]), residual=bool(r.random() < 0.5),
                 norm=_pick(r, ["none", "none", "ln", "bn"]), threshold=_pick(r, [0.5, 1.0, 1.5, 2.0]),
                 readout=_pick(r, ["mean", "max", "node"]), classes=int(r.integers(2, 41)))
        if conv == "gcn":
            s.update(weighted=bool(r.random() < 0.3))
        else:
            s.update(heads=_pick(r, [1, 2, 4, 8]), score=_pick(r, ["additive", "additive", "dot"]),
                     mask=_pick(r, ["where", "additive"]))
        sizes = [32, 64, 96, 128, 192, 256, 384, 512]  # nodes
    elif family == "diffusion":
        # a denoising-diffusion UNet over an image or a latent [B, 3|4, H, W] (size: H = W): the timestep taken from
        # the input inside the graph (per sample), its sinusoidal embedding through a SiLU MLP into every residual
        # block; 2-3 levels of 1-2 GroupNorm-SiLU-conv residual blocks, stride-2 conv downs, nearest + conv or
        # ConvTranspose2d ups, skips by Concat, self-attention at the lowest 1-2 resolutions and in the middle
        ch, levels = _pick(r, [32, 48, 64, 96, 128]), int(r.integers(2, 4))
        mult = _pick(r, {2: [[1, 2], [1, 2], [1, 4], [2, 2]], 3: [[1, 2, 2], [1, 2, 4], [1, 1, 2], [1, 2, 3]]}[levels])
        in_ch = _pick(r, [3, 3, 4])  # pixels (DDPM/ADM) or a Stable-Diffusion-like latent
        s.update(in_ch=in_ch, chans=[min(192, ch * m) for m in mult], res_blocks=_pick(r, [1, 2, 2]),
                 groups=_pick(r, [32, 32, 16, 8]), attn_levels=list(range(levels - _pick(r, [1, 1, 2]), levels)),
                 mid_attn=bool(r.random() < 0.8), heads=_pick(r, [1, 2, 4]), qkv=_pick(r, ["conv", "linear"]),
                 attn=_pick(r, ["manual", "manual", "sdpa"]), up=_pick(r, ["nearest", "nearest", "convtranspose"]),
                 emb=_pick(r, ["add", "add", "scale_shift"]), out_ch=in_ch * _pick(r, [1, 1, 2]), t_max=1000)
        # at most 32 x 32 tokens in any attention; one image under ~100 GFLOP at batch 1
        lowest = min(s["attn_levels"] + ([levels - 1] if s["mid_attn"] else []))
        sizes = [z for z in (32, 48, 64, 96, 128)
                 if z <= 32 << lowest and (z == 32 or _diffusion_gflop(s, z) <= 100)]
    elif family == "implicit":
        # a coordinate MLP (NeRF / SIREN / Fourier features) over points [B, N, 3] (size: N points): a Fourier
        # encoding (per-octave Mul, or a MatMul by a random Gaussian matrix), Sin, Cos, Concat; Linear layers with
        # ReLU or Sin activations, the encoding concatenated back in the middle; one head or NeRF's two
        depth = int(r.integers(4, 11))
        s.update(encoding=_pick(r, ["positional", "positional", "gaussian"]), octaves=int(r.integers(4, 11)),
                 features=_pick(r, [32, 64, 96, 128]), sigma=_pick(r, [1.0, 4.0, 10.0]),
                 include_input=bool(r.random() < 0.5), bound=_pick(r, [1.0, 2.0, 4.0]),
                 width=_pick(r, [64, 128, 192, 256]), depth=depth, act=_pick(r, ["relu", "relu", "sin"]),
                 w0=_pick(r, [30.0, 1.0]), skip=depth // 2 if r.random() < 0.8 else None,
                 heads=_pick(r, ["nerf", "nerf", "sdf", "occupancy", "rgb"]), viewdirs=bool(r.random() < 0.6),
                 density=_pick(r, ["relu", "softplus"]))
        s["out"] = {"nerf": 4, "sdf": 1, "occupancy": 1, "rgb": 3}[s["heads"]]
        for k in (["features", "sigma"] if s["encoding"] == "positional" else ["octaves"]) + \
                (["w0"] if s["act"] == "relu" else []) + (["viewdirs", "density"] if s["heads"] != "nerf" else []):
            del s[k]  # drawn either way (the stream stays aligned), kept only where the model uses it
        sizes = [1024, 2048, 4096, 8192, 16384, 32768, 65536]  # points
    elif family == "tasnet":
        # Conv-TasNet-like separation over a waveform [B, 1, T] (size: T samples): Conv1d encoder + ReLU, a
        # temporal-convolution separator (R x X blocks of 1x1 conv, PReLU, norm, dilated depthwise conv, PReLU,
        # norm, 1x1 convs: residual and skip), masks per source times the encoder output, ConvTranspose1d decoder
        kernel = _pick(r, [16, 20, 24, 32])
        norm = _pick(r, ["gln", "gln", "cln"])  # cln: a per-frame norm over the channels, with causal convs
        s.update(kernel=kernel, stride=kernel // 2, enc=_pick(r, [64, 128, 192, 256]),
                 bottleneck=_pick(r, [64, 96, 128]), hidden=_pick(r, [128, 192, 256]), dw_k=3,
                 skip=_pick(r, [0, 64, 128]), repeats=int(r.integers(1, 4)), blocks=int(r.integers(4, 9)),
                 norm=norm, causal=norm == "cln", prelu=_pick(r, ["shared", "channel"]),
                 sources=_pick(r, [2, 2, 3]), mask=_pick(r, ["sigmoid", "sigmoid", "relu"]),
                 decoder=_pick(r, ["shared", "per_source"]))
        # batch-1 multiply-adds per encoder frame (T / stride frames)
        n, b, h = s["enc"], s["bottleneck"], s["hidden"]
        per = n * kernel + n * b + s["repeats"] * s["blocks"] * (2 * b * h + 3 * h + s["skip"] * h)
        per += (s["skip"] or b) * s["sources"] * n + s["sources"] * n * kernel
        sizes = [z for z in (4000, 8000, 12000, 16000, 24000, 32000) if z == 4000 or 2 * per * z / s["stride"] <= 100e9]
    elif family == "hrnet":
        # HRNet-like multi-resolution CNN over [B, 3, H, W] (size: H = W, a multiple of 32): a stem of two stride-2
        # 3x3 conv-BN-ReLU to 1/4, stage 1 of 1-4 bottlenecks at 1/4, then stages 2..S (S 2-4) each adding a branch
        # at half the lowest resolution (1/8, 1/16, 1/32; widths C, 2C, 4C, 8C), each stage 1-3 modules of 1-4
        # basic or bottleneck blocks per branch closed by a multi-scale fusion (stride-2 3x3 convs down, 1x1 conv +
        # nearest or bilinear Resize up, Add, ReLU); head: classification (HRNet-C), pose heatmaps from the 1/4
        # branch (HRNet v1) or all branches up to 1/4 and concatenated (HRNet v2)
        stages = int(r.integers(2, 5))
        s.update(stem_w=_pick(r, [32, 48, 64]), stage1_w=_pick(r, [64, 128, 256]),
                 stage1_blocks=int(r.integers(1, 5)), width=_pick(r, [16, 18, 24, 32, 40, 48]), stages=stages,
                 modules=[int(r.integers(1, 4)) for _ in range(stages - 1)], blocks=int(r.integers(1, 5)),
                 block=_pick(r, ["basic", "basic", "bottleneck"]), up=_pick(r, ["nearest", "nearest", "bilinear"]),
                 head=_pick(r, ["cls", "pose", "seg"]))
        if s["head"] == "cls":
            s.update(head_w=_pick(r, [1024, 2048]), classes=1000)
        else:  # keypoint heatmaps (COCO 17, MPII 16) or segmentation classes at 1/4
            s.update(classes=_pick(r, [17, 16]) if s["head"] == "pose" else _pick(r, [19, 21, 150]))
        sizes = [192, 224, 256, 288, 320, 352, 384]
    elif family == "raft":
        # RAFT-like optical flow over two frames stacked on the channels [B, 6, H, W] (size: H = W, a multiple of
        # 64): a shared residual conv encoder (both frames in one batch) to 1/8, a context encoder (BatchNorm) of
        # frame 1 or a conv on its features; an all-pairs correlation volume (MatMul [B, HW, C] x [B, C, HW]) pooled
        # to 1-4 levels by AvgPool, looked up each iteration in a (2r + 1)^2 window (r 1-4) around the current flow
        # (GridSample, or a bilinear lookup written out: Floor, GatherElements), or a local cost volume (padded
        # slices, Mul, ReduceMean per displacement, 1-4 levels by AvgPool of the features, Resize back); 2-6 unrolled
        # updates: a motion encoder, a ConvGRU (3x3, or separable 1x5 + 5x1), a flow head; the flow [B, 2, H/8,
        # W/8] up to [B, 2, H, W] by a bilinear Resize x 8 or RAFT's convex upsampling (Softmax over 3x3 neighbours)
        enc = _pick(r, [32, 48, 64])
        s.update(enc_w=[enc, enc * 3 // 2, enc * 2], enc_blocks=_pick(r, [1, 2, 2]), fdim=_pick(r, [128, 192, 256]),
                 norm=_pick(r, ["instance", "instance", "batch", "group"]),
                 context=_pick(r, ["separate", "separate", "shared"]), hdim=_pick(r, [64, 96, 128]),
                 cdim=_pick(r, [64, 96, 128]), corr=_pick(r, ["allpairs", "allpairs", "local"]),
                 levels=int(r.integers(1, 5)), radius=int(r.integers(1, 5)),
                 lookup=_pick(r, ["gather", "gather", "grid_sample"]), gru=_pick(r, ["conv", "sep"]),
                 iters=int(r.integers(2, 7)), up=_pick(r, ["bilinear", "convex"]))
        if s["corr"] == "local":
            del s["lookup"]  # drawn either way (the stream stays aligned), kept only where the model uses it
        sizes = [128, 192, 256, 320, 384]
    elif family == "fttransformer":
        # FT-Transformer over numeric tabular features [B, F] (size: F 8-256): each feature its own linear
        # embedding (x[..., None] * W[F, d] + b[F, d], ReLU or not) or a periodic one (Sin, Cos of x times learned
        # frequencies, a per-feature Linear by a batched MatMul, ReLU), a CLS token appended; 1-6 pre-norm layers
        # (the first one's attention LayerNorm optional, as in the paper), multi-head attention (manual or SDPA,
        # q/k/v separate or fused; optionally only the CLS query in the last layer), a ReGLU, GEGLU or GELU FFN;
        # head LayerNorm, ReLU, Linear on the CLS token: [B, classes]
        d = _pick(r, [64, 96, 128, 192, 256])
        s.update(d=d, heads=_pick(r, [4, 8, 8]), layers=int(r.integers(1, 7)),
                 embed=_pick(r, ["linear", "linear", "linear_relu", "periodic"]), frequencies=_pick(r, [8, 16, 24]),
                 ffn=_pick(r, ["reglu", "reglu", "geglu", "gelu"]), d_ffn=int(d * _pick(r, [4 / 3, 2.0, 8 / 3])),
                 first_norm=bool(r.random() < 0.5), qkv=_pick(r, ["separate", "fused"]),
                 attn=_pick(r, ["manual", "sdpa"]), cls_only_last=bool(r.random() < 0.5),
                 classes=_pick(r, [1, 2, 3, 7, 10, 100]))
        if s["embed"] != "periodic":
            del s["frequencies"]  # drawn either way, kept only where the model uses it
        sizes = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]  # features
    elif family == "vqvae":
        # VQ-VAE-like: a strided conv encoder, a codebook lookup (distances, ArgMin, Gather or one-hot MatMul), a
        # mirrored decoder (ConvTranspose or Resize + conv), Tanh or Sigmoid
        s.update(width=_pick(r, [32, 48, 64, 96, 128]), downs=int(r.integers(2, 4)), down_k=_pick(r, [4, 4, 3]),
                 res_blocks=int(r.integers(0, 3)), code_dim=_pick(r, [32, 64, 128, 256]),
                 codes=_pick(r, [256, 512, 1024, 2048, 4096]), quant=_pick(r, ["gather", "gather", "onehot"]),
                 up=_pick(r, ["convT", "convT", "resize"]), out_act=_pick(r, ["tanh", "sigmoid"]))
        sizes = [64, 96, 128, 160, 192, 224, 256]
    elif family == "capsnet":
        # CapsNet-like: conv, primary capsules, prediction vectors (one batched MatMul over the input capsules),
        # unrolled dynamic routing, class lengths, an optional masked reconstruction decoder
        s.update(in_ch=_pick(r, [1, 3]), conv_ch=_pick(r, [64, 128, 256]), conv_k=_pick(r, [5, 7, 9]),
                 conv_stride=_pick(r, [1, 1, 2]), prim_k=_pick(r, [3, 5, 9]), prim_caps=_pick(r, [8, 16, 32]),
                 prim_dim=_pick(r, [4, 8]), classes=_pick(r, [5, 10, 16]), out_dim=_pick(r, [8, 16]),
                 iters=int(r.integers(1, 4)), decoder=bool(r.random() < 0.5))
        # sizes whose input capsules keep the prediction weights (N x classes x out_dim x prim_dim) under 4 M
        sizes = [z for z in (28, 32, 36, 40, 48) if _caps_n(s, z) * s["classes"] * s["out_dim"] * s["prim_dim"] <= 4e6]
        sizes = sizes or [28]
    elif family == "kan":
        # Kolmogorov-Arnold network over tabular features: B-spline (Cox-de Boor) or Gaussian RBF edge functions,
        # an optional SiLU base branch, LayerNorm between layers or not
        s.update(widths=[_pick(r, [16, 32, 64, 128]) for _ in range(int(r.integers(1, 4)))],
                 grid=int(r.integers(3, 11)), order=_pick(r, [2, 3, 3]), basis=_pick(r, ["bspline", "bspline", "rbf"]),
                 base=_pick(r, ["silu", "silu", "none"]), norm=bool(r.random() < 0.5),
                 classes=_pick(r, [1, 2, 10, 100]))
        sizes = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]  # features
    elif family == "nascell":
        # one cell drawn per architecture (NAS-Bench-201: 5 ops on the 6 edges of a 4-node DAG; DARTS adds 3)
        space = _pick(r, ["nb201", "nb201", "darts"])
        ops = ["none", "skip", "conv1x1", "conv3x3", "avgpool3x3"]
        ops += ["sep3x3", "dil3x3", "maxpool3x3"] if space == "darts" else []
        edges = {f"{i}{j}": _pick(r, ops) for j in range(1, 4) for i in range(j)}
        if all(edges[f"{i}3"] == "none" for i in range(3)):
            edges["03"] = "skip"   # the cell's output node must have an input
        s.update(space=space, edges=edges, stem_w=_pick(r, [16, 24, 32, 48, 64]),
                 cells=int(r.integers(1, 6)), classes=_pick(r, [10, 100, 1000]))
        sizes = [32, 48, 64, 96, 128]   # the first stage runs at full resolution (NAS-Bench-201's CIFAR/ImageNet-16)
    elif family == "neuralode":
        # an MLP vector field over a lifted state, integrated by unrolled fixed steps (weights shared across steps)
        s.update(dim=_pick(r, [32, 64, 128, 256]), hidden=[_pick(r, [32, 64, 128, 256])
                                                           for _ in range(int(r.integers(1, 4)))],
                 act=_pick(r, ["tanh", "softplus", "relu", "silu"]), time=bool(r.random() < 0.5),
                 solver=_pick(r, ["euler", "midpoint", "rk4", "rk4"]), steps=int(r.integers(2, 11)),
                 classes=_pick(r, [1, 2, 10, 100]))
        sizes = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]  # features
    elif family == "gmlp":
        patch = _pick(r, [4, 8, 16])
        dim = _pick(r, [64, 96, 128, 192, 256])
        s.update(patch=patch, dim=dim, depth=int(r.integers(2, 13)), d_ffn=dim * _pick(r, [2, 4, 6]),
                 spatial=_pick(r, ["linear", "conv1d"]), tiny_attn=_pick(r, [0, 0, 32, 64]), classes=1000)
        sizes = [z for z in range(64, 257, 32) if z % patch == 0 and (z // patch) ** 2 <= 1024]
    elif family == "xcit":
        patch, heads = _pick(r, [8, 16, 16]), _pick(r, [2, 4, 8])
        s.update(patch=patch, heads=heads, dim=heads * _pick(r, [24, 32, 48]), depth=int(r.integers(2, 13)),
                 mlp_ratio=_pick(r, [2, 3, 4]), lpi=bool(r.random() < 0.7), classes=1000)
        sizes = [z for z in range(96, 385, 32) if z % patch == 0 and (z // patch) ** 2 <= 2304]
    elif family == "stn":
        s.update(transformers=int(r.integers(1, 3)), loc_w=_pick(r, [8, 16, 32]),
                 widths=[_pick(r, [16, 32, 64, 128]) for _ in range(2)], layers=int(r.integers(1, 4)),
                 mode=_pick(r, ["bilinear", "bilinear", "nearest"]), padding=_pick(r, ["zeros", "border"]),
                 classes=_pick(r, [10, 100, 1000]))
        sizes = [64, 96, 128, 160, 192, 224, 256]
    elif family == "aft":
        s.update(dim=_pick(r, [64, 128, 256, 384, 512]), depth=int(r.integers(2, 9)),
                 variant=_pick(r, ["simple", "full", "full"]), ffn_ratio=_pick(r, [2, 4]),
                 classes=_pick(r, [10, 100, 1000]))
        sizes = [32, 64, 128, 256, 384, 512, 768, 1024]
    elif family == "res2net":
        stages = int(r.integers(3, 5))
        s.update(stem=_pick(r, [3, 7]), stem_ch=_pick(r, [32, 64]), scale=int(r.integers(2, 7)),
                 width=_pick(r, [8, 14, 26, 32]), blocks=[int(r.integers(1, 4)) for _ in range(stages)],
                 expansion=_pick(r, [2, 4]), se=bool(r.random() < 0.4), classes=1000)
        sizes = list(range(96, 321, 32))
    elif family == "hourglass":
        depth = int(r.integers(2, 5))
        s.update(stacks=int(r.integers(1, 4)), depth=depth, ch=_pick(r, [64, 128, 192, 256]),
                 res_blocks=int(r.integers(1, 3)), joints=_pick(r, [8, 16, 17, 32]))
        step = 4 * 2 ** depth
        sizes = [z for z in range(128, 385, 32) if z % step == 0]
    elif family == "retnet":
        heads = _pick(r, [2, 4, 8])
        s.update(heads=heads, dim=heads * _pick(r, [32, 64]), depth=int(r.integers(2, 9)),
                 ffn=_pick(r, ["gelu", "swiglu"]), ffn_ratio=_pick(r, [2, 3, 4]), classes=_pick(r, [10, 100, 1000]))
        sizes = [32, 64, 128, 256, 384, 512, 768, 1024]
    elif family == "convmixer":
        # the widest (768, patch 4, 16 blocks, kernel 9, 320 px) is about 135 GFLOP at batch 1
        patch = _pick(r, [4, 7, 8, 14, 16])
        s.update(patch=patch, dim=_pick(r, [128, 256, 384, 512, 768]), depth=int(r.integers(4, 17)),
                 k=_pick(r, [5, 7, 9]), classes=_pick(r, [10, 100, 1000]))
        # multiples of the patch, so that the patch grid is exact
        sizes = sorted({patch * -(-z // patch) for z in range(96, 321, 32)} & set(range(96, 321)))
    elif family == "wavenet":
        # layer i of a cycle dilates by 2 ** i; the widest (128 residual, 256 skip, kernel 3, 3 cycles of 10, T 16000)
        # is about 150 GFLOP at batch 1
        s.update(c_in=_pick(r, [1, 16, 40, 64, 80]), res_ch=_pick(r, [32, 64, 96, 128]),
                 skip_ch=_pick(r, [64, 128, 256]), k=_pick(r, [2, 3]), cycles=int(r.integers(1, 4)),
                 layers=int(r.integers(6, 11)), out_ch=_pick(r, [1, 30, 80, 256]))
        sizes = [1024, 2048, 4000, 4096, 8000, 8192, 16000]  # time steps (samples or frames)
    elif family == "t5enc":
        heads = _pick(r, [2, 4, 6, 8, 12])
        hd = _pick(r, [32, 64])
        s.update(heads=heads, dim=heads * (64 if heads == 2 else hd), depth=int(r.integers(2, 13)),
                 ffn_ratio=_pick(r, [2, 3, 4]), buckets=_pick(r, [16, 32, 64]), max_distance=_pick(r, [64, 128]),
                 bias_per_layer=bool(r.random() < 0.3), gelu=_pick(r, ["tanh", "none"]))
        sizes = [32, 64, 128, 256, 384, 512, 768, 1024]
    elif family == "llama":
        heads = _pick(r, [4, 8, 12, 16])
        hd = _pick(r, [32, 64])
        s.update(heads=heads, dim=heads * hd, kv_heads=_pick(r, [1, 2, 4, heads]), depth=int(r.integers(2, 13)),
                 ffn_mult=float(_pick(r, [1.0, 1.3])), rope_base=float(_pick(r, [1e4, 5e5])),
                 attn=_pick(r, ["manual", "sdpa"]), vocab=_pick(r, [0, 1000, 4096]))
        sizes = [32, 64, 128, 256, 384, 512, 768, 1024]
    elif family == "maxvit":
        window, stages = _pick(r, [7, 8]), int(r.integers(2, 5))
        s.update(window=window, stages=stages, stem_w=_pick(r, [32, 64]), base=_pick(r, [32, 64, 96]),
                 depths=[int(r.integers(1, 4)) for _ in range(stages)], rel_bias=bool(r.random() < 0.5),
                 classes=_pick(r, [10, 100, 1000]))
        unit = window * 2 ** (stages + 1)   # every stage's map an exact multiple of the window (and of the grid)
        sizes = [z for z in range(unit, 449, unit) if z >= 96] or [unit]
    elif family == "focalnet":
        stages = int(r.integers(3, 5))
        s.update(stages=stages, base=_pick(r, [64, 96, 128]), levels=_pick(r, [2, 3]), k0=_pick(r, [3, 5]),
                 depths=[int(r.integers(1, 3)) for _ in range(stages)], norm_modulator=bool(r.random() < 0.5),
                 classes=_pick(r, [10, 100, 1000]))
        s["depths"][-2] = int(r.integers(2, 7))   # the third stage is the deep one, as in Swin and FocalNet
        unit = 4 * 2 ** (stages - 1)
        sizes = [z for z in range(128, 321, 32) if z % unit == 0]
    elif family == "levit":
        base = _pick(r, [128, 192, 256])
        s.update(dims=[base, base + _pick(r, [64, 96, 128]), base + 2 * _pick(r, [64, 96, 128])],
                 heads=[_pick(r, [3, 4]), _pick(r, [4, 6]), _pick(r, [6, 8])], key_dim=_pick(r, [16, 32]),
                 v_ratio=_pick(r, [2, 4]), depths=[int(r.integers(1, 5)) for _ in range(3)],
                 classes=_pick(r, [10, 100, 1000]))
        sizes = list(range(128, 321, 32))
    elif family == "poolformer":
        base = _pick(r, [32, 48, 64, 96])
        s.update(widths=[base, 2 * base, 5 * base if base <= 64 else 4 * base, 8 * base],
                 depths=[int(r.integers(1, 3)), int(r.integers(1, 3)), int(r.integers(2, 9)), int(r.integers(1, 3))],
                 pool_k=_pick(r, [3, 5]), mlp_ratio=_pick(r, [3, 4]), layer_scale=bool(r.random() < 0.7),
                 classes=_pick(r, [10, 100, 1000]))
        sizes = list(range(128, 385, 32))
    elif family == "mobilevit":
        c0 = _pick(r, [16, 24, 32])
        s.update(stem_w=c0, widths=[c0 * 2, c0 * 3, c0 * 4, c0 * 5], expand=_pick(r, [2, 4]),
                 dims=[_pick(r, [64, 128]), _pick(r, [128, 192]), _pick(r, [192, 256])],   # heads of 32 or 64
                 vit_depths=[int(r.integers(1, 4)), int(r.integers(2, 5)), int(r.integers(1, 4))],
                 head_dim=_pick(r, [32, 64]), attn=_pick(r, ["manual", "sdpa"]), classes=_pick(r, [10, 100, 1000]))
        sizes = list(range(128, 385, 64))
    elif family == "resmlp":
        patch = _pick(r, [8, 14, 16, 16])
        s.update(patch=patch, dim=_pick(r, [192, 256, 384, 512]), depth=int(r.integers(4, 17)),
                 mlp_ratio=_pick(r, [2, 3, 4]), token_mix=_pick(r, ["linear", "matmul"]),
                 classes=_pick(r, [10, 100, 1000]))
        # at most 576 tokens (24 x 24): the cross-patch weights are N x N per block
        sizes = [patch * n for n in range(8, 25) if 128 <= patch * n <= 384 and n % 2 == 0]
    elif family == "ghostnet":
        wm = float(_pick(r, [0.5, 0.75, 1.0, 1.3]))
        s.update(width_mult=wm, stem_w=_div4(16 * wm), widths=[_div4(c * wm) for c in (24, 40, 80, 112, 160)],
                 strides=[2, 2, 2, 1, 2], ratio=_pick(r, [2, 3]),
                 depths=[int(r.integers(1, 3)), int(r.integers(1, 3)), int(r.integers(2, 6)), int(r.integers(1, 4)),
                         int(r.integers(1, 5))],
                 kernels=[_pick(r, [3, 5]) for _ in range(5)], expand=[_pick(r, [2, 3, 4, 6]) for _ in range(5)],
                 se=[bool(r.random() < 0.5) for _ in range(5)], head_w=_pick(r, [1024, 1280]),
                 classes=_pick(r, [10, 100, 1000]))
        sizes = list(range(128, 385, 32))
    elif family == "hardnet":
        wm = float(_pick(r, [0.5, 0.75, 1.0]))
        if r.random() < 0.5:   # HarDNet-68-like: 5 stages, no downsampling after the second and the last
            widths, down = (128, 256, 320, 640, 1024), [True, False, True, True, False]
            growth = [_pick(r, [10, 14, 16]), _pick(r, [16, 20]), _pick(r, [20, 24, 32]), _pick(r, [32, 40, 48]),
                      _pick(r, [64, 96, 128, 160])]
            layers = [_pick(r, [4, 8]), _pick(r, [8, 16]), _pick(r, [8, 16]), _pick(r, [8, 16]), _pick(r, [4, 8])]
        else:                  # HarDNet-39-like: 4 stages
            widths, down = (96, 320, 640, 1024), [True, True, True, False]
            growth = [_pick(r, [12, 16]), _pick(r, [16, 20, 24]), _pick(r, [32, 48, 64]), _pick(r, [96, 128, 160])]
            layers = [_pick(r, [4, 8]), _pick(r, [8, 16]), _pick(r, [4, 8, 16]), _pick(r, [4, 8])]
        s.update(width_mult=wm, stem_w=[_pick(r, [24, 32]), _pick(r, [48, 64])], widths=[_div4(c * wm) for c in widths],
                 down=down, growth=growth, layers=layers, grmul=float(_pick(r, [1.6, 1.7])),
                 depthwise=bool(r.random() < 0.4), act=_pick(r, ["relu6", "relu"]), classes=_pick(r, [10, 100, 1000]))
        sizes = list(range(128, 385, 32))
    elif family == "nystromformer":
        heads = _pick(r, [2, 4, 6, 8])
        m = _pick(r, [16, 32, 64, 128])
        s.update(heads=heads, dim=heads * _pick(r, [32, 64]), depth=int(r.integers(2, 9)), landmarks=m,
                 pinv_iters=int(r.integers(3, 9)), conv_k=_pick(r, [0, 17, 33, 65]), ffn_ratio=_pick(r, [2, 4]),
                 norm=_pick(r, ["pre", "post"]), head=_pick(r, ["seq", "mean"]), classes=_pick(r, [2, 10, 100, 1000]))
        # segments of S / landmarks tokens: S a multiple of the landmarks, at least 2 tokens a segment
        sizes = [z for z in (128, 256, 384, 512, 768, 1024, 1536, 2048) if z % m == 0 and z >= 2 * m]
    elif family == "rednet":
        wm, gc = float(_pick(r, [0.5, 0.75, 1.0])), _pick(r, [8, 16, 32])
        s.update(width_mult=wm, stem_w=_pick(r, [32, 64]), stem_inv=bool(r.random() < 0.5),
                 depths=list(_pick(r, [[1, 2, 4, 1], [2, 3, 5, 2], [3, 4, 6, 3]])),   # RedNet-26/38/50-like
                 mids=[max(gc, int(round(c * wm / gc)) * gc) for c in (64, 128, 256, 512)], expansion=4,
                 k=_pick(r, [3, 5, 7]), group_ch=gc, reduction=_pick(r, [2, 4]), unfold=_pick(r, ["unfold", "slices"]),
                 classes=_pick(r, [10, 100, 1000]))
        sizes = list(range(128, 321, 32))
    elif family == "bigbird":
        heads, w = _pick(r, [2, 4, 6, 8]), _pick(r, [32, 64, 128])
        s.update(heads=heads, dim=heads * _pick(r, [32, 64]), depth=int(r.integers(2, 9)), block=w,
                 rand_blocks=_pick(r, [0, 1, 2, 3]), global_tokens=_pick(r, [0, 1, 8, 32]),
                 ffn_ratio=_pick(r, [2, 4]), norm=_pick(r, ["pre", "post"]), head=_pick(r, ["seq", "mean"]),
                 classes=_pick(r, [2, 10, 100, 1000]))
        # S a multiple of the block, at least 8 blocks (a window of 3, the random blocks drawn outside it and
        # outside the first (global) block)
        sizes = [z for z in (256, 512, 1024, 2048, 3072, 4096) if z % w == 0 and z // w >= 8]
    elif family == "dgcnn":
        # over [B, 3, N] points, the graph recomputed on every layer's features: its pairwise distances are N x N
        # and its edge features [B, 2C, N, k] (_largest_elems halves the batch under them)
        widths = [_pick(r, [32, 64])]
        for _ in range(int(r.integers(1, 4))):               # 2-4 EdgeConvs, each as wide as the last or twice
            widths.append(min(256, widths[-1] * _pick(r, [1, 2])))
        s.update(k=_pick(r, [8, 12, 16, 20, 24, 32]), edges=widths, convs=_pick(r, [1, 2]),
                 gather=_pick(r, ["rows", "elements"]), emb=_pick(r, [256, 512, 1024]),
                 pool=_pick(r, ["max", "max_avg"]), head=_pick(r, [[512, 256], [256], [256, 128]]),
                 classes=_pick(r, [10, 16, 40]))
        sizes = [256, 512, 768, 1024, 1536, 2048]
    elif family == "deformattn":
        # Deformable-DETR-like: levels at strides 16-32 (2), 8-32 (3) or 8-64 (4: the 4th by a stride-2 conv)
        heads = _pick(r, [4, 8])
        s.update(stem_w=_pick(r, [32, 48, 64]), blocks=int(r.integers(1, 3)), levels=int(r.integers(2, 5)),
                 dim=_pick(r, [128, 192, 256]), heads=heads, points=int(r.integers(2, 5)),
                 depth=int(r.integers(2, 7)), ffn_ratio=_pick(r, [2, 4]), act=_pick(r, ["relu", "gelu"]),
                 norm=_pick(r, ["post", "pre"]), classes=_pick(r, [10, 100, 1000]))
        sizes = list(range(128, 513, 64))                    # multiples of 64: every level's grid exact
    elif family == "condconv":
        # CondConv/DynamicConv CNN: each dynamic conv's kernel mixed per sample from K experts (routing [B, K] @
        # experts [K, C_out C_in/g k k]), run as one grouped Conv with the batch folded into the groups
        s.update(block=_pick(r, ["mbconv", "basic"]), stem_w=_pick(r, [16, 24, 32]), stages=int(r.integers(3, 6)),
                 width_mult=float(_pick(r, [1.5, 2.0])), k=_pick(r, [3, 5]), expand=_pick(r, [3, 4, 6]),
                 se=bool(r.random() < 0.5), dynamic=_pick(r, ["all", "spatial"]), experts=_pick(r, [2, 4, 6, 8]),
                 routing=_pick(r, ["sigmoid", "softmax"]), temperature=_pick(r, [1, 4, 30]),
                 router=_pick(r, ["block", "conv"]), router_mlp=bool(r.random() < 0.5),
                 act=_pick(r, ["relu", "hardswish", "silu"]), head_w=_pick(r, [512, 1024, 1280]),
                 classes=_pick(r, [10, 100, 1000]))
        s["depths"] = [int(r.integers(1, 4)) for _ in range(s["stages"])]
        # every stage's width, its first block strided: under 320 (mbconv) or 256 (basic, whose 3x3 convs are dense)
        cap = 320 if s["block"] == "mbconv" else 256
        s["widths"] = [min(cap, _div4(s["stem_w"] * s["width_mult"] ** (i + 1))) for i in range(s["stages"])]
        if s["block"] == "basic":
            for key in ("k", "expand", "se", "dynamic"):
                del s[key]   # drawn either way (the stream stays aligned), kept only where the model uses them
        if s["routing"] == "sigmoid":
            del s["temperature"]
        sizes = list(range(128, 321, 32))
    elif family == "tabnet":
        # TabNet over numeric tabular features [B, F] (size: F 16-512): sequential attention steps, each choosing
        # its features by a sparse mask (sparsemax, entmax 1.5 or softmax) over a prior that decays by what earlier
        # steps used
        s.update(n_d=_pick(r, [8, 16, 32, 64]), n_a=_pick(r, [8, 16, 32, 64]), steps=int(r.integers(3, 9)),
                 shared=int(r.integers(1, 3)), independent=int(r.integers(1, 3)),
                 gamma=float(_pick(r, [1.0, 1.2, 1.5, 2.0])), norm=_pick(r, ["batch", "ghost"]),
                 vbs=_pick(r, [128, 256, 512]), mask=_pick(r, ["sparsemax", "sparsemax", "entmax15", "softmax"]),
                 classes=_pick(r, [1, 2, 3, 10, 100]))
        if s["norm"] == "batch":
            del s["vbs"]
        sizes = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]  # features
    elif family == "roihead":
        # a two-stage detector's second stage: a small CNN backbone (and an FPN-like merge, or not) to one feature
        # map, R boxes an image (fixed, or the top R of an RPN-like head's proposals), RoiAlign of every box to o x o
        # bins, a box head (two FCs, or a few convs) to class logits and box deltas
        stages = int(r.integers(3, 5))
        s.update(stem_w=_pick(r, [16, 24, 32]), stages=stages, fpn=bool(r.random() < 0.5),
                 neck_w=_pick(r, [64, 128, 256]), boxes=_pick(r, ["fixed", "proposals"]),
                 rois=_pick(r, [16, 32, 64, 128, 256]), out=_pick(r, [7, 14]), sampling=_pick(r, [0, 2]),
                 aligned=bool(r.random() < 0.5), head=_pick(r, ["fc", "conv"]), hidden=_pick(r, [256, 512, 1024]),
                 head_convs=int(r.integers(2, 5)), head_w=_pick(r, [128, 256]),
                 deltas=_pick(r, ["class", "agnostic"]), classes=_pick(r, [2, 21, 81, 91]))
        s["depths"] = [int(r.integers(1, 3)) for _ in range(stages)]
        s["widths"] = [min(256, s["stem_w"] * 2 ** (i + 1)) for i in range(stages)]
        s["stride"] = 2 ** (stages + 1) // (2 if s["fpn"] else 1)    # the stem and every stage stride 2
        if s["head"] == "fc":   # Faster R-CNN's box head pools to 7 x 7 (a 14 x 14 flatten would be a 50M Linear)
            s["out"] = 7
            del s["head_convs"], s["head_w"]
        elif s["out"] == 14:    # Mask R-CNN's 14 x 14 conv head over at most 128 boxes an image
            s["rois"] = min(s["rois"], 128)
        sizes = list(range(256, 641, 64))
    elif family == "sinkhorn":
        # a SuperGlue/LoFTR-like matcher: two sets of N keypoints (x, y, score and a descriptor each), a keypoint
        # encoder, self/cross attention layers, a score matrix by MatMul, T unrolled log-domain Sinkhorn iterations
        heads = _pick(r, [1, 2, 4, 8])
        s.update(desc=_pick(r, [64, 128, 256]), dim=_pick(r, [64, 128, 256]), heads=heads,
                 kenc=bool(r.random() < 0.6), layers=int(r.integers(0, 10)), attn=_pick(r, ["manual", "sdpa"]),
                 act=_pick(r, ["relu", "gelu"]), iters=_pick(r, [3, 5, 10, 20, 30, 50]),
                 dustbin=bool(r.random() < 0.7))
        s["f_in"] = 3 + s["desc"]
        if s["layers"] == 0:
            del s["heads"], s["attn"], s["act"]
        sizes = [64, 128, 256, 384, 512, 768, 1024]          # keypoints an image
    elif family == "nmsdet":
        # a one-stage detector with its post-processing in the graph: a small CNN backbone, 1-2 levels of
        # anchor-free (FCOS-like) heads, the top K points an image by their best class score, an optional score
        # threshold (boolean indexing: NonZero), then NonMaxSuppression over every image's boxes at once
        stages = int(r.integers(3, 5))
        s.update(stem_w=_pick(r, [16, 24, 32]), stages=stages, levels=_pick(r, [1, 2]),
                 neck_w=_pick(r, [64, 96, 128]), head_convs=int(r.integers(1, 4)),
                 classes=_pick(r, [1, 20, 80]), topk=_pick(r, [100, 200, 500, 1000]),
                 threshold=_pick(r, [0.0, 0.3, 0.5, 0.6]), iou=_pick(r, [0.45, 0.5, 0.6, 0.7]),
                 nms=_pick(r, ["class", "agnostic"]), max_det=_pick(r, [100, 300]))
        s["depths"] = [int(r.integers(1, 3)) for _ in range(stages)]
        s["widths"] = [min(256, s["stem_w"] * 2 ** (i + 1)) for i in range(stages)]
        if s["classes"] == 1:
            s["nms"] = "agnostic"
        sizes = list(range(256, 641, 64))
    else:  # perceiver
        stem = _pick(r, ["patch", "conv"])
        patch = _pick(r, [4, 8, 16] if stem == "conv" else [4, 6, 8, 12, 14, 16])  # conv: log2(patch) stride-2 convs
        s.update(stem=stem, patch=patch, token_dim=_pick(r, [64, 128, 192, 256]),
                 latents=_pick(r, [32, 64, 128, 256]), dim=_pick(r, [128, 192, 256, 384, 512]),
                 cross=int(r.integers(1, 3)), cross_heads=_pick(r, [1, 2, 4, 8]),
                 cross_attn=_pick(r, ["manual", "mha"]), depth=int(r.integers(2, 9)), heads=_pick(r, [2, 4, 8]),
                 mlp_ratio=_pick(r, [2, 3, 4]), attn=_pick(r, ["manual", "sdpa"]), classes=1000)
        # multiples of the patch, so that the token count (and the position embedding) is exact
        sizes = sorted({patch * -(-z // patch) for z in range(128, 385, 32)} & set(range(128, 385)))
    s["configs"] = _configs(r, family, sizes)
    if family == "dlrm":  # recommenders serve big batches: batch 1, 64-512 and 1024-2048
        s["configs"][1]["batch"], s["configs"][2]["batch"] = _pick(r, [64, 128, 256, 512]), _pick(r, [1024, 2048])
    if family == "implicit":  # at most 1e6 points per run (B x N): the largest size that fits under it
        for c in s["configs"]:
            c["size"] = max(z for z in sizes if z <= c["size"] and c["batch"] * z <= 1_000_000)
    if family == "fttransformer":  # tabular models serve big batches: batch 1, 64-256 and 1024-4096
        s["configs"][1]["batch"], s["configs"][2]["batch"] = _pick(r, [64, 128, 256]), _pick(r, [1024, 2048, 4096])
    if family in ("hrnet", "raft", "fttransformer"):
        _fit_configs(s, sizes)
    if family in ("kan", "neuralode", "tabnet"):  # tabular models serve big batches, as fttransformer
        s["configs"][1]["batch"], s["configs"][2]["batch"] = _pick(r, [64, 128, 256]), _pick(r, [1024, 2048, 4096])
    for c in s["configs"]:   # the largest intermediate under ~1 GB (2.5e8 floats): halve the batch until it is
        while c["batch"] > 1 and c["batch"] * _largest_elems(s, c["size"]) > 2.5e8:
            c["batch"] //= 2
    if family == "nmsdet":   # NonMaxSuppression compares every pair of the B K boxes: at most 16384 of them
        for c in s["configs"]:
            while c["batch"] > 1 and c["batch"] * min(s["topk"], nmsdet_points(s, c["size"])) > 16384:
                c["batch"] //= 2
    return s


def _div4(v: float) -> int:
    """v rounded to a multiple of 4, not below 4 nor 10% under v (MobileNet's and GhostNet's make_divisible)."""
    d = max(4, int(v + 2) // 4 * 4)
    return d + 4 if d < 0.9 * v else d


def _caps_n(s: dict, size: int) -> int:
    """A capsnet's input capsules at H = W = size: capsule maps x the primary conv's output grid."""
    h1 = (size - s["conv_k"]) // s["conv_stride"] + 1
    h2 = (h1 - s["prim_k"]) // 2 + 1
    return s["prim_caps"] * max(h2, 1) ** 2


def _largest_elems(s: dict, size: int) -> int:
    """Batch-1 elements of the largest intermediate of the families that have one far over their activations: a
    vqvae's distances (grid x codes), a capsnet's prediction vectors (N x classes x out_dim), a kan's spline bases
    (features x basis functions x widest layer); 0 for the others."""
    fam = s["family"]
    if fam == "vqvae":
        return (size // 2 ** s["downs"]) ** 2 * s["codes"]
    if fam == "capsnet":
        return _caps_n(s, size) * s["classes"] * s["out_dim"] * max(s["prim_dim"], 2)
    if fam == "kan":
        return max([size] + s["widths"]) * (s["grid"] + 2 * s["order"] + 1)
    if fam == "wavenet":   # the gated conv's 2 x residual channels, the skips or the output, per time step
        return max(2 * s["res_ch"], s["skip_ch"], s["out_ch"]) * size
    if fam == "t5enc":     # the attention scores, heads x T x T
        return s["heads"] * size * size
    if fam == "llama":     # the attention scores, heads x T x T
        return s["heads"] * size * size
    if fam == "levit":     # the first stage's attention scores, heads x N x N, N = (size / 16)^2
        return s["heads"][0] * (size // 16) ** 4
    if fam == "mobilevit":  # the first MobileViT block's scores: 4 patch groups x heads x N x N, N = (size / 16)^2
        return 4 * max(s["dims"][0] // s["head_dim"], 1) * (size // 16) ** 4
    if fam == "rednet" and s["unfold"] == "unfold":   # the first stage's unfolded input, mid x k^2 x (H/4)^2
        return s["mids"][0] * s["k"] ** 2 * (size // 4) ** 2
    if fam == "bigbird":   # the block-sparse scores, heads x S x ((3 + random) blocks + global tokens)
        return s["heads"] * size * ((3 + s["rand_blocks"]) * s["block"] + s["global_tokens"])
    if fam == "dgcnn":     # the distances (N x N) or the widest edge features or conv outputs (2C or C' x N x k)
        cin = [3] + s["edges"][:-1]
        return max(size * size, max(max(2 * c, w) * size * s["k"] for c, w in zip(cin, s["edges"])))
    if fam == "deformattn":   # the sampled values of all levels and points, D x tokens x levels x points
        return s["dim"] * deformattn_tokens(s, size) * s["levels"] * s["points"]
    if fam == "roihead":   # the pooled features of an image's boxes, R x C x o x o (a conv head's, R x head_w x o x o)
        return s["rois"] * max(s["neck_w"], s.get("head_w", 0)) * s["out"] ** 2
    if fam == "sinkhorn":  # both sets' attention scores (2 x heads x N x N) or the couplings, (N + 1)^2
        return max(2 * s.get("heads", 0) * size * size, (size + 1) ** 2)
    if fam == "condconv":  # the widest per-sample kernel, C_out x C_in/g x k x k, made for each sample of the batch
        return max(condconv_kernels(s))
    if fam == "maxvit":    # the first stage's attention scores (heads x tokens x window^2) or its MBConv expansion
        return (size // 4) ** 2 * max(s["window"] ** 2 * max(s["base"] // 32, 1), 4 * s["base"])
    return 0


def _diffusion_plan(s: dict) -> list:
    """A diffusion UNet's blocks in order: (part, level, c_in, c_out, attention): 'res' (down), 'down' (a stride-2
    conv from `level` to level + 1), 'mid', 'up_res' (its c_in counts the skip Concat), 'up' (level to level - 1)."""
    ch, attn, n = s["chans"], set(s["attn_levels"]), len(s["chans"])
    plan, skips, c = [], [ch[0]], ch[0]
    for lv in range(n):
        for _ in range(s["res_blocks"]):
            plan.append(("res", lv, c, ch[lv], lv in attn))
            c = ch[lv]
            skips.append(c)
        if lv < n - 1:
            plan.append(("down", lv, c, c, False))
            skips.append(c)
    plan.append(("mid", n - 1, c, c, s["mid_attn"]))
    for lv in reversed(range(n)):
        for _ in range(s["res_blocks"] + 1):
            plan.append(("up_res", lv, c + skips.pop(), ch[lv], lv in attn))
            c = ch[lv]
        if lv > 0:
            plan.append(("up", lv, c, c, False))
    return plan


def _diffusion_gflop(s: dict, size: int) -> float:
    """Batch-1 GFLOP (2 per multiply-add) of a diffusion UNet at H = W = size, from its plan."""
    px = lambda lv: (size >> lv) ** 2  # noqa: E731  pixels at a level
    macs = 9 * s["in_ch"] * s["chans"][0] * px(0) + 9 * s["chans"][0] * s["out_ch"] * px(0)
    for part, lv, ci, co, attn in _diffusion_plan(s):
        if part == "down":
            macs += 9 * ci * ci * px(lv + 1)
        elif part == "up":
            macs += 9 * ci * ci * px(lv - 1)
        else:
            res = (9 * ci * co + 9 * co * co + (ci * co if ci != co else 0)) * px(lv)
            macs += res * (2 if part == "mid" else 1)
            if attn:
                macs += 4 * co * co * px(lv) + 2 * px(lv) ** 2 * co
    return 2 * macs / 1e9


def _hrnet_gflop(s: dict, size: int) -> float:
    """Batch-1 GFLOP (2 per multiply-add, convs and the Linear) of an HRNet at H = W = size."""
    n, sw, w1 = s["stages"], s["stem_w"], s["stage1_w"]
    c = [s["width"] << i for i in range(n)]
    px = [(size // 4 >> i) ** 2 for i in range(n)]            # pixels of the branch at 1/4, 1/8, 1/16, 1/32

    def bottleneck(ci, p, co):
        return ci * p + 9 * p * p + p * co + (ci * co if ci != co else 0)
    block = (lambda ch: 18 * ch * ch) if s["block"] == "basic" else (lambda ch: bottleneck(ch, ch // 2, ch))
    macs = 27 * sw * (size // 2) ** 2 + 9 * sw * sw * px[0]
    macs += sum(bottleneck(sw if i == 0 else w1, w1 // 4, w1) for i in range(s["stage1_blocks"])) * px[0]
    macs += 9 * w1 * c[0] * px[0] + 9 * w1 * c[1] * px[1]
    for k in range(2, n + 1):                                 # stage k: k branches
        for m in range(s["modules"][k - 2]):
            macs += sum(s["blocks"] * block(c[i]) * px[i] for i in range(k))
            last = k == n and m == s["modules"][k - 2] - 1
            for i in range(1 if last and s["head"] == "pose" else k):
                for j in range(k):
                    if j > i:
                        macs += c[j] * c[i] * px[j]
                    for t in range(i - j):                    # j < i: i - j stride-2 3x3 convs
                        macs += 9 * c[j] * (c[i] if t == i - j - 1 else c[j]) * px[j + t + 1]
        if k < n:
            macs += 9 * c[k - 1] * c[k] * px[k]
    if s["head"] == "cls":
        q = [32, 64, 128, 256]
        macs += sum(bottleneck(c[i], q[i], 4 * q[i]) * px[i] for i in range(n))
        macs += sum(9 * 4 * q[i] * 4 * q[i + 1] * px[i + 1] for i in range(n - 1))
        macs += 4 * q[n - 1] * s["head_w"] * px[n - 1] + s["head_w"] * s["classes"]
    elif s["head"] == "pose":
        macs += c[0] * s["classes"] * px[0]
    else:
        macs += (sum(c) ** 2 + sum(c) * s["classes"]) * px[0]
    return 2 * macs / 1e9


def _raft_gflop(s: dict, size: int) -> float:
    """Batch-1 GFLOP (2 per multiply-add: convs and the correlation MatMul) of a RAFT-like model at H = W = size."""
    w, nb, fd, hd, cd = s["enc_w"], s["enc_blocks"], s["fdim"], s["hdim"], s["cdim"]
    k, lv, h = (2 * s["radius"] + 1) ** 2, s["levels"], size // 8
    px = [(size >> i) ** 2 for i in (1, 2, 3)]                # pixels at 1/2, 1/4, 1/8

    def enc(out):
        m, ci = 147 * w[0] * px[0], w[0]
        for i, co in enumerate(w):
            for b in range(nb):
                m += (9 * ci * co + 9 * co * co + (ci * co if ci != co else 0)) * px[i]
                ci = co
        return m + ci * out * px[2]
    macs = 2 * enc(fd) + (enc(hd + cd) if s["context"] == "separate" else 9 * fd * (hd + cd) * px[2])
    macs += (h * h) ** 2 * fd if s["corr"] == "allpairs" else sum(k * fd * (h >> i) ** 2 for i in range(lv))
    gru = (3 * 9 if s["gru"] == "conv" else 2 * 3 * 5) * (2 * hd + cd) * hd
    motion = lv * k * 2 * hd + 9 * 2 * hd * (3 * hd // 2) + 49 * 2 * hd + 9 * hd * (hd // 2) + 9 * 2 * hd * (hd - 2)
    macs += s["iters"] * (motion + gru + 9 * hd * 2 * hd + 9 * 2 * hd * 2) * px[2]
    if s["up"] == "convex":
        macs += (9 * hd * 256 + 256 * 576) * px[2]
    return 2 * macs / 1e9


def _ftt_gflop(s: dict, size: int) -> float:
    """Batch-1 GFLOP (2 per multiply-add: the Linears and attention MatMuls) of an FT-Transformer over `size`
    features (size + 1 tokens)."""
    t, d = size + 1, s["d"]
    ffn = (2 if s["ffn"] == "gelu" else 3) * d * s["d_ffn"]
    macs = size * 2 * s.get("frequencies", 0) * d + d * s["classes"]
    for i in range(s["layers"]):
        if s["cls_only_last"] and i == s["layers"] - 1:     # one query: the CLS token
            macs += (3 if s["qkv"] == "fused" else 2) * d * d * t + 2 * d * d + 2 * t * d + ffn
        else:
            macs += (4 * d * d + ffn) * t + 2 * t * t * d
    return 2 * macs / 1e9


def _fit_configs(s: dict, sizes: list, budget: float = 500.0) -> None:
    """hrnet, raft, fttransformer: each config at the largest of `sizes` up to its own whose run (batch x the
    family's batch-1 GFLOP) stays under `budget` (build_corpus caps at 600) and, for fttransformer, whose attention
    scores (batch x heads x tokens^2) stay under 2.5e8 elements; where even the smallest size is over, the batch
    halves, down to the config's floor (batch 1, 4 and 16; fttransformer 1, 64 and 1024). A middle config equal to
    the big one halves its batch."""
    gflop = {"hrnet": _hrnet_gflop, "raft": _raft_gflop, "fttransformer": _ftt_gflop}[s["family"]]
    tab = s["family"] == "fttransformer"

    def fits(b, z):
        return b * gflop(s, z) <= budget and (not tab or b * s["heads"] * (z + 1) ** 2 <= 2.5e8)
    for c, floor in zip(s["configs"], (1, 64, 1024) if tab else (1, 4, 16)):
        ok = [z for z in sizes if z <= c["size"] and fits(c["batch"], z)]
        c["size"] = max(ok) if ok else min(sizes)
        while c["batch"] > floor and not fits(c["batch"], c["size"]):
            c["batch"] //= 2
    if s["configs"][1] == s["configs"][2]:
        s["configs"][1]["batch"] //= 2


def _configs(r, family: str, sizes: list) -> list:
    """batch 1, a middle batch and a big one; a size each (sequence lengths for the SEQUENCE families)."""
    picks = [(1, _pick(r, sizes)), (_pick(r, MID_BATCHES), _pick(r, sizes)), (_pick(r, BIG_BATCHES), _pick(r, sizes))]
    return [{"batch": int(b), "size": int(z)} for b, z in picks]


def named_spec(name: str) -> dict:
    """A named model: torchvision by its name, timm as `timm-<name>`; configs batch 1/8/32 at 224."""
    fam = "timm" if name.startswith("timm-") else "torchvision"
    return {"family": fam, "arch": name, "seed": None,
            "configs": [{"batch": 1, "size": 224}, {"batch": 8, "size": 224}, {"batch": 32, "size": 224}]}


def spec_of(arch: str) -> dict:
    fam, sep, seed = arch.rpartition("-s")
    if sep and fam in FAMILIES and seed.isdigit():
        return arch_spec(fam, int(seed))
    return named_spec(arch)


# ---------------------------------------------------------------- torch modules

def _act(name: str):
    import torch.nn as nn
    return {"relu": nn.ReLU, "hardswish": nn.Hardswish, "silu": nn.SiLU, "gelu": nn.GELU}[name]()


def _conv_bn(cin, cout, k, stride=1, groups=1, dilation=1, act="relu"):
    import torch.nn as nn
    pad = dilation * (k - 1) // 2
    layers = [nn.Conv2d(cin, cout, k, stride, pad, dilation=dilation, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if act:
        layers.append(_act(act))
    return nn.Sequential(*layers)


def _token_stem(kind: str, width: int, patch: int):
    """Image -> [B, width, H/patch, W/patch]: one patch conv ('patch'), or log2(patch) stride-2 3x3 conv-BN-ReLU
    with widths doubling up to `width` (at least 16)."""
    import torch.nn as nn
    if kind == "patch":
        return nn.Conv2d(3, width, patch, patch)
    n = patch.bit_length() - 1
    ws = [max(width >> (n - 1 - i), 16) for i in range(n)]
    return nn.Sequential(*[_conv_bn(ws[i - 1] if i else 3, ws[i], 3, 2) for i in range(n)])


def _modules():
    """Module classes, defined lazily so that listing specs needs no torch."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class SE(nn.Module):
        def __init__(self, c, r=4):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, max(c // r, 8), 1), nn.Conv2d(max(c // r, 8), c, 1)

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))

    class Residual(nn.Module):
        def __init__(self, body, shortcut=None):
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x):
            y = self.body(x)
            if self.shortcut is not None:
                return y + self.shortcut(x)
            return y + x if y.shape == x.shape else y

    class Shuffle(nn.Module):
        def __init__(self, groups):
            super().__init__()
            self.g = groups

        def forward(self, x):
            b, c, h, w = x.shape
            return x.reshape(b, self.g, c // self.g, h, w).transpose(1, 2).reshape(b, c, h, w)

    class Attention(nn.Module):
        """Multi-head self-attention over [B, N, D]; manual (MatMul/Softmax) or SDPA, optional bias."""
        def __init__(self, dim, heads, impl="manual", bias_tokens=0):
            super().__init__()
            self.h, self.impl = heads, impl
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.scale = (dim // heads) ** -0.5
            self.bias = nn.Parameter(torch.randn(heads, bias_tokens, bias_tokens) * 0.02) if bias_tokens else None

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            if self.impl == "sdpa" and self.bias is None:
                o = F.scaled_dot_product_attention(q, k, v)
            else:
                a = (q @ k.transpose(-2, -1)) * self.scale
                if self.bias is not None:
                    a = a + self.bias
                o = a.softmax(-1) @ v
            return self.proj(o.transpose(1, 2).reshape(b, n, d))

    class Mlp(nn.Module):
        def __init__(self, dim, hidden, act="gelu"):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), _act(act), nn.Linear(hidden, dim)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        """Pre-norm transformer block over [B, N, D]; norm 'bn' is a BatchNorm over tokens (LeViT)."""
        def __init__(self, dim, heads, mlp_ratio, impl="manual", norm="ln", act="gelu", bias_tokens=0):
            super().__init__()
            self.norm = norm
            mk = (lambda: nn.LayerNorm(dim)) if norm == "ln" else (lambda: nn.BatchNorm1d(dim))
            self.n1, self.n2 = mk(), mk()
            self.attn = Attention(dim, heads, impl, bias_tokens)
            self.mlp = Mlp(dim, int(dim * mlp_ratio), act)

        def _n(self, m, x):
            return m(x) if self.norm == "ln" else m(x.transpose(1, 2)).transpose(1, 2)

        def forward(self, x):
            x = x + self.attn(self._n(self.n1, x))
            return x + self.mlp(self._n(self.n2, x))

    class WindowBlock(nn.Module):
        """Swin block: attention inside w x w windows of a [B, H, W, C] map, optionally shifted."""
        def __init__(self, dim, heads, window, shift, mlp_ratio):
            super().__init__()
            self.w, self.shift = window, shift
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = Attention(dim, heads, "manual", bias_tokens=window * window)
            self.mlp = Mlp(dim, int(dim * mlp_ratio))

        def forward(self, x):
            b, h, w, c = x.shape
            s, ws = self.shift, self.w
            y = self.n1(x)
            if s:
                y = torch.roll(y, shifts=(-s, -s), dims=(1, 2))
            y = y.reshape(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
            y = self.attn(y)
            y = y.reshape(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
            if s:
                y = torch.roll(y, shifts=(s, s), dims=(1, 2))
            x = x + y
            return x + self.mlp(self.n2(x))

    class PatchMerge(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.norm, self.red = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

        def forward(self, x):
            b, h, w, c = x.shape
            x = x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).reshape(b, h // 2, w // 2, 4 * c)
            return self.red(self.norm(x))

    class Tokens(nn.Module):
        """[B, C, H, W] -> [B, HW, C], a transformer stage, -> [B, C, H, W]."""
        def __init__(self, blocks, conv_pos=None):
            super().__init__()
            self.blocks, self.pos = blocks, conv_pos

        def forward(self, x):
            if self.pos is not None:
                x = x + self.pos(x)
            b, c, h, w = x.shape
            t = self.blocks(x.flatten(2).transpose(1, 2))
            return t.transpose(1, 2).reshape(b, c, h, w)

    class MixerBlock(nn.Module):
        def __init__(self, tokens, dim, token_hidden, channel_hidden):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.tok, self.ch = Mlp(tokens, token_hidden), Mlp(dim, channel_hidden)

        def forward(self, x):
            x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.ch(self.n2(x))

    class PoolBlock(nn.Module):
        def __init__(self, dim, k, mlp_ratio):
            super().__init__()
            self.n1, self.n2 = nn.GroupNorm(1, dim), nn.GroupNorm(1, dim)
            self.pool = nn.AvgPool2d(k, 1, k // 2, count_include_pad=False)
            self.fc1, self.act = nn.Conv2d(dim, dim * mlp_ratio, 1), nn.GELU()
            self.fc2 = nn.Conv2d(dim * mlp_ratio, dim, 1)

        def forward(self, x):
            y = self.n1(x)
            x = x + (self.pool(y) - y)
            return x + self.fc2(self.act(self.fc1(self.n2(x))))

    class EncoderLayer(nn.Module):
        """BERT's post-norm layer."""
        def __init__(self, dim, heads, ffn, impl):
            super().__init__()
            self.attn = Attention(dim, heads, impl)
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.ffn = Mlp(dim, ffn)

        def forward(self, x):
            x = self.n1(x + self.attn(x))
            return self.n2(x + self.ffn(x))

    class SRAttention(nn.Module):
        """PVT's spatial-reduction attention over [B, HW, D]: queries from every token, keys and values from the
        map reduced by a stride-sr conv + LayerNorm (sr 1: plain attention); manual or SDPA."""
        def __init__(self, dim, heads, sr, impl):
            super().__init__()
            self.h, self.impl, self.scale = heads, impl, (dim // heads) ** -0.5
            self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
            self.sr = nn.Conv2d(dim, dim, sr, sr) if sr > 1 else None
            self.norm = nn.LayerNorm(dim) if sr > 1 else None

        def forward(self, x, h, w):
            b, n, d = x.shape
            q = self.q(x).reshape(b, n, self.h, d // self.h).transpose(1, 2)
            y = x
            if self.sr is not None:
                y = self.norm(self.sr(x.transpose(1, 2).reshape(b, d, h, w)).flatten(2).transpose(1, 2))
            k, v = self.kv(y).reshape(b, -1, 2, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            if self.impl == "sdpa":
                o = F.scaled_dot_product_attention(q, k, v)
            else:
                o = ((q @ k.transpose(-2, -1)) * self.scale).softmax(-1) @ v
            return self.proj(o.transpose(1, 2).reshape(b, n, d))

    class ConvMlp(nn.Module):
        """PVT's MLP over [B, HW, D]; PVTv2's conv FFN puts a depthwise 3x3 conv over the map after fc1."""
        def __init__(self, dim, hidden, dwconv):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)
            self.dw = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden) if dwconv else None

        def forward(self, x, h, w):
            y = self.fc1(x)
            if self.dw is not None:
                b, n, c = y.shape
                y = self.dw(y.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)
            return self.fc2(self.act(y))

    class PVTBlock(nn.Module):
        def __init__(self, dim, heads, sr, mlp_ratio, conv_ffn, impl):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn, self.mlp = SRAttention(dim, heads, sr, impl), ConvMlp(dim, dim * mlp_ratio, conv_ffn)

        def forward(self, x, h, w):
            x = x + self.attn(self.n1(x), h, w)
            return x + self.mlp(self.n2(x), h, w)

    class PVTStage(nn.Module):
        """Patch embedding (a kxk conv of stride 2 or 4 + LayerNorm), PVT blocks over its tokens, a LayerNorm;
        [B, C, H, W] -> [B, D, H/stride, W/stride]."""
        def __init__(self, cin, dim, k, stride, depth, heads, sr, mlp_ratio, conv_ffn, impl):
            super().__init__()
            self.embed = nn.Conv2d(cin, dim, k, stride, k // 2 if k > stride else 0)
            self.enorm, self.norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.blocks = nn.ModuleList([PVTBlock(dim, heads, sr, mlp_ratio, conv_ffn, impl) for _ in range(depth)])

        def forward(self, x):
            x = self.embed(x)
            b, c, h, w = x.shape
            t = self.enorm(x.flatten(2).transpose(1, 2))
            for blk in self.blocks:
                t = blk(t, h, w)
            return self.norm(t).transpose(1, 2).reshape(b, c, h, w)

    class CausalAttention(nn.Module):
        """Causal multi-head self-attention over [B, S, D]: a constant upper-triangular -inf mask added to the
        scores ('mask') or SDPA with is_causal ('sdpa')."""
        def __init__(self, dim, heads, impl, seq):
            super().__init__()
            self.h, self.impl, self.scale = heads, impl, (dim // heads) ** -0.5
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            if impl == "mask":
                self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            if self.impl == "sdpa":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                o = ((q @ k.transpose(-2, -1)) * self.scale + self.mask).softmax(-1) @ v
            return self.proj(o.transpose(1, 2).reshape(b, n, d))

    class DecoderLayer(nn.Module):
        """GPT's pre-norm layer; GELU exact or tanh-approximated."""
        def __init__(self, dim, heads, ffn, impl, seq, gelu):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = CausalAttention(dim, heads, impl, seq)
            self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(approximate=gelu), nn.Linear(ffn, dim))

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.ffn(self.n2(x))

    class UNet(nn.Module):
        """Levels of two conv-BN-act then a downsample, a bottleneck, as many levels up (upsample, concatenate
        the level's skip, two conv-BN-act), a 1x1 conv to the classes at full resolution."""
        def __init__(self, levels, base, down, up, act, classes):
            super().__init__()
            w = [base * 2 ** i for i in range(levels + 1)]

            def twice(cin, cout):
                return nn.Sequential(_conv_bn(cin, cout, 3, act=act), _conv_bn(cout, cout, 3, act=act))
            self.enc = nn.ModuleList([twice(w[i - 1] if i else 3, w[i]) for i in range(levels)])
            self.down = nn.ModuleList([nn.MaxPool2d(2) if down == "maxpool" else _conv_bn(w[i], w[i], 3, 2, act=act)
                                       for i in range(levels)])
            self.mid = twice(w[levels - 1], w[levels])
            ups = []
            for i in reversed(range(levels)):
                if up == "transpose":
                    ups.append(nn.ConvTranspose2d(w[i + 1], w[i], 2, 2))
                else:
                    ups.append(nn.Sequential(
                        nn.Upsample(scale_factor=2, mode=up, align_corners=False if up == "bilinear" else None),
                        nn.Conv2d(w[i + 1], w[i], 3, 1, 1)))
            self.up = nn.ModuleList(ups)
            self.dec = nn.ModuleList([twice(2 * w[i], w[i]) for i in reversed(range(levels))])
            self.out = nn.Conv2d(w[0], classes, 1)

        def forward(self, x):
            skips = []
            for enc, down in zip(self.enc, self.down):
                x = enc(x)
                skips.append(x)
                x = down(x)
            x = self.mid(x)
            for up, dec in zip(self.up, self.dec):
                x = dec(torch.cat([up(x), skips.pop()], 1))
            return self.out(x)

    class ConvModule(nn.Module):
        """Conformer's convolution module over [B, T, D]: LayerNorm, pointwise Conv1d to 2D, GLU back to D,
        depthwise Conv1d of kernel k over time, BatchNorm1d, SiLU, pointwise Conv1d."""
        def __init__(self, dim, k):
            super().__init__()
            self.norm, self.pw1, self.glu = nn.LayerNorm(dim), nn.Conv1d(dim, 2 * dim, 1), nn.GLU(dim=1)
            self.dw, self.bn = nn.Conv1d(dim, dim, k, 1, k // 2, groups=dim), nn.BatchNorm1d(dim)
            self.act, self.pw2 = nn.SiLU(), nn.Conv1d(dim, dim, 1)

        def forward(self, x):
            y = self.glu(self.pw1(self.norm(x).transpose(1, 2)))
            return self.pw2(self.act(self.bn(self.dw(y)))).transpose(1, 2)

    class ConformerBlock(nn.Module):
        """The macaron block: x + FFN/2, + self-attention, + conv module, + FFN/2, then a LayerNorm."""
        def __init__(self, dim, heads, ffn, k, impl):
            super().__init__()

            def half_ffn():
                return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, ffn), nn.SiLU(), nn.Linear(ffn, dim))
            self.ff1, self.ff2 = half_ffn(), half_ffn()
            self.n_attn, self.attn = nn.LayerNorm(dim), Attention(dim, heads, impl)
            self.conv, self.norm = ConvModule(dim, k), nn.LayerNorm(dim)

        def forward(self, x):
            x = x + 0.5 * self.ff1(x)
            x = x + self.attn(self.n_attn(x))
            x = x + self.conv(x)
            return self.norm(x + 0.5 * self.ff2(x))

    class FPNNeck(nn.Module):
        """Over backbone maps (finest first): lateral 1x1 convs to one width, a top-down path (nearest x2 Resize
        of the coarser level + Add), 3x3 smoothing convs; optionally PANet's bottom-up path (a stride-2 3x3 conv
        of the finer level + Add, then a 3x3 conv-BN-act)."""
        def __init__(self, cins, width, pan, act):
            super().__init__()
            n = len(cins)
            self.lat = nn.ModuleList([nn.Conv2d(c, width, 1) for c in cins])
            self.smooth = nn.ModuleList([nn.Conv2d(width, width, 3, 1, 1) for _ in range(n)])
            self.down = nn.ModuleList([_conv_bn(width, width, 3, 2, act=act) for _ in range(n - 1)]) if pan else None
            self.pan = nn.ModuleList([_conv_bn(width, width, 3, act=act) for _ in range(n - 1)]) if pan else None

        def forward(self, feats):
            p = [lat(f) for lat, f in zip(self.lat, feats)]
            for i in range(len(p) - 2, -1, -1):
                p[i] = p[i] + F.interpolate(p[i + 1], scale_factor=2.0, mode="nearest")
            p = [sm(y) for sm, y in zip(self.smooth, p)]
            if self.down is not None:
                for i in range(1, len(p)):
                    p[i] = self.pan[i - 1](p[i] + self.down[i - 1](p[i - 1]))
            return p

    class DetHead(nn.Module):
        """A head shared by every level: a tower of 3x3 conv + act (one for both outputs, or one each), a class
        conv (sigmoid) and a box conv; each level's [B, A*K, H, W] -> [B, H*W*A, K], boxes then classes,
        concatenated over levels into [B, anchors, 4 + classes]."""
        def __init__(self, width, convs, split, anchors, classes, act):
            super().__init__()

            def tower():
                return nn.Sequential(*[nn.Sequential(nn.Conv2d(width, width, 3, 1, 1), _act(act))
                                       for _ in range(convs)])
            self.cls_tower, self.box_tower = tower(), tower() if split else None
            self.cls = nn.Conv2d(width, anchors * classes, 3, 1, 1)
            self.box = nn.Conv2d(width, anchors * 4, 3, 1, 1)
            self.classes = classes

        @staticmethod
        def _flat(y, k):
            return y.permute(0, 2, 3, 1).reshape(y.shape[0], -1, k)

        def forward(self, levels):
            out = []
            for x in levels:
                t = self.cls_tower(x)
                tb = self.box_tower(x) if self.box_tower is not None else t
                cls = self._flat(self.cls(t), self.classes).sigmoid()
                out.append(torch.cat([self._flat(self.box(tb), 4), cls], -1))
            return torch.cat(out, 1)

    class Detector(nn.Module):
        """stem, backbone stages, a neck over the last `levels` stage outputs, the shared head."""
        def __init__(self, stem, stages, levels, neck, head):
            super().__init__()
            self.stem, self.stages, self.levels = stem, nn.ModuleList(stages), levels
            self.neck, self.head = neck, head

        def forward(self, x):
            x, feats = self.stem(x), []
            for st in self.stages:
                x = st(x)
                feats.append(x)
            return self.head(self.neck(feats[-self.levels:]))

    class ChannelNorm(nn.Module):
        """LayerNorm over the channels of [B, C, H, W]: nn.LayerNorm between two permutes ('permute', one
        LayerNormalization node), or ConvNeXt's channels-first formula ('manual': ReduceMean, Sub, Pow, Sqrt, Div)."""
        def __init__(self, dim, impl):
            super().__init__()
            self.norm = nn.LayerNorm(dim) if impl == "permute" else None
            self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))

        def forward(self, x):
            if self.norm is not None:
                return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            u = x.mean(1, keepdim=True)
            v = (x - u).pow(2).mean(1, keepdim=True)
            return self.weight[:, None, None] * ((x - u) / torch.sqrt(v + 1e-6)) + self.bias[:, None, None]

    class GRN(nn.Module):
        """ConvNeXt-V2's global response normalisation over [B, H, W, C]: each channel's L2 norm over the map
        (ReduceL2), divided by its mean over the channels, rescales the input."""
        def __init__(self, dim):
            super().__init__()
            self.gamma, self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim)), nn.Parameter(torch.zeros(1, 1, 1, dim))

        def forward(self, x):
            g = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
            return self.gamma * (x * (g / (g.mean(-1, keepdim=True) + 1e-6))) + self.beta + x

    class ConvNeXtBlock(nn.Module):
        """Depthwise kxk conv, then channels-last: LayerNorm, Linear to ratio x D, GELU, optional GRN, Linear
        back, layer scale; permuted back and added to the input."""
        def __init__(self, dim, k, ratio, gelu, grn):
            super().__init__()
            self.dw, self.norm = nn.Conv2d(dim, dim, k, 1, k // 2, groups=dim), nn.LayerNorm(dim)
            self.fc1, self.act = nn.Linear(dim, ratio * dim), nn.GELU(approximate=gelu)
            self.grn, self.fc2 = GRN(ratio * dim) if grn else None, nn.Linear(ratio * dim, dim)
            # layer scale: 1e-6 in ConvNeXt; 0.1 here so that every block still shows in the output
            self.scale = nn.Parameter(torch.full((dim,), 0.1))

        def forward(self, x):
            y = self.act(self.fc1(self.norm(self.dw(x).permute(0, 2, 3, 1))))
            if self.grn is not None:
                y = self.grn(y)
            return x + (self.scale * self.fc2(y)).permute(0, 3, 1, 2)

    class TCNBlock(nn.Module):
        """A residual block over [B, C, T]: a dilated Conv1d of kernel k (depthwise then pointwise when separable;
        2C channels out for the gated and GLU activations) padded causally (on the left) or to 'same', a norm,
        the activation, a 1x1 Conv1d; returns (x + h, h): the residual path and the block's skip output."""
        def __init__(self, c, k, dilation, pad, act, norm, separable):
            super().__init__()
            total = (k - 1) * dilation
            pads = (total, 0) if pad == "causal" else (total // 2, total - total // 2)
            # a symmetric pad stays in the Conv's pads; a causal or uneven one is a Pad node, as written in the wild
            self.pads, conv_pad = (None, pads[0]) if pads[0] == pads[1] else (pads, 0)
            cout = 2 * c if act in ("gated", "glu") else c
            if separable:
                self.conv = nn.Sequential(nn.Conv1d(c, c, k, 1, conv_pad, dilation, groups=c), nn.Conv1d(c, cout, 1))
            else:
                self.conv = nn.Conv1d(c, cout, k, 1, conv_pad, dilation)
            self.norm = nn.BatchNorm1d(cout) if norm == "bn" else nn.LayerNorm(cout) if norm == "ln" else None
            self.act, self.ln = act, norm == "ln"
            self.out = nn.Conv1d(c, c, 1)

        def forward(self, x):
            y = self.conv(F.pad(x, self.pads) if self.pads is not None else x)
            if self.norm is not None:  # LayerNorm over the channels: between two transposes
                y = self.norm(y.transpose(1, 2)).transpose(1, 2) if self.ln else self.norm(y)
            if self.act == "gated":  # WaveNet: tanh(filter) * sigmoid(gate)
                a, b = y.chunk(2, 1)
                y = torch.tanh(a) * torch.sigmoid(b)
            elif self.act == "glu":
                y = F.glu(y, 1)
            else:
                y = F.relu(y) if self.act == "relu" else F.gelu(y)
            h = self.out(y)
            return x + h, h

    class CrossAttention(nn.Module):
        """Queries from the latents [B, N, D], keys and values from the tokens [B, M, C] (N != M, C != D in
        general): explicit MatMul/Softmax ('manual') or nn.MultiheadAttention with kdim = vdim = C ('mha')."""
        def __init__(self, dim, kv_dim, heads, impl):
            super().__init__()
            self.h, self.impl, self.scale = heads, impl, (dim // heads) ** -0.5
            if impl == "mha":
                self.mha = nn.MultiheadAttention(dim, heads, kdim=kv_dim, vdim=kv_dim, batch_first=True)
            else:
                self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(kv_dim, 2 * dim), nn.Linear(dim, dim)

        def forward(self, x, t):
            if self.impl == "mha":
                return self.mha(x, t, t, need_weights=False)[0]
            b, n, d = x.shape
            q = self.q(x).reshape(b, n, self.h, d // self.h).transpose(1, 2)
            k, v = self.kv(t).reshape(b, -1, 2, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            o = ((q @ k.transpose(-2, -1)) * self.scale).softmax(-1) @ v
            return self.proj(o.transpose(1, 2).reshape(b, n, d))

    class CrossBlock(nn.Module):
        """Perceiver's cross-attention block: the latents attend to the tokens (a LayerNorm on each), then an
        MLP, both residual."""
        def __init__(self, dim, kv_dim, heads, impl, mlp_ratio):
            super().__init__()
            self.nq, self.nkv, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(kv_dim), nn.LayerNorm(dim)
            self.attn, self.mlp = CrossAttention(dim, kv_dim, heads, impl), Mlp(dim, dim * mlp_ratio)

        def forward(self, x, t):
            x = x + self.attn(self.nq(x), self.nkv(t))
            return x + self.mlp(self.n2(x))
    class DenseBlock(nn.Module):
        """DenseNet's block: each layer BN-act-conv1x1 (to bottleneck x growth) then BN-act-conv3x3 (to growth),
        its output concatenated to the features so far; [B, C, H, W] -> [B, C + layers x growth, H, W]."""
        def __init__(self, cin, layers, growth, bottleneck, act):
            super().__init__()

            def bn_act_conv(ci, co, k):  # pre-activation: the BN after a Concat stays a node of its own
                return nn.Sequential(nn.BatchNorm2d(ci), _act(act), nn.Conv2d(ci, co, k, 1, k // 2, bias=False))
            mid = bottleneck * growth
            self.layers = nn.ModuleList([nn.Sequential(bn_act_conv(cin + i * growth, mid, 1),
                                                       bn_act_conv(mid, growth, 3)) for i in range(layers)])

        def forward(self, x):
            for layer in self.layers:  # a growing running concat: one 2-input Concat per layer
                x = torch.cat([x, layer(x)], 1)
            return x

    class OSABlock(nn.Module):
        """VoVNet's one-shot aggregation: n conv3x3-BN-act in a chain (depthwise-separable: dw 3x3 + pw 1x1-BN-act,
        after a 1x1 reduction when the width changes), the input and every output concatenated once, a 1x1
        conv-BN-act to cout, optionally effective-SE (global pool, 1x1 conv, HardSigmoid, Mul)."""
        def __init__(self, cin, width, cout, n, dw, ese, act):
            super().__init__()
            self.reduce = _conv_bn(cin, width, 1, act=act) if dw and cin != width else None
            c, convs = width if self.reduce is not None else cin, []
            for _ in range(n):
                convs.append(nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False),
                                           _conv_bn(c, width, 1, act=act)) if dw else _conv_bn(c, width, 3, act=act))
                c = width
            self.convs = nn.ModuleList(convs)
            self.concat = _conv_bn(cin + n * width, cout, 1, act=act)
            self.ese = nn.Conv2d(cout, cout, 1) if ese else None

        def forward(self, x):
            outs = [x]
            y = self.reduce(x) if self.reduce is not None else x
            for conv in self.convs:
                y = conv(y)
                outs.append(y)
            y = self.concat(torch.cat(outs, 1))
            if self.ese is not None:
                y = y * F.hardsigmoid(self.ese(y.mean((2, 3), keepdim=True)))
            return y

    class MBConv(nn.Module):
        """EfficientViT's inverted residual over [B, C, H, W]: 1x1 expand-BN-act, depthwise kxk (stride s)-BN-act,
        1x1 project-BN; residual when the shape is kept."""
        def __init__(self, cin, cout, expand, k, stride, act):
            super().__init__()
            hid = cin * expand
            self.body = nn.Sequential(_conv_bn(cin, hid, 1, act=act),
                                      _conv_bn(hid, hid, k, stride, groups=hid, act=act),
                                      _conv_bn(hid, cout, 1, act=None))
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    class LiteMLA(nn.Module):
        """EfficientViT's ReLU linear attention over the tokens of a [B, C, H, W] map: a 1x1 conv to Q, K, V
        (heads x head_dim each), per scale a depthwise kxk + grouped 1x1 conv of QKV whose output adds as many
        heads again, then per head ReLU(Q) (ReLU(K)^T [V, 1]) divided by its last column (the normaliser), a 1x1
        conv-BN back to C; residual."""
        def __init__(self, c, head_dim, scales, eps=1e-15):
            super().__init__()
            heads = max(c // head_dim, 1)
            td, self.d, self.eps = heads * head_dim, head_dim, eps
            self.qkv = nn.Conv2d(c, 3 * td, 1, bias=False)
            self.aggreg = nn.ModuleList([
                nn.Sequential(nn.Conv2d(3 * td, 3 * td, k, 1, k // 2, groups=3 * td, bias=False),
                              nn.Conv2d(3 * td, 3 * td, 1, groups=3 * heads, bias=False)) for k in scales])
            self.proj = _conv_bn(td * (1 + len(scales)), c, 1, act=None)

        def forward(self, x):
            b, _, h, w = x.shape
            qkv = self.qkv(x)
            qkv = torch.cat([qkv] + [agg(qkv) for agg in self.aggreg], 1) if len(self.aggreg) else qkv
            qkv = qkv.reshape(b, -1, 3 * self.d, h * w).transpose(-1, -2)  # [B, heads, N, 3d]
            q, k, v = qkv.chunk(3, -1)
            q, k = F.relu(q), F.relu(k)
            v = F.pad(v, (0, 1), mode="constant", value=1.0)  # a column of ones: its product is the normaliser
            o = q @ (k.transpose(-1, -2) @ v)                 # [B, heads, N, d + 1], linear in N
            o = o[..., :-1] / (o[..., -1:] + self.eps)
            return x + self.proj(o.transpose(-1, -2).reshape(b, -1, h, w))

    class EluAttention(nn.Module):
        """Linear (kernel-feature) attention over [B, N, D]: features elu(x) + 1 of Q and K, out = phi(Q) (phi(K)^T V)
        / (phi(Q) sum_n phi(K_n)), by MatMul or Einsum."""
        def __init__(self, dim, heads, impl, eps=1e-6):
            super().__init__()
            self.h, self.impl, self.eps = heads, impl, eps
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            q, k = F.elu(q) + 1.0, F.elu(k) + 1.0
            if self.impl == "einsum":
                kv = torch.einsum("bhnd,bhne->bhde", k, v)
                z = 1.0 / (torch.einsum("bhnd,bhd->bhn", q, k.sum(2)) + self.eps)
                o = torch.einsum("bhnd,bhde,bhn->bhne", q, kv, z)
            else:
                kv = k.transpose(-2, -1) @ v
                z = 1.0 / (q @ k.sum(2, keepdim=True).transpose(-2, -1) + self.eps)
                o = (q @ kv) * z
            return self.proj(o.transpose(1, 2).reshape(b, n, d))

    class EluBlock(nn.Module):
        """Pre-norm block of elu+1 linear attention and an MLP; conv_pos: a residual depthwise 3x3 conv over the
        token grid first (CPVT's position encoding)."""
        def __init__(self, dim, heads, mlp_ratio, impl, grid, conv_pos):
            super().__init__()
            self.grid = grid
            self.pos = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim) if conv_pos else None
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn, self.mlp = EluAttention(dim, heads, impl), Mlp(dim, dim * mlp_ratio)

        def forward(self, x):
            if self.pos is not None:
                b, n, d = x.shape
                x = x + self.pos(x.transpose(1, 2).reshape(b, d, self.grid, self.grid)).flatten(2).transpose(1, 2)
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    return {k: v for k, v in locals().items() if isinstance(v, type)}


def build_model(spec: dict, size: int):
    """The torch module of a spec at an input size (ViT/Swin/Mixer/PVT/encoder/decoder sizes fix their token
    counts)."""
    import torch
    import torch.nn as nn
    M = _modules()
    fam = spec["family"]
    seed = 1000 * (spec["seed"] or 0) + FAMILIES.index(fam) if fam in FAMILIES else 0
    g = torch.Generator().manual_seed(seed)
    # the modules' own initialisation (biases) draws from torch's global generator: seed it here, and leave the
    # caller's state as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _build(spec, size, M, g)


def _build(spec: dict, size: int, M: dict, g):
    import torch
    import torch.nn as nn
    fam = spec["family"]
    # a family's builder is _build_<family> (the three plain CNN families share _build_cnn); it takes the spec, then
    # any of `size` and `M` (the shared modules), by those names
    builder = _build_cnn if fam in CNN else globals().get(f"_build_{fam}")
    if builder is not None:
        given = {"size": size, "M": M}
        model = builder(spec, *[given[p] for p in list(inspect.signature(builder).parameters)[1:]])
    elif fam == "torchvision":
        from hase.model_zoo.torchvision_exporter import build_torch_model
        return build_torch_model(spec["arch"], size)
    else:
        import timm
        return timm.create_model(spec["arch"][len("timm-"):], pretrained=False).eval()
    with torch.no_grad():  # random, non-degenerate weights and BN statistics, reproducible
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(max(p[0].numel(), 1))))
        for mod in model.modules():
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
                mod.running_mean.normal_(0, 0.1, generator=g)
                mod.running_var.uniform_(0.5, 1.5, generator=g)
    return model.eval()


def _build_cnn(s, M):
    import torch.nn as nn
    fam, act = s["family"], s["act"]
    layers = [_conv_bn(3, s["stem_w"], s["stem_k"], 2, act=act)]
    c = s["stem_w"]
    for i, d in enumerate(s["depths"]):
        cout = int(round(c * s["width_mult"] / 8)) * 8 if i else c
        for j in range(d):
            stride = 2 if j == 0 and i > 0 else 1
            dil = 2 if fam == "cnn_plain" and s["dilate_last"] and i == len(s["depths"]) - 1 and j > 0 else 1
            cin = c if j == 0 else cout
            short = _conv_bn(cin, cout, 1, stride, act=None) if (stride != 1 or cin != cout) else None
            if fam == "cnn_plain":
                k = s["k"]
                if s["block"] == "basic":
                    body = nn.Sequential(_conv_bn(cin, cout, k, stride, dilation=dil, act=act),
                                         _conv_bn(cout, cout, k, 1, dilation=dil, act=None))
                else:
                    mid = max(cout // 4, 8)
                    body = nn.Sequential(_conv_bn(cin, mid, 1, act=act),
                                         _conv_bn(mid, mid, k, stride, dilation=dil, act=act),
                                         _conv_bn(mid, cout, 1, act=None))
                layers += [M["Residual"](body, short), _act(act)]
            elif fam == "cnn_mobile":
                hid = cin * s["expand"]
                body = [_conv_bn(cin, hid, 1, act=act), _conv_bn(hid, hid, s["k"], stride, groups=hid, act=act)]
                if s["se"]:
                    body.append(M["SE"](hid))
                body.append(_conv_bn(hid, cout, 1, act=None))
                if s["shuffle"] and cout % 2 == 0:
                    body.append(M["Shuffle"](2))
                layers.append(M["Residual"](nn.Sequential(*body)) if stride == 1 and cin == cout
                              else nn.Sequential(*body))
            else:
                mid = max(cout // s["bottleneck_ratio"], s["group_width"])
                mid = (mid // s["group_width"]) * s["group_width"]
                body = [_conv_bn(cin, mid, 1, act=act),
                        _conv_bn(mid, mid, 3, stride, groups=mid // s["group_width"], act=act)]
                if s["se"]:
                    body.append(M["SE"](mid))
                body.append(_conv_bn(mid, cout, 1, act=None))
                layers += [M["Residual"](nn.Sequential(*body), short), _act(act)]
        c = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, s["classes"])]
    return nn.Sequential(*layers)


def _build_vit(s, size, M):
    import torch
    import torch.nn as nn

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            d, n = s["dim"], (size // s["patch"]) ** 2
            self.embed = nn.Conv2d(3, d, s["patch"], s["patch"])
            self.cls = nn.Parameter(torch.zeros(1, 1, d)) if s["pool"] == "cls" else None
            self.pos = nn.Parameter(torch.randn(1, n + (1 if self.cls is not None else 0), d) * 0.02)
            self.blocks = nn.Sequential(*[M["Block"](d, s["heads"], s["mlp_ratio"], s["attn"])
                                          for _ in range(s["depth"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.embed(x).flatten(2).transpose(1, 2)
            if self.cls is not None:
                t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], 1)
            t = self.norm(self.blocks(t + self.pos))
            return self.head(t[:, 0] if self.cls is not None else t.mean(1))
    return ViT()


def _build_swin(s, size, M):
    import torch.nn as nn

    class Swin(nn.Module):
        def __init__(self):
            super().__init__()
            d, ws = s["dim"], s["window"]
            self.embed, self.enorm = nn.Conv2d(3, d, s["patch"], s["patch"]), nn.LayerNorm(d)
            stages, grid = [], size // s["patch"]
            for i, depth in enumerate(s["depths"]):
                if i:
                    stages.append(M["PatchMerge"](d))
                    d, grid = d * 2, grid // 2
                w = min(ws, grid)
                for j in range(depth):
                    shift = w // 2 if s["shift"] and j % 2 == 1 and grid > w else 0
                    stages.append(M["WindowBlock"](d, max(d // s["head_dim"], 1), w, shift, s["mlp_ratio"]))
            self.stages = nn.Sequential(*stages)
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.enorm(self.embed(x).permute(0, 2, 3, 1))
            t = self.norm(self.stages(t))
            return self.head(t.mean((1, 2)))
    return Swin()


def _build_hybrid(s, size, M):
    import torch.nn as nn
    act = s["act"]
    layers = [_conv_bn(3, s["stem_w"], 3, 2, act=act)]
    c = s["stem_w"]
    for _ in range(s["conv_stages"]):  # MobileNet-like stages, stride 2 each
        hid = c * 4
        layers.append(nn.Sequential(_conv_bn(c, hid, 1, act=act), _conv_bn(hid, hid, s["k"], 2, groups=hid, act=act),
                                    _conv_bn(hid, 2 * c, 1, act=None)))
        c *= 2
    d = s["heads"] * s["head_dim"]
    for i in range(s["attn_stages"]):  # downsample to the stage width, then attention over the map
        layers.append(_conv_bn(c, d, 3, 2, act=act))
        grid = size   # every stride-2 conv (odd kernel, padding k // 2) gives ceil(n / 2): 224 -> ... -> 7 -> 4
        for _ in range(1 + s["conv_stages"] + i + 1):
            grid = -(-grid // 2)
        blocks = nn.Sequential(*[M["Block"](d, s["heads"], s["mlp_ratio"], "manual", s["norm"], act,
                                            bias_tokens=grid * grid if s["norm"] == "bn" else 0)
                                 for _ in range(s["depth"])])
        pos = nn.Conv2d(d, d, 3, 1, 1, groups=d) if s["conv_pos"] else None
        layers.append(M["Tokens"](blocks, pos))
        c = d
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, s["classes"])]
    return nn.Sequential(*layers)


def _build_mixer(s, size, M):
    import torch.nn as nn
    if s["kind"] == "poolformer":
        layers, c = [nn.Conv2d(3, s["dims"][0], 7, 4, 2)], s["dims"][0]
        for i, (d, depth) in enumerate(zip(s["dims"], s["depths"])):
            if i:
                layers.append(nn.Conv2d(c, d, 3, 2, 1))
            layers += [M["PoolBlock"](d, s["pool_k"], s["mlp_ratio"]) for _ in range(depth)]
            c = d
        layers += [nn.GroupNorm(1, c), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, s["classes"])]
        return nn.Sequential(*layers)

    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            d, n = s["dim"], (size // s["patch"]) ** 2
            self.embed = nn.Conv2d(3, d, s["patch"], s["patch"])
            self.blocks = nn.Sequential(*[M["MixerBlock"](n, d, max(int(n * s["token_ratio"]), 8),
                                                          d * s["channel_ratio"]) for _ in range(s["depth"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.blocks(self.embed(x).flatten(2).transpose(1, 2))
            return self.head(self.norm(t).mean(1))
    return Mixer()


def _build_encoder(s, size, M):
    import torch
    import torch.nn as nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            d = s["dim"]
            self.pos = nn.Parameter(torch.randn(1, size, d) * 0.02)
            self.norm = nn.LayerNorm(d)
            self.layers = nn.Sequential(*[M["EncoderLayer"](d, s["heads"], d * s["ffn_ratio"], s["attn"])
                                          for _ in range(s["depth"])])

        def forward(self, x):
            return self.layers(self.norm(x + self.pos))
    return Encoder()


def _build_pvt(s, M):
    import torch.nn as nn

    class PVT(nn.Module):
        def __init__(self):
            super().__init__()
            stages, c = [], 3
            for i, d in enumerate(s["dims"]):
                stride = 4 if i == 0 else 2
                k = (7 if i == 0 else 3) if s["overlap"] else stride
                stages.append(M["PVTStage"](c, d, k, stride, s["depths"][i], s["heads"][i], s["sr"][i],
                                            s["mlp_ratio"], s["conv_ffn"], s["attn"]))
                c = d
            self.stages, self.head = nn.Sequential(*stages), nn.Linear(c, s["classes"])

        def forward(self, x):
            return self.head(self.stages(x).mean((2, 3)))
    return PVT()


def _build_decoder(s, size, M):
    import torch
    import torch.nn as nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            d = s["dim"]
            self.pos = nn.Parameter(torch.randn(1, size, d) * 0.02)
            self.layers = nn.Sequential(*[M["DecoderLayer"](d, s["heads"], d * s["ffn_ratio"], s["attn"], size,
                                                            s["gelu"]) for _ in range(s["depth"])])
            self.norm = nn.LayerNorm(d) if s["final_norm"] else None
            self.head = nn.Linear(d, s["head_width"])

        def forward(self, x):
            t = self.layers(x + self.pos)
            return self.head(self.norm(t) if self.norm is not None else t)
    return Decoder()


def _build_unet(s, M):
    return M["UNet"](s["levels"], s["base"], s["down"], s["up"], s["act"], s["classes"])


def _build_conformer(s, M):
    import torch.nn as nn

    class Conformer(nn.Module):
        """[B, T, F] -> two stride-2 3x3 Conv2d + ReLU over [B, 1, T, F] -> Linear to D -> blocks: [B, T/4, D]."""
        def __init__(self):
            super().__init__()
            c, d, f_sub = s["sub_ch"], s["dim"], s["mels"]
            for _ in range(2):  # a stride-2 conv with padding 1 rounds up
                f_sub = (f_sub - 1) // 2 + 1
            self.sub = nn.Sequential(nn.Conv2d(1, c, 3, 2, 1), nn.ReLU(), nn.Conv2d(c, c, 3, 2, 1), nn.ReLU())
            self.proj = nn.Linear(c * f_sub, d)
            self.blocks = nn.Sequential(*[M["ConformerBlock"](d, s["heads"], d * s["ffn_ratio"], s["conv_k"],
                                                              s["attn"]) for _ in range(s["depth"])])

        def forward(self, x):
            y = self.sub(x.unsqueeze(1))  # [B, C, T/4, F/4]
            return self.blocks(self.proj(y.transpose(1, 2).flatten(2)))
    return Conformer()


def _fpn_block(s, M, cin, cout, stride):
    """A backbone block: basic or bottleneck residual + act (a 1x1 projection shortcut when the shape changes),
    or an inverted residual (identity shortcut only when it keeps the shape)."""
    import torch.nn as nn
    act = s["act"]
    if s["block"] == "inverted":
        hid = cin * s["expand"]
        body = nn.Sequential(_conv_bn(cin, hid, 1, act=act),
                             _conv_bn(hid, hid, s["dw_k"], stride, groups=hid, act=act),
                             _conv_bn(hid, cout, 1, act=None))
        return M["Residual"](body) if stride == 1 and cin == cout else body
    short = _conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None
    if s["block"] == "basic":
        body = nn.Sequential(_conv_bn(cin, cout, 3, stride, act=act), _conv_bn(cout, cout, 3, act=None))
    else:
        mid = max(cout // 4, 8)
        body = nn.Sequential(_conv_bn(cin, mid, 1, act=act), _conv_bn(mid, mid, 3, stride, act=act),
                             _conv_bn(mid, cout, 1, act=None))
    return nn.Sequential(M["Residual"](body, short), _act(act))


def _build_fpn(s, M):
    import torch.nn as nn
    act = s["act"]
    widths = [min(s["stem_w"] * 2 ** (i + 1), 512) for i in range(s["stages"])]  # stage i: stride 2**(i + 2)
    stages, c = [], s["stem_w"]
    for w, depth in zip(widths, s["depths"]):
        stages.append(nn.Sequential(*[_fpn_block(s, M, c if j == 0 else w, w, 2 if j == 0 else 1)
                                      for j in range(depth)]))
        c = w
    neck = M["FPNNeck"](widths[-s["levels"]:], s["neck_w"], s["pan"], act)
    head = M["DetHead"](s["neck_w"], s["head_convs"], s["split_towers"], s["anchors"], s["classes"], act)
    return M["Detector"](_conv_bn(3, s["stem_w"], 3, 2, act=act), stages, s["levels"], neck, head)


def _build_convnext(s, M):
    import torch.nn as nn
    dims = [s["dim"] * 2 ** i for i in range(s["stages"])]
    layers = [nn.Conv2d(3, dims[0], 4, 4), M["ChannelNorm"](dims[0], s["cf_norm"])]
    for i, (d, depth) in enumerate(zip(dims, s["depths"])):
        if i:  # downsampling: channel LayerNorm + 2x2 stride-2 conv
            layers += [M["ChannelNorm"](dims[i - 1], s["cf_norm"]), nn.Conv2d(dims[i - 1], d, 2, 2)]
        layers += [M["ConvNeXtBlock"](d, s["k"], s["mlp_ratio"], s["gelu"], s["grn"]) for _ in range(depth)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], s["classes"])]
    return nn.Sequential(*layers)


def _build_tcn(s, M):
    import torch.nn as nn
    import torch.nn.functional as F

    class TCN(nn.Module):
        """[B, T, C_in] -> a Linear or 1x1 Conv1d to the width -> residual blocks over [B, C, T] whose skip outputs
        are summed -> ReLU, mean over time, Linear."""
        def __init__(self):
            super().__init__()
            c = s["width"]
            self.proj = nn.Linear(s["c_in"], c) if s["proj"] == "linear" else nn.Conv1d(s["c_in"], c, 1)
            self.blocks = nn.ModuleList([M["TCNBlock"](c, s["k"], 2 ** (i % (s["dil_exp"] + 1)), s["pad"], s["act"],
                                                       s["norm"], s["separable"]) for i in range(s["depth"])])
            self.head = nn.Linear(c, s["classes"])

        def forward(self, x):
            x = self.proj(x).transpose(1, 2) if s["proj"] == "linear" else self.proj(x.transpose(1, 2))
            skip = None
            for blk in self.blocks:
                x, h = blk(x)
                skip = h if skip is None else skip + h
            return self.head(F.relu(skip).mean(2))
    return TCN()


def _build_perceiver(s, size, M):
    import torch
    import torch.nn as nn

    class Perceiver(nn.Module):
        """Image -> tokens [B, M, C] (+ learned positions); latents [B, N, D] cross-attend to them before the
        first latent block (and, with 2 cross blocks, again halfway, as Perceiver repeats it) -> LayerNorm, mean
        over the latents, Linear."""
        def __init__(self):
            super().__init__()
            c, d, p = s["token_dim"], s["dim"], s["patch"]
            self.stem = _token_stem(s["stem"], c, p)
            self.pos = nn.Parameter(torch.randn(1, (size // p) ** 2, c) * 0.02)
            # 2-D so that the generator's weight scaling (1 / sqrt of a row) leaves it well above LayerNorm's eps
            self.latents = nn.Parameter(torch.randn(s["latents"], d))
            self.cross = nn.ModuleList([M["CrossBlock"](d, c, s["cross_heads"], s["cross_attn"], s["mlp_ratio"])
                                        for _ in range(s["cross"])])
            self.blocks = nn.ModuleList([M["Block"](d, s["heads"], s["mlp_ratio"], s["attn"])
                                         for _ in range(s["depth"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.stem(x).flatten(2).transpose(1, 2) + self.pos
            # clone: a view of a parameter made under no_grad still requires grad, and the flop counter's module
            # hooks refuse it as a module's input (the export is one Expand either way)
            z = self.latents.expand(x.shape[0], -1, -1).clone()
            for i, blk in enumerate(self.blocks):
                if i == 0 or (len(self.cross) == 2 and i == len(self.blocks) // 2):
                    z = self.cross[0 if i == 0 else 1](z, t)
                z = blk(z)
            return self.head(self.norm(z).mean(1))
    return Perceiver()
def _build_dense(s, M):
    import torch.nn as nn
    act = s["act"]
    if s["kind"] == "densenet":
        c = 2 * s["growth"]  # DenseNet's stem width
        layers = [_conv_bn(3, c, s["stem_k"], 2, act=act)]
        if s["stem_pool"]:
            layers.append(nn.MaxPool2d(3, 2, 1))
        for i, n in enumerate(s["depths"]):
            if i:  # transition: BN, a 1x1 conv compressing the concatenated width, 2x2 average pool
                cout = int(c * s["compression"])
                layers += [nn.BatchNorm2d(c), nn.Conv2d(c, cout, 1, bias=False), nn.AvgPool2d(2, 2)]
                c = cout
            layers.append(M["DenseBlock"](c, n, s["growth"], s["bottleneck"], act))
            c += n * s["growth"]
        layers += [nn.BatchNorm2d(c), _act(act)]  # pre-activation layers leave the last block's output un-normalised
    else:
        w = s["stem_w"]
        layers = [_conv_bn(3, w, 3, 2, act=act), _conv_bn(w, w, 3, act=act), _conv_bn(w, 2 * w, 3, 2, act=act)]
        c = 2 * w
        for i, n in enumerate(s["depths"]):
            if i:
                layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            width, cout = (s["stage_w"] * (4 + i) // 32) * 8, s["concat_w"] * (i + 1)  # widths grow as VoVNet-39's
            for _ in range(n):
                layers.append(M["OSABlock"](c, width, cout, s["layers"], s["dw"], s["ese"], act))
                c = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, s["classes"])]
    return nn.Sequential(*layers)


def _build_rnn(s, M):
    import torch.nn as nn

    class RNN(nn.Module):
        """[B, T, C_in] -> optional Conv1d-BN-ReLU over time -> nn.LSTM or nn.GRU (batch_first; one ONNX LSTM/GRU
        node per layer) -> the output sequence [B, T', H x dirs], a per-step Linear, or a mean over time + Linear."""
        def __init__(self):
            super().__init__()
            c = s["c_in"]
            self.front = None
            if s["front"] == "conv":
                k = s["conv_k"]
                self.front = nn.Sequential(nn.Conv1d(c, s["conv_w"], k, s["conv_stride"], k // 2, bias=False),
                                           nn.BatchNorm1d(s["conv_w"]), nn.ReLU())
                c = s["conv_w"]
            cell = nn.LSTM if s["cell"] == "lstm" else nn.GRU
            self.rnn = cell(c, s["hidden"], s["layers"], batch_first=True, bidirectional=s["bidirectional"])
            out = s["hidden"] * (2 if s["bidirectional"] else 1)
            self.head = nn.Linear(out, s["classes"]) if s["head"] != "none" else None

        def forward(self, x):
            if self.front is not None:
                x = self.front(x.transpose(1, 2)).transpose(1, 2)
            y = self.rnn(x)[0]
            if s["head"] == "mean":
                y = y.mean(1)
            return self.head(y) if self.head is not None else y
    return RNN()


def _build_linattn(s, size, M):
    import torch
    import torch.nn as nn

    if s["kind"] == "relu":  # EfficientViT-like: every stage downsamples by an MBConv, then attention + MBConv blocks
        act, n = s["act"], s["stem_stride"].bit_length() - 1
        layers = [_conv_bn(3, s["stem_w"], 3, 2, act=act)]
        if n > 1:
            layers.append(_conv_bn(s["stem_w"], s["stem_w"], 3, 2, groups=s["stem_w"], act=act))  # a depthwise stride 2
        c = s["stem_w"]
        for i, depth in enumerate(s["depths"]):
            d = s["dim"] * 2 ** i
            layers.append(M["MBConv"](c, d, s["expand"], s["k"], 2, act))
            for _ in range(depth):
                layers += [M["LiteMLA"](d, s["head_dim"], s["scales"]), M["MBConv"](d, d, s["expand"], s["k"], 1, act)]
            c = d
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(c), nn.Linear(c, s["classes"])]
        return nn.Sequential(*layers)

    class LinearViT(nn.Module):
        """Image -> patch or conv-stem tokens [B, N, D] (+ learned positions) -> elu+1 linear-attention blocks ->
        LayerNorm, mean over the tokens, Linear."""
        def __init__(self):
            super().__init__()
            d, p = s["dim"], s["patch"]
            self.stem = _token_stem(s["stem"], d, p)
            grid = size // p
            self.pos = nn.Parameter(torch.randn(1, grid * grid, d) * 0.02)
            self.blocks = nn.Sequential(*[M["EluBlock"](d, s["heads"], s["mlp_ratio"], s["impl"], grid, s["conv_pos"])
                                          for _ in range(s["depth"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.stem(x).flatten(2).transpose(1, 2) + self.pos
            return self.head(self.norm(self.blocks(t)).mean(1))
    return LinearViT()


def _rmsnorm(d):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim, written out (no LayerNormalization, no mean
    subtraction): ssm's, t5enc's and llama's norm."""
    import torch
    import torch.nn as nn

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
    return RMSNorm()


def _build_ssm(s, size, M):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def norm(d):
        return nn.LayerNorm(d) if s["norm"] == "ln" else _rmsnorm(d)

    class S4D(nn.Module):
        """x + Linear(GELU(SSM(norm(x)))): a real diagonal SSM (A < 0) per channel whose kernel
        K[d, t] = sum_n C[d, n] B[d, n] exp(t dt[d] A[d, n]) (t from arange) is applied as a causal depthwise Conv1d
        of length min(T, cap), plus a D skip."""
        def __init__(self, d, n, k_len):
            super().__init__()
            self.norm, self.k_len = norm(d), k_len
            self.log_a = nn.Parameter(torch.log(0.5 + torch.rand(d, n)))  # A = -exp(log_a) < 0
            self.log_dt = nn.Parameter(torch.rand(d) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            self.b, self.c = nn.Parameter(torch.randn(d, n)), nn.Parameter(torch.randn(d, n))
            self.skip = nn.Parameter(torch.randn(d))
            self.out = nn.Linear(d, d)

        def kernel(self):
            t = torch.arange(self.k_len, dtype=torch.float32)
            a = -torch.exp(self.log_a) * torch.exp(self.log_dt)[:, None]         # [D, N]: dt A
            decay = torch.exp(a[:, :, None] * t)                                  # [D, N, L]
            return torch.matmul((self.c * self.b)[:, None, :], decay)            # [D, 1, L]

        def forward(self, x):
            u = self.norm(x).transpose(1, 2)                                      # [B, D, T]
            k = self.kernel().flip(-1)                                            # causal: K[0] meets x[t]
            y = F.conv1d(F.pad(u, (self.k_len - 1, 0)), k, groups=u.shape[1]) + u * self.skip[:, None]
            return x + self.out(F.gelu(y.transpose(1, 2)))

    class Mamba(nn.Module):
        """x + out(SSD(...) * SiLU(z)): in_proj to [z, x, B, C, dt], a causal depthwise Conv1d + SiLU over [x, B, C],
        dt = softplus(dt + bias) per head, A < 0 a scalar per head; the scan in chunks of L: within one, cumsum of the
        log-decays dt A, exp of their differences under a lower-triangular mask, (C B^T * decay) @ (dt x); between
        chunks, the state [H, P, N] carried by unrolled matmuls (T / L <= 16 chunks)."""
        def __init__(self, d, n, expand, head_dim, conv_k, chunk):
            super().__init__()
            e = expand * d
            self.e, self.n, self.h, self.p, self.chunk = e, n, e // head_dim, head_dim, chunk
            self.norm = norm(d)
            self.in_proj = nn.Linear(d, 2 * e + 2 * n + self.h, bias=False)
            self.conv = nn.Conv1d(e + 2 * n, e + 2 * n, conv_k, padding=conv_k - 1, groups=e + 2 * n)
            dt = torch.exp(torch.rand(self.h) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
            self.a_log = nn.Parameter(torch.log(1 + 15 * torch.rand(self.h)))
            self.skip = nn.Parameter(torch.ones(self.h))
            self.out = nn.Linear(e, d, bias=False)
            self.register_buffer("tril", torch.tril(torch.ones(chunk, chunk, dtype=torch.bool)), persistent=False)

        def forward(self, x):
            b, t, _ = x.shape
            e, n, h, p, L = self.e, self.n, self.h, self.p, self.chunk
            nc = t // L
            z, xbc, dt = self.in_proj(self.norm(x)).split([e, e + 2 * n, h], dim=-1)
            xbc = F.silu(self.conv(xbc.transpose(1, 2))[..., :t].transpose(1, 2))
            u, bm, cm = xbc.split([e, n, n], dim=-1)
            dt = F.softplus(dt + self.dt_bias)                                    # [B, T, H]
            a = dt * -torch.exp(self.a_log)                                       # log-decays, < 0
            u = u.reshape(b, nc, L, h, p).permute(0, 3, 1, 2, 4)                  # [B, H, nc, L, P]
            ux = u * dt.reshape(b, nc, L, h).permute(0, 3, 1, 2)[..., None]       # dt x
            bm, cm = bm.reshape(b, 1, nc, L, n), cm.reshape(b, 1, nc, L, n)
            cs = torch.cumsum(a.reshape(b, nc, L, h).permute(0, 3, 1, 2), dim=-1)  # [B, H, nc, L]
            seg = (cs[..., :, None] - cs[..., None, :]).masked_fill(~self.tril, float("-inf"))
            w = torch.matmul(cm, bm.transpose(-1, -2)) * torch.exp(seg)           # [B, H, nc, L, L]
            y = torch.matmul(w, ux)                                               # within the chunks
            # each chunk's own contribution to the state at its end: [B, H, nc, P, N]
            states = torch.matmul((ux * torch.exp(cs[..., -1:] - cs)[..., None]).transpose(-1, -2), bm)
            last = torch.exp(cs[..., -1])                                         # [B, H, nc]: a chunk's decay
            outs, state = [y[:, :, 0]], states[:, :, 0]
            for c in range(1, nc):  # unrolled: the state entering chunk c, read out by C and the decay so far
                outs.append(y[:, :, c] + torch.matmul(cm[:, :, c], state.transpose(-1, -2))
                            * torch.exp(cs[:, :, c])[..., None])
                state = state * last[:, :, c, None, None] + states[:, :, c]
            y = torch.stack(outs, 2) + u * self.skip[:, None, None, None]        # [B, H, nc, L, P]
            y = y.permute(0, 2, 3, 1, 4).reshape(b, t, e)
            return x + self.out(y * F.silu(z))

    class SSM(nn.Module):
        """[B, T, C_in] -> Linear to d_model -> S4D or Mamba-like blocks -> norm -> the sequence, a per-step Linear,
        or a mean over time + Linear."""
        def __init__(self):
            super().__init__()
            d = s["dim"]
            self.proj = nn.Linear(s["c_in"], d)
            if s["kind"] == "s4d":
                k_len = min(size, s["k_cap"]) if s["k_cap"] else size
                blocks = [S4D(d, s["state"], k_len) for _ in range(s["depth"])]
            else:
                chunk = s["chunk"]
                while size // chunk > 16:
                    chunk *= 2
                blocks = [Mamba(d, s["state"], s["expand"], s["head_dim"], s["conv_k"], chunk)
                          for _ in range(s["depth"])]
            self.blocks, self.norm = nn.Sequential(*blocks), norm(d)
            self.head = nn.Linear(d, s["classes"]) if s["head"] != "none" else None

        def forward(self, x):
            y = self.norm(self.blocks(self.proj(x)))
            if s["head"] == "mean":
                y = y.mean(1)
            return self.head(y) if self.head is not None else y
    return SSM()


def _build_gan(s, M):
    import torch.nn as nn
    bn = s["norm"] == "bn"

    def norm_act(c):  # InstanceNorm (CycleGAN) normalises each map with its own statistics; 'none' is ESRGAN's
        norm = nn.BatchNorm2d(c) if bn else nn.InstanceNorm2d(c, affine=True) if s["norm"] == "in" else nn.Identity()
        return [norm, nn.ReLU() if s["act"] == "relu" else nn.LeakyReLU(0.2)]

    def conv(ci, co, k=3, stride=1):
        return [nn.Conv2d(ci, co, k, stride, k // 2, bias=not bn), *norm_act(co)]

    def up(ci, co):  # x2: a 4x4 stride-2 transposed conv, or nearest/bilinear Resize + 3x3 conv
        if s["up_mode"] == "transpose":
            return [nn.ConvTranspose2d(ci, co, 4, 2, 1, bias=not bn), *norm_act(co)]
        bilinear = s["up_mode"] == "bilinear"
        return [nn.Upsample(scale_factor=2, mode=s["up_mode"], align_corners=False if bilinear else None),
                *conv(ci, co)]

    def res(c):  # the bottleneck's residual block: conv-norm-act, conv-norm, + x
        return M["Residual"](nn.Sequential(*conv(c, c), *conv(c, c)[:-1]))

    if s["source"] == "latent":  # widths halve per up stage down to 32
        c, floor, out_k = s["width"], 32, 3
        layers = conv(s["in_ch"], c)
    else:  # widths double per down stage (at most 256) and come back; super-resolution stages keep the stem width
        c, floor, out_k = s["width"], s["width"], s["stem_k"]
        layers = conv(3, c, s["stem_k"])
        for _ in range(s["down"]):
            layers += conv(c, min(2 * c, 256), 3, 2)
            c = min(2 * c, 256)
    layers += [res(c) for _ in range(s["res_blocks"])]
    for _ in range(s["up"]):
        co = max(c // 2, floor)
        layers += up(c, co)
        for _ in range(s["stage_convs"] - 1):
            layers += conv(co, co)
        c = co
    layers += [nn.Conv2d(c, 3, out_k, 1, out_k // 2), nn.Tanh()]
    return nn.Sequential(*layers)


def _build_moe(s, size, M):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class MoE(nn.Module):
        """A mixture of E expert MLPs over [B, N, D]. The router: a Linear to E, then softmax and TopK k
        ('softmax_topk', Switch/Mixtral; k 2 renormalised over the chosen) or TopK of the logits and a softmax over
        those k ('topk_softmax'); the k weights put back at their experts ('scatter': ScatterElements into zeros;
        'onehot': an Equal mask of the indices against arange(E), weighted and summed over k). Every expert runs on
        every token (dense: Einsum over the stacked [E, H, D] weights, or a MatMul batched over E), and the gates
        weight the sum of their outputs."""
        def __init__(self, d, hidden, experts, k):
            super().__init__()
            self.e, self.hid, self.k = experts, hidden, k
            self.router = nn.Linear(d, experts, bias=False)
            # stacked nn.Linear weights [E*out, in], so that the generator scales each row by 1/sqrt(in); viewed as
            # [E, out, in] in forward (a Reshape of an initializer, folded at export)
            self.w1 = nn.Parameter(torch.randn(experts * hidden, d))
            self.w2 = nn.Parameter(torch.randn(experts * d, hidden))
            self.b1, self.b2 = nn.Parameter(torch.zeros(experts, hidden)), nn.Parameter(torch.zeros(experts, d))
            self.register_buffer("ids", torch.arange(experts), persistent=False)

        def gates(self, x):
            logits = self.router(x)                                               # [B, N, E]
            if s["order"] == "softmax_topk":
                w, idx = logits.softmax(-1).topk(self.k, -1)
                if self.k > 1:
                    w = w / w.sum(-1, keepdim=True)
            else:
                w, idx = logits.topk(self.k, -1)
                w = w.softmax(-1)
            if s["gate"] == "scatter":
                return torch.zeros_like(logits).scatter(-1, idx, w)
            return ((idx[..., None] == self.ids).to(w.dtype) * w[..., None]).sum(-2)

        def forward(self, x):
            b, n, d = x.shape
            g = self.gates(x)
            w1, w2 = self.w1.reshape(self.e, self.hid, d), self.w2.reshape(self.e, d, self.hid)
            if s["impl"] == "einsum":
                h = F.gelu(torch.einsum("bnd,ehd->bneh", x, w1) + self.b1)
                y = torch.einsum("bneh,edh->bned", h, w2) + self.b2
                return torch.einsum("bned,bne->bnd", y, g)
            t = x.reshape(1, b * n, d)
            h = F.gelu(torch.matmul(t, w1.transpose(1, 2)) + self.b1[:, None])   # [E, BN, H]
            y = torch.matmul(h, w2.transpose(1, 2)) + self.b2[:, None]            # [E, BN, D]
            return (y * g.reshape(b * n, self.e).t()[..., None]).sum(0).reshape(b, n, d)

    class MoEViT(nn.Module):
        """Image -> patch or conv-stem tokens [B, N, D] (+ learned positions) -> pre-norm blocks whose MLP is a MoE in
        every block or every other (the second of each pair) -> LayerNorm, mean over the tokens, Linear."""
        def __init__(self):
            super().__init__()
            d, p = s["dim"], s["patch"]
            self.stem = _token_stem(s["stem"], d, p)
            self.pos = nn.Parameter(torch.randn(1, (size // p) ** 2, d) * 0.02)
            blocks = []
            for i in range(s["depth"]):
                blk = M["Block"](d, s["heads"], s["mlp_ratio"], s["attn"])
                if i % s["moe_every"] == s["moe_every"] - 1:
                    blk.mlp = MoE(d, d * s["expert_ratio"], s["experts"], s["top_k"])
                blocks.append(blk)
            self.blocks = nn.Sequential(*blocks)
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.stem(x).flatten(2).transpose(1, 2) + self.pos
            return self.head(self.norm(self.blocks(t)).mean(1))
    return MoEViT()


def _build_detr(s, size, M):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class DetrAttention(nn.Module):
        """Multi-head attention whose queries, keys and values come from separate inputs (DETR adds the positions
        to the queries and keys, not to the values): manual MatMul/Softmax, SDPA, or nn.MultiheadAttention."""
        def __init__(self, d, heads):
            super().__init__()
            self.h, self.scale = heads, (d // heads) ** -0.5
            if s["attn"] == "mha":
                self.mha = nn.MultiheadAttention(d, heads, batch_first=True)
            else:
                self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))

        def forward(self, q, k, v):
            if s["attn"] == "mha":
                return self.mha(q, k, v, need_weights=False)[0]
            b, n, d = q.shape
            q = self.q(q).reshape(b, n, self.h, d // self.h).transpose(1, 2)
            k = self.k(k).reshape(b, -1, self.h, d // self.h).transpose(1, 2)
            v = self.v(v).reshape(b, -1, self.h, d // self.h).transpose(1, 2)
            if s["attn"] == "sdpa":
                o = F.scaled_dot_product_attention(q, k, v)
            else:
                o = ((q @ k.transpose(-2, -1)) * self.scale).softmax(-1) @ v
            return self.proj(o.transpose(1, 2).reshape(b, n, d))

    def ffn(d):  # DETR's FFN: Linear, ReLU, Linear
        return nn.Sequential(nn.Linear(d, d * s["ffn_ratio"]), nn.ReLU(), nn.Linear(d * s["ffn_ratio"], d))

    class EncLayer(nn.Module):
        """Post-norm: self-attention over the memory (positions on queries and keys), then the FFN."""
        def __init__(self, d):
            super().__init__()
            self.attn, self.ffn = DetrAttention(d, s["heads"]), ffn(d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x, pos):
            qk = x + pos
            x = self.n1(x + self.attn(qk, qk, x))
            return self.n2(x + self.ffn(x))

    class DecLayer(nn.Module):
        """Post-norm: self-attention among the queries, cross-attention from the queries to the memory, the FFN."""
        def __init__(self, d):
            super().__init__()
            self.self_attn, self.cross = DetrAttention(d, s["heads"]), DetrAttention(d, s["heads"])
            self.ffn, self.n1, self.n2, self.n3 = ffn(d), nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, t, qpos, mem, pos):
            qk = t + qpos
            t = self.n1(t + self.self_attn(qk, qk, t))
            t = self.n2(t + self.cross(t + qpos, mem + pos, mem))
            return self.n3(t + self.ffn(t))

    class DETR(nn.Module):
        """Image -> backbone [B, C, H/s, W/s] -> 1x1 conv to D, tokens [B, HW, D] -> encoder -> decoder over the
        learned queries and their positions -> LayerNorm -> [B, queries, classes + 1 logits, then 4 sigmoid boxes]."""
        def __init__(self):
            super().__init__()
            d, act = s["dim"], s["act"]
            # ResNet's widths: stem x 2**i (basic, at most 512) or 4 x that (bottleneck, at most 2048); stage i has
            # stride 2**(i + 2)
            wide = s["block"] == "bottleneck"
            widths = [min(s["stem_w"] * 2 ** i * (4 if wide else 1), 2048 if wide else 512) for i in range(s["stages"])]
            layers, c = [_conv_bn(3, s["stem_w"], 3, 2, act=act)], s["stem_w"]
            for w, depth in zip(widths, s["depths"]):
                layers += [_fpn_block(s, M, c if j == 0 else w, w, 2 if j == 0 else 1) for j in range(depth)]
                c = w
            self.backbone, self.proj = nn.Sequential(*layers), nn.Conv2d(c, d, 1)
            # 2-D so that the generator's weight scaling (1 / sqrt of a row) keeps them at the scale of the features
            self.pos = nn.Parameter(torch.randn((size // 2 ** (s["stages"] + 1)) ** 2, d))
            # the queries' content (Deformable-DETR's half of its query embedding; DETR's zeros would leave the
            # queries all but equal under random weights) and their positions
            self.query, self.query_pos = (nn.Parameter(torch.randn(s["queries"], d)) for _ in range(2))
            self.enc = nn.ModuleList([EncLayer(d) for _ in range(s["enc_layers"])])
            self.dec = nn.ModuleList([DecLayer(d) for _ in range(s["dec_layers"])])
            self.norm, self.cls = nn.LayerNorm(d), nn.Linear(d, s["classes"] + 1)  # + 1: 'no object'
            self.box = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))

        def forward(self, x):
            mem = self.proj(self.backbone(x)).flatten(2).transpose(1, 2)
            for layer in self.enc:
                mem = layer(mem, self.pos)
            t = self.query.expand(x.shape[0], -1, -1).clone()  # clone: as Perceiver's latents (the flop counter)
            for layer in self.dec:
                t = layer(t, self.query_pos, mem, self.pos)
            t = self.norm(t)
            return torch.cat([self.cls(t), self.box(t).sigmoid()], -1)
    return DETR()


def _build_yolo(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def conv(ci, co, k=1, stride=1):  # Conv-BN-act; an even kernel (the v5 6x6 stem) pads k / 2 - 1
        act = nn.SiLU() if s["act"] == "silu" else nn.LeakyReLU(0.1)
        return nn.Sequential(nn.Conv2d(ci, co, k, stride, k // 2 if k % 2 else k // 2 - 1, bias=False),
                             nn.BatchNorm2d(co), act)

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut, k1):
            super().__init__()
            self.cv1, self.cv2, self.add = conv(c, c, k1), conv(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        """YOLOv8: a 1x1 conv to 2c, Split in two, n bottlenecks chained on the second half, every output
        concatenated, a 1x1 conv."""
        def __init__(self, ci, co, n, shortcut):
            super().__init__()
            self.c = co // 2
            self.cv1, self.cv2 = conv(ci, 2 * self.c), conv((2 + n) * self.c, co)
            self.m = nn.ModuleList([Bottleneck(self.c, shortcut, 3) for _ in range(n)])

        def forward(self, x):
            y = list(self.cv1(x).split([self.c, self.c], 1))
            for m in self.m:
                y.append(m(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class C3(nn.Module):
        """YOLOv5: two 1x1 branches, n (1x1, 3x3) bottlenecks on one, Concat, a 1x1 conv."""
        def __init__(self, ci, co, n, shortcut):
            super().__init__()
            c = co // 2
            self.cv1, self.cv2, self.cv3 = conv(ci, c), conv(ci, c), conv(2 * c, co)
            self.m = nn.Sequential(*[Bottleneck(c, shortcut, 1) for _ in range(n)])

        def forward(self, x):
            return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))

    def block(ci, co, n, shortcut):
        return (C2f if s["block"] == "c2f" else C3)(ci, co, n, shortcut)

    class SPPF(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.cv1, self.cv2, self.pool = conv(c, c // 2), conv(c // 2 * 4, c), nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            for _ in range(3):
                y.append(self.pool(y[-1]))
            return self.cv2(torch.cat(y, 1))

    nc, levels = s["classes"], [2, 3, 4][-s["scales"]:]  # P3-P5 (strides 8-32) or P4-P5
    ws = [max(int(round(min(c, s["max_w"]) * s["width_mult"] / 8)) * 8, 8) for c in (64, 128, 256, 512, 1024)]
    ns = [max(int(round(d * s["depth_mult"])), 1) for d in (3, 6, 6, 3)]
    n_neck = max(int(round(3 * s["depth_mult"])), 1)
    # the YOLOv5 defaults (pixels) at strides 8, 16, 32
    anchors_px = [[(10, 13), (16, 30), (33, 23)], [(30, 61), (62, 45), (59, 119)], [(116, 90), (156, 198), (373, 326)]]

    class Head(nn.Module):
        """Per scale: anchor-based, a 1x1 conv to A x (5 + classes), [B, A, 5 + nc, H, W] -> [B, A, H, W, 5 + nc],
        Sigmoid (decoded: xy = (2 sig - 0.5 + grid) stride, wh = (2 sig)^2 anchor), flattened to [B, A H W, 5 + nc];
        anchor-free, box and class towers (two 3x3 convs, a 1x1 conv each), Concat, flattened to [B, 4 reg + nc, HW],
        the box bins' softmax times arange(reg) (DFL), decoded to centre and size x stride, the classes' Sigmoid."""
        def __init__(self, chans):
            super().__init__()
            if s["head"] == "anchor":
                self.na = s["anchors"]
                self.m = nn.ModuleList([nn.Conv2d(c, self.na * (5 + nc), 1) for c in chans])
            else:
                self.reg = s["reg_max"]
                c2, c3 = max(16, chans[0] // 4, 4 * self.reg), max(chans[0], min(nc, 100))
                self.box = nn.ModuleList([nn.Sequential(conv(c, c2, 3), conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg, 1))
                                          for c in chans])
                self.cls = nn.ModuleList([nn.Sequential(conv(c, c3, 3), conv(c3, c3, 3), nn.Conv2d(c3, nc, 1))
                                          for c in chans])
                self.register_buffer("dfl", torch.arange(self.reg, dtype=torch.float32).reshape(1, self.reg, 1, 1),
                                     persistent=False)
            grids, extra, strides = [], [], []
            for lv in levels:  # the cells' offsets (and the anchors' sizes, or every cell's stride)
                st, g = 2 ** (lv + 1), size // 2 ** (lv + 1)
                yy, xx = torch.meshgrid(torch.arange(g, dtype=torch.float32), torch.arange(g, dtype=torch.float32),
                                        indexing="ij")
                if s["head"] == "anchor":
                    grids.append(torch.stack([xx, yy], -1).reshape(1, 1, g, g, 2) - 0.5)
                    extra.append(torch.tensor(anchors_px[lv - 2][:self.na], dtype=torch.float32)
                                 .reshape(1, self.na, 1, 1, 2))
                else:
                    grids.append(torch.stack([xx, yy]).reshape(2, g * g) + 0.5)
                    strides.append(torch.full((1, g * g), float(st)))
            for i, (gr, ex) in enumerate(zip(grids, extra or grids)):
                self.register_buffer(f"grid{i}", gr, persistent=False)
                if extra:
                    self.register_buffer(f"anchor{i}", ex, persistent=False)
            if strides:
                self.register_buffer("anchor_points", torch.cat(grids, 1), persistent=False)
                self.register_buffer("strides", torch.cat(strides, 1), persistent=False)

        def forward(self, feats):
            b = feats[0].shape[0]
            if s["head"] == "anchor":
                outs = []
                for i, (f, m) in enumerate(zip(feats, self.m)):
                    _, _, h, w = f.shape
                    y = m(f).reshape(b, self.na, 5 + nc, h, w).permute(0, 1, 3, 4, 2).sigmoid()
                    if s["decode"]:
                        st = 2 ** (levels[i] + 1)
                        xy = (y[..., :2] * 2 + getattr(self, f"grid{i}")) * st
                        wh = (y[..., 2:4] * 2) ** 2 * getattr(self, f"anchor{i}")
                        y = torch.cat([xy, wh, y[..., 4:]], -1)
                    outs.append(y.reshape(b, -1, 5 + nc))
                return torch.cat(outs, 1)
            x = torch.cat([torch.cat([bx(f), cl(f)], 1).reshape(b, 4 * self.reg + nc, -1)
                           for f, bx, cl in zip(feats, self.box, self.cls)], 2)
            box, cls = x.split([4 * self.reg, nc], 1)
            if self.reg > 1:  # DFL: the expected bin of a softmax over reg bins, by a 1x1 conv of arange weights
                a = box.shape[-1]
                box = F.conv2d(box.reshape(b, 4, self.reg, a).transpose(2, 1).softmax(1), self.dfl).reshape(b, 4, a)
            if s["decode"]:
                lt, rb = box.chunk(2, 1)
                x1y1, x2y2 = self.anchor_points - lt, self.anchor_points + rb
                box = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * self.strides
            return torch.cat([box, cls.sigmoid()], 1)

    class YOLO(nn.Module):
        """Image -> stem (stride 2) -> 4 stages of a stride-2 conv and a block (shortcuts) -> SPPF on P5 -> PAN
        neck (blocks without shortcuts) over the 2-3 output scales -> Head."""
        def __init__(self):
            super().__init__()
            self.stem = conv(3, ws[0], s["stem_k"], 2)
            self.stages = nn.ModuleList([nn.Sequential(conv(ws[i], ws[i + 1], 3, 2),
                                                       block(ws[i + 1], ws[i + 1], n, True))
                                         for i, n in enumerate(ns)])
            self.sppf = SPPF(ws[4])
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            chans = [ws[lv] for lv in levels]
            # top-down: from P5 to the finest output scale; bottom-up: a stride-2 conv, Concat, block per scale
            td, c = [], ws[4]
            for i in reversed(range(len(levels) - 1)):
                td.insert(0, block(c + chans[i], chans[i], n_neck, False))
                c = chans[i]
            self.td = nn.ModuleList(td)
            tdc = chans[:-1] + [ws[4]]
            self.down = nn.ModuleList([conv(chans[i - 1], chans[i - 1], 3, 2) for i in range(1, len(levels))])
            self.bu = nn.ModuleList([block(chans[i - 1] + tdc[i], chans[i], n_neck, False)
                                     for i in range(1, len(levels))])
            self.head = Head(chans)

        def forward(self, x):
            x, feats = self.stem(x), []
            for stage in self.stages:
                x = stage(x)
                feats.append(x)
            feats = [feats[lv - 1] for lv in levels[:-1]] + [self.sppf(x)]
            x, td = feats[-1], [feats[-1]]
            for i in reversed(range(len(levels) - 1)):
                x = self.td[i](torch.cat([self.up(x), feats[i]], 1))
                td.insert(0, x)
            outs = [x]
            for i in range(1, len(levels)):
                x = self.bu[i - 1](torch.cat([self.down[i - 1](x), td[i]], 1))
                outs.append(x)
            return self.head(outs)
    return YOLO()


def _build_pointnet(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def mlp1d(ci, widths):  # shared MLP over the points: Conv1d k 1 + BatchNorm1d + ReLU
        layers = []
        for w in widths:
            layers += [nn.Conv1d(ci, w, 1, bias=False), nn.BatchNorm1d(w), nn.ReLU()]
            ci = w
        return nn.Sequential(*layers)

    def fc(ci, widths):  # Linear + BatchNorm1d + ReLU
        layers = []
        for w in widths:
            layers += [nn.Linear(ci, w, bias=False), nn.BatchNorm1d(w), nn.ReLU()]
            ci = w
        return nn.Sequential(*layers)

    def global_max(x):  # [B, C, N] -> [B, C]: ReduceMax, or a MaxPool1d over all N points
        if s["pool"] == "maxpool":
            return F.max_pool1d(x, size).flatten(1)
        return x.amax(-1)

    class TNet(nn.Module):
        """A k x k transform predicted from the points: shared MLP 64-128-emb, global max, Linear 512-256-k^2,
        + identity; applied as x^T @ T by MatMul."""
        def __init__(self, k):
            super().__init__()
            e = min(s["emb"], 1024)
            self.k, self.mlp, self.fc = k, mlp1d(k, [64, 128, e]), fc(e, [512, 256])
            self.out = nn.Linear(256, k * k)
            self.register_buffer("eye", torch.eye(k).flatten(), persistent=False)

        def forward(self, x):
            t = (self.out(self.fc(global_max(self.mlp(x)))) + self.eye).reshape(-1, self.k, self.k)
            return torch.matmul(x.transpose(2, 1), t).transpose(2, 1)

    class EdgeConv(nn.Module):
        """DGCNN: the k nearest neighbours of every point (negative squared distances -|xi|^2 + 2 xi.xj - |xj|^2 by
        MatMul, TopK), their features gathered from [B N, C], edge features [xj - xi, xi] as [B, 2C, N, k],
        Conv2d 1x1 + BatchNorm2d + LeakyReLU(0.2), max over the neighbours."""
        def __init__(self, ci, co):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(2 * ci, co, 1, bias=False), nn.BatchNorm2d(co), nn.LeakyReLU(0.2))

        def forward(self, x, idx):
            b, c, n = x.shape
            k = idx.shape[-1]
            base = torch.arange(b, device=x.device).reshape(b, 1, 1) * n
            xt = x.transpose(2, 1).contiguous()                                    # [B, N, C]
            nb = xt.reshape(b * n, c)[(idx + base).reshape(-1)].reshape(b, n, k, c)
            xi = xt.reshape(b, n, 1, c).expand(b, n, k, c)
            e = torch.cat([nb - xi, xi], 3).permute(0, 3, 1, 2)                    # [B, 2C, N, k]
            return self.conv(e).amax(-1)

    def knn(x, k):
        inner = torch.matmul(x.transpose(2, 1), x)                                 # [B, N, N]
        sq = (x * x).sum(1, keepdim=True)                                          # [B, 1, N]
        return (2 * inner - sq - sq.transpose(2, 1)).topk(k, -1)[1]               # [B, N, k]

    class PointNet(nn.Module):
        """[B, 3, N] -> (input T-Net) -> shared MLP -> (feature T-Net) -> shared MLP to emb -> global max ->
        Linear-BN-ReLU head -> classes."""
        def __init__(self):
            super().__init__()
            self.tnet1 = TNet(3) if s["tnet"] != "none" else None
            self.mlp1 = mlp1d(3, s["mlp1"])
            c = s["mlp1"][-1]
            self.tnet2 = TNet(c) if s["tnet"] == "both" else None
            self.mlp2 = mlp1d(c, s["mlp2"] + [s["emb"]])
            self.head = nn.Sequential(fc(s["emb"], s["head"]), nn.Linear(s["head"][-1], s["classes"]))

        def forward(self, x):
            if self.tnet1 is not None:
                x = self.tnet1(x)
            x = self.mlp1(x)
            if self.tnet2 is not None:
                x = self.tnet2(x)
            return self.head(global_max(self.mlp2(x)))

    class DGCNN(nn.Module):
        """[B, 3, N] -> EdgeConvs (the graph recomputed on each layer's input, or once on the coordinates), every
        layer's output concatenated -> Conv1d to emb -> Concat of max and mean over the points -> head."""
        def __init__(self):
            super().__init__()
            cs = [3] + s["edges"]
            self.edges = nn.ModuleList([EdgeConv(cs[i], cs[i + 1]) for i in range(len(s["edges"]))])
            self.emb = mlp1d(sum(s["edges"]), [s["emb"]])
            self.head = nn.Sequential(fc(2 * s["emb"], s["head"]), nn.Linear(s["head"][-1], s["classes"]))

        def forward(self, x):
            idx, outs = knn(x, s["k"]), []
            for i, ec in enumerate(self.edges):
                if i and s["dynamic"]:
                    idx = knn(x, s["k"])
                x = ec(x, idx)
                outs.append(x)
            y = self.emb(torch.cat(outs, 1))
            return self.head(torch.cat([y.amax(-1), y.mean(-1)], 1))
    return PointNet() if s["kind"] == "pointnet" else DGCNN()


def _build_wav2vec(s, M):
    import torch.nn as nn
    import torch.nn.functional as F

    class ConvLayer(nn.Module):
        """Conv1d (kernel 10 stride 5, 3/2 or 2/2) -> GroupNorm with a group per channel (first layer, 'group') or a
        LayerNorm over the channels ('layer', every layer) -> GELU."""
        def __init__(self, ci, co, k, stride, norm):
            super().__init__()
            self.conv = nn.Conv1d(ci, co, k, stride, bias=s["conv_norm"] == "layer")
            self.norm = (nn.GroupNorm(co, co) if norm == "group" else nn.LayerNorm(co) if norm == "layer"
                         else None)

        def forward(self, x):
            x = self.conv(x)
            if isinstance(self.norm, nn.LayerNorm):
                x = self.norm(x.transpose(1, 2)).transpose(1, 2)
            elif self.norm is not None:
                x = self.norm(x)
            return F.gelu(x)

    class Wav2Vec(nn.Module):
        """[B, 1, T] -> conv feature extractor [B, C, frames] -> LayerNorm, Linear to D -> x + GELU(grouped Conv1d
        of kernel K, dropping the last frame when K is even) -> LayerNorm then post-norm layers, or pre-norm layers
        then LayerNorm -> the frames, a per-frame Linear (CTC) or a mean over frames + Linear."""
        def __init__(self):
            super().__init__()
            n, c, d = s["conv_layers"], s["conv_w"], s["dim"]
            ks = [(10, 5)] + [(3, 2)] * (n - 3) + [(2, 2)] * 2
            norms = ["group" if i == 0 else None for i in range(n)] if s["conv_norm"] == "group" else ["layer"] * n
            self.convs = nn.Sequential(*[ConvLayer(1 if i == 0 else c, c, k, st, norms[i])
                                         for i, (k, st) in enumerate(ks)])
            self.feat_norm, self.proj = nn.LayerNorm(c), nn.Linear(c, d)
            self.pos = nn.Conv1d(d, d, s["pos_k"], padding=s["pos_k"] // 2, groups=s["pos_groups"])
            self.norm = nn.LayerNorm(d)
            ffn = d * s["ffn_ratio"]
            self.layers = nn.Sequential(*[M["Block"](d, s["heads"], s["ffn_ratio"], s["attn"]) if s["norm_first"]
                                          else M["EncoderLayer"](d, s["heads"], ffn, s["attn"])
                                          for _ in range(s["depth"])])
            self.head = nn.Linear(d, s["classes"]) if s["head"] != "none" else None

        def forward(self, x):
            x = self.proj(self.feat_norm(self.convs(x).transpose(1, 2)))       # [B, frames, D]
            p = self.pos(x.transpose(1, 2))
            if s["pos_k"] % 2 == 0:
                p = p[..., :-1]
            x = x + F.gelu(p).transpose(1, 2)
            x = self.norm(self.layers(x)) if s["norm_first"] else self.layers(self.norm(x))
            if s["head"] == "mean":
                x = x.mean(1)
            return self.head(x) if self.head is not None else x
    return Wav2Vec()


def _build_video3d(s):
    import torch.nn as nn

    def cbr(ci, co, k, stride=1, act=True):  # Conv3d (padding k // 2 per axis) + BatchNorm3d (+ ReLU)
        layers = [nn.Conv3d(ci, co, k, stride, tuple(x // 2 for x in k), bias=False), nn.BatchNorm3d(co)]
        return nn.Sequential(*(layers + [nn.ReLU()] if act else layers))

    def conv3(ci, co, stride, act):  # a 3x3x3 conv, or R(2+1)D's 1x3x3 spatial then 3x1x1 temporal pair
        if s["kind"] != "r2plus1d":
            return cbr(ci, co, (3, 3, 3), stride, act)
        mid = max(8, (27 * ci * co) // (9 * ci + 3 * co) // 8 * 8)  # the 3x3x3 conv's parameter count
        return nn.Sequential(cbr(ci, mid, (1, 3, 3), (1,) + stride[1:]),
                             cbr(mid, co, (3, 1, 1), stride[:1] + (1, 1), act))

    class Basic(nn.Module):
        """R3D / R(2+1)D basic block: two (factorized) 3x3x3 conv-BN, a 1x1x1 stride conv-BN shortcut where the
        shape changes, ReLU after the sum."""
        def __init__(self, ci, co, stride):
            super().__init__()
            self.body = nn.Sequential(conv3(ci, co, stride, True), conv3(co, co, (1, 1, 1), False))
            self.short = cbr(ci, co, (1, 1, 1), stride, False) if ci != co or stride != (1, 1, 1) else None
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.body(x) + (x if self.short is None else self.short(x)))

    class Video3D(nn.Module):
        """[B, 3, T, H, W] -> stem (C3D: 3x3x3 conv + MaxPool3d 1x2x2; R3D: 3x7x7 stride 1x2x2; R(2+1)D: 1x7x7
        then 3x1x1) -> stages (C3D: a MaxPool3d 2x2x2 (1x2x2 once T is 1) then 3x3x3 conv-BN-ReLU; R3D/R(2+1)D:
        basic blocks, the first of a stage stride 2 in time and space) -> global average pool -> Linear."""
        def __init__(self):
            super().__init__()
            w, t = s["stem_w"], s["frames"]
            if s["kind"] == "c3d":
                layers = [cbr(3, w, (3, 3, 3)), nn.MaxPool3d((1, 2, 2), (1, 2, 2))]
            elif s["kind"] == "r3d":
                layers = [cbr(3, w, (3, 7, 7), (1, 2, 2))]
            else:
                layers = [cbr(3, w, (1, 7, 7), (1, 2, 2)), cbr(w, w, (3, 1, 1))]
            c = w
            for i, d in enumerate(s["depths"]):
                co = min(s["stem_w"] * 2 ** i, s["max_w"])
                st = (2 if t > 1 else 1, 2, 2) if i else (1, 1, 1)
                t = -(-t // st[0])
                if s["kind"] == "c3d":
                    if i:
                        layers.append(nn.MaxPool3d(st, st))
                    layers += [cbr(c if j == 0 else co, co, (3, 3, 3)) for j in range(d)]
                else:
                    layers += [Basic(c if j == 0 else co, co, st if j == 0 else (1, 1, 1)) for j in range(d)]
                c = co
            self.features = nn.Sequential(*layers)
            self.pool, self.fc = nn.AdaptiveAvgPool3d(1), nn.Linear(c, s["classes"])

        def forward(self, x):
            return self.fc(self.pool(self.features(x)).flatten(1))
    return Video3D()


def _build_deeplab(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        """Basic (two 3x3) or bottleneck (1x1, 3x3, 1x1 to 4x) residual block; the 3x3 may be dilated."""
        def __init__(self, ci, mid, stride, dil):
            super().__init__()
            co = mid * (4 if s["block"] == "bottleneck" else 1)
            if s["block"] == "basic":
                self.body = nn.Sequential(_conv_bn(ci, co, 3, stride, dilation=dil),
                                          _conv_bn(co, co, 3, dilation=dil, act=None))
            else:
                self.body = nn.Sequential(_conv_bn(ci, mid, 1), _conv_bn(mid, mid, 3, stride, dilation=dil),
                                          _conv_bn(mid, co, 1, act=None))
            self.short = _conv_bn(ci, co, 1, stride, act=None) if ci != co or stride != 1 else None
            self.co = co

        def forward(self, x):
            return F.relu(self.body(x) + (x if self.short is None else self.short(x)))

    def aspp_conv(ci, co, rate):  # a dilated 3x3 conv-BN-ReLU, or a dilated depthwise 3x3 + pointwise conv (v3+)
        if s["separable"]:
            return nn.Sequential(_conv_bn(ci, ci, 3, groups=ci, dilation=rate), _conv_bn(ci, co, 1))
        return _conv_bn(ci, co, 3, dilation=rate)

    class ASPP(nn.Module):
        """1x1 conv, 3 dilated 3x3 convs and image pooling (global average, 1x1 conv, bilinear upsampling back),
        concatenated, a 1x1 projection."""
        def __init__(self, ci, co):
            super().__init__()
            self.branches = nn.ModuleList([_conv_bn(ci, co, 1)] + [aspp_conv(ci, co, r) for r in s["rates"]])
            self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(ci, co, 1, bias=False), nn.BatchNorm2d(co),
                                      nn.ReLU())
            self.project = _conv_bn(co * (len(s["rates"]) + 2), co, 1)

        def forward(self, x):
            p = F.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False)
            return self.project(torch.cat([b(x) for b in self.branches] + [p], 1))

    class DeepLab(nn.Module):
        """Image -> stem (3x3 stride-2 conv, 3x3 conv, MaxPool: stride 4) -> 4 stages of residual blocks (strides
        1, 2, 2, 2 up to the output stride, then stride 1 with dilation 2, 4) -> ASPP -> v3: 3x3 conv, 1x1
        classifier, bilinear x output stride; v3+: bilinear to stride 4, Concat with the first stage's features
        reduced to 48 by a 1x1 conv, two 3x3 convs, classifier, bilinear x4."""
        def __init__(self):
            super().__init__()
            w = s["stem_w"]
            self.stem = nn.Sequential(_conv_bn(3, w, 3, 2), _conv_bn(w, w, 3), nn.MaxPool2d(3, 2, 1))
            stages, c, stride, dil = [], w, 4, 1
            for i, d in enumerate(s["depths"]):
                st = 2 if i and stride < s["output_stride"] else 1
                if i and st == 1:
                    dil *= 2
                stride *= st
                blocks = []
                for j in range(d):
                    blocks.append(Block(c, w * 2 ** i, st if j == 0 else 1, dil))
                    c = blocks[-1].co
                stages.append(nn.Sequential(*blocks))
                if i == 0:
                    low_c = c
            self.stages = nn.ModuleList(stages)
            a = s["aspp_ch"]
            self.aspp = ASPP(c, a)
            if s["decoder"] == "v3plus":
                self.low = _conv_bn(low_c, 48, 1)
                self.fuse = nn.Sequential(_conv_bn(a + 48, a, 3), _conv_bn(a, a, 3))
            else:
                self.fuse = _conv_bn(a, a, 3)
            self.cls = nn.Conv2d(a, s["classes"], 1)

        def forward(self, x):
            h, w = x.shape[-2:]
            y = self.stem(x)
            for i, stage in enumerate(self.stages):
                y = stage(y)
                if i == 0:
                    low = y
            y = self.aspp(y)
            if s["decoder"] == "v3plus":
                y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
                y = torch.cat([y, self.low(low)], 1)
            y = self.cls(self.fuse(y))
            return F.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
    return DeepLab()


def _build_dlrm(s, size):
    import torch
    import torch.nn as nn

    def mlp(ci, widths, last_act=True):  # Linear + ReLU layers
        layers = []
        for i, w in enumerate(widths):
            layers.append(nn.Linear(ci, w))
            if last_act or i < len(widths) - 1:
                layers.append(nn.ReLU())
            ci = w
        return nn.Sequential(*layers)

    class DLRM(nn.Module):
        """[B, 1, n_dense + tables x L] -> dense part through the bottom MLP to D; the index part (as floats) to
        int64 rows: (|x| * 7919) cast to int64, modulo each table's rows -> lookups (a Gather per table, or one
        Gather in the concatenated table after adding row offsets), summed over the L lookups of a table -> the
        dense vector and the T table vectors stacked [B, T + 1, D] -> Z Z^T by MatMul -> its upper triangle by a
        constant-index Gather of the flattened [B, (T + 1)^2] (with or without the diagonal) or all of it -> Concat
        with the dense vector -> top MLP -> Linear to 1 -> Sigmoid."""
        def __init__(self):
            super().__init__()
            d, nt, rows = s["dim"], s["tables"], s["rows"]
            self.bottom = mlp(s["n_dense"], s["bottom"] + [d])
            if s["lookup"] == "separate":
                self.emb = nn.ModuleList([nn.Embedding(n, d) for n in rows])
            else:
                self.emb = nn.Embedding(sum(rows), d)
                offs = torch.tensor([0] + rows[:-1], dtype=torch.int64).cumsum(0)
                self.register_buffer("offsets", offs.reshape(1, nt, 1), persistent=False)
            self.register_buffer("rows", torch.tensor(rows, dtype=torch.int64).reshape(1, nt, 1), persistent=False)
            n = nt + 1
            if s["interaction"] == "triangle":
                iu = torch.triu_indices(n, n, 0 if s["self_dot"] else 1)
                self.register_buffer("tri", iu[0] * n + iu[1], persistent=False)
                pairs = iu.shape[1]
            else:
                pairs = n * n
            self.top = nn.Sequential(mlp(d + pairs, s["top"]), nn.Linear(s["top"][-1], 1))

        def forward(self, x):
            b, nd, nt, d = x.shape[0], s["n_dense"], s["tables"], s["dim"]
            x = x.reshape(b, -1)
            dense = self.bottom(x[:, :nd])
            idx = (x[:, nd:].abs() * 7919.0).to(torch.int64).reshape(b, nt, size) % self.rows   # [B, T, L]
            if s["lookup"] == "separate":
                vs = [e(idx[:, t]) for t, e in enumerate(self.emb)]                           # T x [B, L, D]
                vs = [v.squeeze(1) if size == 1 else v.sum(1) for v in vs]
                z = torch.stack([dense] + vs, 1)                                             # [B, T + 1, D]
            else:
                v = self.emb((idx + self.offsets).reshape(b, nt * size)).reshape(b, nt, size, d)
                v = v.squeeze(2) if size == 1 else v.sum(2)
                z = torch.cat([dense.unsqueeze(1), v], 1)
            inter = torch.bmm(z, z.transpose(1, 2)).reshape(b, -1)
            if s["interaction"] == "triangle":
                inter = inter[:, self.tri]
            return torch.sigmoid(self.top(torch.cat([dense, inter], 1)))
    return DLRM()


def _build_vocoder(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    hifi = s["kind"] == "hifigan"
    slope = 0.1 if hifi else 0.2  # HiFi-GAN's LeakyReLU slope, MelGAN's

    def conv(ci, co, k, dil=1):  # a 'same' Conv1d: zero padding in the Conv, or a reflection Pad node before it
        p = dil * (k - 1) // 2
        if s["pad"] == "reflect" and p:
            return nn.Sequential(nn.ReflectionPad1d(p), nn.Conv1d(ci, co, k, dilation=dil))
        return nn.Conv1d(ci, co, k, padding=p, dilation=dil)

    class HiFiRes(nn.Module):
        """HiFi-GAN's ResBlock1 (per dilation: LeakyReLU, dilated kxk conv, LeakyReLU, kxk conv, + x) or ResBlock2
        (per dilation: LeakyReLU, dilated conv, + x)."""
        def __init__(self, c, k):
            super().__init__()
            self.c1 = nn.ModuleList([conv(c, c, k, d) for d in s["dilations"]])
            self.c2 = nn.ModuleList([conv(c, c, k) for _ in s["dilations"]]) if s["block"] == "v1" else None

        def forward(self, x):
            for i, c1 in enumerate(self.c1):
                y = c1(F.leaky_relu(x, slope))
                if self.c2 is not None:
                    y = self.c2[i](F.leaky_relu(y, slope))
                x = x + y
            return x

    class MRF(nn.Module):
        """Multi-receptive-field fusion: one residual block per kernel size, their outputs averaged."""
        def __init__(self, c):
            super().__init__()
            self.blocks = nn.ModuleList([HiFiRes(c, k) for k in s["kernels"]])

        def forward(self, x):
            y = self.blocks[0](x)
            for b in self.blocks[1:]:
                y = y + b(x)
            return y / len(self.blocks)

    class MelStack(nn.Module):
        """MelGAN's residual stack: per dilation 1, 3, 9: LeakyReLU, dilated 3-tap conv, LeakyReLU, 1x1 conv, plus
        a 1x1 conv shortcut."""
        def __init__(self, c):
            super().__init__()
            self.body = nn.ModuleList([nn.Sequential(nn.LeakyReLU(slope), conv(c, c, 3, d), nn.LeakyReLU(slope),
                                                     nn.Conv1d(c, c, 1)) for d in s["dilations"]])
            self.short = nn.ModuleList([nn.Conv1d(c, c, 1) for _ in s["dilations"]])

        def forward(self, x):
            for body, short in zip(self.body, self.short):
                x = short(x) + body(x)
            return x

    class Vocoder(nn.Module):
        """[B, S, 80] -> [B, 80, S] -> Conv1d k 7 to the width -> per up stage: LeakyReLU, ConvTranspose1d (stride
        u, kernel 2u, padding u / 2: exactly u times longer, half the width), MRF or residual stack -> LeakyReLU,
        Conv1d k 7 to 1 channel, Tanh: [B, 1, S x hop]."""
        def __init__(self):
            super().__init__()
            c = s["width"]
            self.pre = conv(s["mels"], c, 7)
            ups, blocks = [], []
            for u in s["strides"]:
                co = max(c // 2, 16)
                ups.append(nn.ConvTranspose1d(c, co, 2 * u, u, u // 2))
                blocks.append(MRF(co) if hifi else MelStack(co))
                c = co
            self.ups, self.blocks = nn.ModuleList(ups), nn.ModuleList(blocks)
            self.post = conv(c, 1, 7)

        def forward(self, x):
            x = self.pre(x.transpose(1, 2))
            for up, block in zip(self.ups, self.blocks):
                x = block(up(F.leaky_relu(x, slope)))
            return torch.tanh(self.post(F.leaky_relu(x, 0.01 if hifi else slope)))
    return Vocoder()


def _build_superres(s):
    import torch.nn as nn
    import torch.nn.functional as F
    c = s["width"]

    def conv(ci, co, k=3):
        return nn.Conv2d(ci, co, k, 1, k // 2)

    class ChannelAttention(nn.Module):
        """RCAN's channel attention: global average pool, 1x1 conv to C / r, ReLU, 1x1 conv back, Sigmoid, Mul."""
        def __init__(self):
            super().__init__()
            self.fc = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, max(c // s["reduction"], 4), 1), nn.ReLU(),
                                    nn.Conv2d(max(c // s["reduction"], 4), c, 1), nn.Sigmoid())

        def forward(self, x):
            return x * self.fc(x)

    class ResBlock(nn.Module):
        """conv-ReLU-conv (-channel attention), scaled by res_scale (a Mul when 0.1), + x."""
        def __init__(self):
            super().__init__()
            body = [conv(c, c), nn.ReLU(), conv(c, c)] + ([ChannelAttention()] if s["attention"] else [])
            self.body = nn.Sequential(*body)

        def forward(self, x):
            y = self.body(x)
            return x + (y * s["res_scale"] if s["res_scale"] != 1.0 else y)

    class Group(nn.Module):
        """A run of residual blocks and a closing 3x3 conv; RCAN's residual group adds a skip around it."""
        def __init__(self, n, skip):
            super().__init__()
            self.body, self.skip = nn.Sequential(*[ResBlock() for _ in range(n)], conv(c, c)), skip

        def forward(self, x):
            return x + self.body(x) if self.skip else self.body(x)

    class SuperRes(nn.Module):
        """[B, 3, H, W] -> 3x3 head conv -> body (EDSR: blocks + conv; RCAN: residual groups + conv) + the head's
        output -> per x2: conv to 4C + PixelShuffle(2), or Resize x2 (nearest/bilinear) + conv + ReLU -> 3x3 conv
        to RGB (+ the input resized by the scale): [B, 3, scale H, scale W]."""
        def __init__(self):
            super().__init__()
            rcan = s["kind"] == "rcan"
            self.head = conv(3, c)
            self.body = nn.Sequential(*[Group(n, rcan) for n in s["groups"]], conv(c, c)) if rcan \
                else Group(s["groups"][0], False)
            up = []
            for _ in range(s["scale"].bit_length() - 1):
                if s["up"] == "shuffle":
                    up += [conv(c, 4 * c), nn.PixelShuffle(2)]
                else:
                    bilinear = s["up"] == "bilinear"
                    up += [nn.Upsample(scale_factor=2, mode=s["up"], align_corners=False if bilinear else None),
                           conv(c, c), nn.ReLU()]
            self.up, self.tail = nn.Sequential(*up), conv(c, 3)

        def forward(self, x):
            y = self.head(x)
            y = self.tail(self.up(y + self.body(y)))
            if s["global_skip"] != "none":
                y = y + F.interpolate(x, scale_factor=s["scale"], mode=s["global_skip"], align_corners=False)
            return y
    return SuperRes()


def _build_gnn(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    n, f_in, h, gat = size, s["f_in"], s["hidden"], s["conv"] == "gat"
    act = F.relu if s["act"] == "relu" else F.elu

    class GCN(nn.Module):
        """A_norm @ X @ W (+ b), multiplied in the cheaper order: (A X) W when the input is narrower, A (X W)
        otherwise."""
        def __init__(self, ci, co):
            super().__init__()
            self.lin, self.first = nn.Linear(ci, co), ci > co

        def forward(self, x, a):
            return a @ self.lin(x) if self.first else self.lin(a @ x)

    class GAT(nn.Module):
        """Multi-head graph attention: Wh = X W as [B, heads, N, d]; scores additive (Wh_i . a_src + Wh_j . a_dst,
        LeakyReLU 0.2) or scaled dot products of two more projections; masked to the edges (Where, or + -1e9 off
        them), Softmax over the neighbours, @ Wh, heads concatenated, + bias."""
        def __init__(self, ci, co):
            super().__init__()
            self.hd, self.d = s["heads"], co // s["heads"]
            self.w = nn.Linear(ci, co, bias=False)
            if s["score"] == "additive":
                self.a_src = nn.Parameter(torch.randn(self.hd, self.d, 1))
                self.a_dst = nn.Parameter(torch.randn(self.hd, self.d, 1))
            else:
                self.qk = nn.Linear(ci, 2 * co, bias=False)
            self.bias = nn.Parameter(torch.randn(co) * 0.1)

        def forward(self, x, mask):
            b = x.shape[0]
            wh = self.w(x).reshape(b, n, self.hd, self.d).transpose(1, 2)                   # [B, heads, N, d]
            if s["score"] == "additive":
                e = F.leaky_relu(wh @ self.a_src + (wh @ self.a_dst).transpose(2, 3), 0.2)  # [B, heads, N, N]
            else:
                q, k = self.qk(x).reshape(b, n, 2, self.hd, self.d).permute(2, 0, 3, 1, 4)
                e = (q @ k.transpose(2, 3)) * self.d ** -0.5
            e = torch.where(mask, e, -1e9) if s["mask"] == "where" else e + mask
            o = e.softmax(-1) @ wh
            return o.transpose(1, 2).reshape(b, n, self.hd * self.d) + self.bias

    class GNN(nn.Module):
        """[B, N, F_in + N] -> node features X = [..., :F_in], adjacency A = [..., F_in:] > threshold (Greater; GCN
        weighted: Relu(A - threshold)), self-loops by Max with the identity -> GCN: A_norm = d A d with d =
        ReduceSum(A)^-0.5; GAT: a Bool mask (Where) or (A - 1) * 1e9 (additive) -> layers, each conv, (norm), act,
        (+ x or a Linear of x) -> mean/max over the nodes + Linear-ReLU-Linear, or a per-node Linear."""
        def __init__(self):
            super().__init__()
            dims = [f_in] + [h] * s["layers"]
            self.convs = nn.ModuleList([(GAT if gat else GCN)(dims[i], dims[i + 1]) for i in range(s["layers"])])
            self.norms = nn.ModuleList([nn.LayerNorm(h) if s["norm"] == "ln" else nn.BatchNorm1d(h)
                                        for _ in range(s["layers"])]) if s["norm"] != "none" else None
            self.res = nn.ModuleList([nn.Linear(dims[i], h, bias=False) if dims[i] != h else nn.Identity()
                                      for i in range(s["layers"])]) if s["residual"] else None
            if s["readout"] == "node":
                self.head = nn.Linear(h, s["classes"])
            else:
                self.head = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, s["classes"]))
            self.register_buffer("eye", torch.eye(n), persistent=False)

        def forward(self, inp):
            x, raw = inp[..., :f_in], inp[..., f_in:]
            if not gat and s["weighted"]:
                a = torch.maximum(F.relu(raw - s["threshold"]), self.eye)
            else:
                a = torch.maximum((raw > s["threshold"]).float(), self.eye)
            if gat:  # one mask for every head: [B, 1, N, N]
                adj = (a > 0.5).unsqueeze(1) if s["mask"] == "where" else ((a - 1.0) * 1e9).unsqueeze(1)
            else:
                d = a.sum(-1).pow(-0.5)
                adj = d.unsqueeze(-1) * a * d.unsqueeze(-2)
            for i, c in enumerate(self.convs):
                y = c(x, adj)
                if self.norms is not None:
                    y = self.norms[i](y) if s["norm"] == "ln" else self.norms[i](y.transpose(1, 2)).transpose(1, 2)
                y = act(y)
                x = y + self.res[i](x) if self.res is not None else y
            if s["readout"] == "node":
                return self.head(x)                                                         # [B, N, classes]
            return self.head(x.mean(1) if s["readout"] == "mean" else x.amax(1))            # [B, classes]
    return GNN()


def _build_diffusion(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    ch = s["chans"]
    temb = 4 * ch[0]                      # the timestep embedding's width (DDPM: 4 x the base width)
    shift = s["emb"] == "scale_shift"

    def gn(c):  # at most `groups` groups, a divisor of c (a skip Concat's width too)
        return nn.GroupNorm(math.gcd(c, s["groups"]), c)

    class ResBlock(nn.Module):
        """GroupNorm, SiLU, 3x3 conv; + Linear(SiLU(emb)) (or GroupNorm x (1 + scale) + shift); GroupNorm, SiLU,
        3x3 conv; + x (a 1x1 conv when the widths differ)."""
        def __init__(self, ci, co):
            super().__init__()
            self.n1, self.c1 = gn(ci), nn.Conv2d(ci, co, 3, 1, 1)
            self.emb = nn.Linear(temb, 2 * co if shift else co)
            self.n2, self.c2 = gn(co), nn.Conv2d(co, co, 3, 1, 1)
            self.skip = nn.Conv2d(ci, co, 1) if ci != co else nn.Identity()

        def forward(self, x, e):
            h = self.c1(F.silu(self.n1(x)))
            e = self.emb(F.silu(e))[:, :, None, None]
            if shift:
                scale, sh = e.chunk(2, 1)
                h = F.silu(self.n2(h) * (1 + scale) + sh)
            else:
                h = F.silu(self.n2(h + e))
            return self.skip(x) + self.c2(h)

    class Attn(nn.Module):
        """GroupNorm, q/k/v by a 1x1 conv or a Linear over the tokens, heads, Softmax(q k^T / sqrt(d)) v (manual or
        SDPA), a 1x1 conv or Linear projection, + x."""
        def __init__(self, c):
            super().__init__()
            self.norm, self.h, self.conv = gn(c), s["heads"], s["qkv"] == "conv"
            lin = (lambda i, o: nn.Conv2d(i, o, 1)) if self.conv else nn.Linear
            self.qkv, self.proj = lin(c, 3 * c), lin(c, c)

        def forward(self, x):
            b, c, hh, ww = x.shape
            n, d = hh * ww, c // self.h
            y = self.norm(x)
            if self.conv:   # [B, 3C, H, W] -> 3 x [B, heads, N, d]
                q, k, v = self.qkv(y).reshape(b, 3, self.h, d, n).transpose(3, 4).unbind(1)
            else:           # tokens [B, N, C] -> Linear -> 3 x [B, heads, N, d]
                q, k, v = self.qkv(y.flatten(2).transpose(1, 2)).reshape(b, n, 3, self.h, d).permute(2, 0, 3, 1, 4)
            if s["attn"] == "sdpa":
                o = F.scaled_dot_product_attention(q, k, v)
            else:
                o = ((q @ k.transpose(2, 3)) * d ** -0.5).softmax(-1) @ v
            if self.conv:
                o = self.proj(o.transpose(2, 3).reshape(b, c, hh, ww))
            else:
                o = self.proj(o.transpose(1, 2).reshape(b, n, c)).transpose(1, 2).reshape(b, c, hh, ww)
            return x + o

    class Block(nn.Module):
        """One step of the plan: a residual block (+ attention), a stride-2 conv down, or an up by nearest Resize +
        3x3 conv or a 4x4 stride-2 ConvTranspose2d; the middle: residual, (attention,) residual."""
        def __init__(self, part, ci, co, attn):
            super().__init__()
            self.part = part
            if part in ("res", "up_res", "mid"):
                self.res = ResBlock(ci, co)
                self.attn = Attn(co) if attn else None
                self.res2 = ResBlock(co, co) if part == "mid" else None
            elif part == "down":
                self.op = nn.Conv2d(ci, co, 3, 2, 1)
            elif s["up"] == "nearest":
                self.op = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(ci, co, 3, 1, 1))
            else:
                self.op = nn.ConvTranspose2d(ci, co, 4, 2, 1)

        def forward(self, x, e):
            if self.part in ("down", "up"):
                return self.op(x)
            x = self.res(x, e)
            if self.attn is not None:
                x = self.attn(x)
            return self.res2(x, e) if self.res2 is not None else x

    class UNet(nn.Module):
        """[B, C, H, W] -> t = t_max Sigmoid(mean of x) per sample -> sinusoidal embedding (Sin, Cos of t x
        10000^(-i / half), Concat) -> Linear, SiLU, Linear; conv_in; the plan (down blocks push skips, up blocks
        Concat them); GroupNorm, SiLU, conv_out: [B, out_ch, H, W]."""
        def __init__(self):
            super().__init__()
            half = ch[0] // 2
            self.register_buffer("freqs", torch.exp(-math.log(10000.0) * torch.arange(half) / half), persistent=False)
            self.mlp = nn.Sequential(nn.Linear(2 * half, temb), nn.SiLU(), nn.Linear(temb, temb))
            self.conv_in = nn.Conv2d(s["in_ch"], ch[0], 3, 1, 1)
            self.blocks = nn.ModuleList([Block(p, ci, co, a) for p, _, ci, co, a in _diffusion_plan(s)])
            self.out = nn.Sequential(gn(ch[0]), nn.SiLU(), nn.Conv2d(ch[0], s["out_ch"], 3, 1, 1))

        def forward(self, x):
            t = s["t_max"] * torch.sigmoid(x.mean((1, 2, 3)))            # [B]: a timestep per sample, in-graph
            a = t[:, None] * self.freqs[None]
            e = self.mlp(torch.cat([torch.sin(a), torch.cos(a)], 1))      # [B, 4 C]
            h = self.conv_in(x)
            hs = [h]
            for blk in self.blocks:
                if blk.part == "up_res":
                    h = torch.cat([h, hs.pop()], 1)
                h = blk(h, e)
                if blk.part in ("res", "down"):
                    hs.append(h)
            return self.out(h)
    return UNet()


def _build_implicit(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    sin = s["act"] == "sin"

    class Fourier(nn.Module):
        """x / bound -> NeRF's per-octave Mul by 2^k pi ([B, N, 3, L], flattened) or a MatMul by 2 pi B (B: [3, m],
        Gaussian of scale sigma) -> Concat(x?, Sin, Cos)."""
        def __init__(self, octaves, include):
            super().__init__()
            self.include, self.pos = include, octaves is not None
            if self.pos:
                self.register_buffer("f", (2.0 ** torch.arange(octaves)) * math.pi, persistent=False)
                self.dim = 6 * octaves + 3 * include
            else:
                self.register_buffer("b", torch.randn(3, s["features"]) * s["sigma"] * 2 * math.pi, persistent=False)
                self.dim = 2 * s["features"] + 3 * include

        def forward(self, x):
            y = (x[..., None] * self.f).flatten(2) if self.pos else x @ self.b
            return torch.cat(([x] if self.include else []) + [torch.sin(y), torch.cos(y)], -1)

    class Implicit(nn.Module):
        """[B, N, 3] -> encoding -> Linear + ReLU, or Sin (w0 on the first) layers, the encoding concatenated again
        before layer `skip` -> head(s): [B, N, out] (NeRF: Concat(Sigmoid(rgb), density))."""
        def __init__(self):
            super().__init__()
            w = s["width"]
            self.enc = Fourier(s.get("octaves"), s["include_input"])
            dims = [self.enc.dim] + [w] * s["depth"]
            self.layers = nn.ModuleList([nn.Linear(dims[i] + (self.enc.dim if i == s["skip"] else 0), w)
                                         for i in range(s["depth"])])
            if s["heads"] == "nerf":
                self.sigma, self.feat = nn.Linear(w, 1), nn.Linear(w, w)
                self.dirs = Fourier(4, True) if s["viewdirs"] else None
                self.rgb = nn.Sequential(nn.Linear(w + (self.dirs.dim if self.dirs else 0), w // 2), nn.ReLU(),
                                         nn.Linear(w // 2, 3), nn.Sigmoid())
            else:
                self.head = nn.Linear(w, s["out"])

        def forward(self, x):
            x = x * (1.0 / s["bound"])
            enc = self.enc(x)
            h = enc
            for i, lin in enumerate(self.layers):
                if i == s["skip"]:
                    h = torch.cat([h, enc], -1)
                h = lin(h)
                h = torch.sin(h * s["w0"] if i == 0 and s["w0"] != 1.0 else h) if sin else F.relu(h)
            if s["heads"] != "nerf":
                y = self.head(h)
                return torch.sigmoid(y) if s["heads"] in ("occupancy", "rgb") else y
            density = self.sigma(h)
            density = F.relu(density) if s["density"] == "relu" else F.softplus(density)
            f = self.feat(h)
            if self.dirs is not None:  # the viewing direction: the point's own unit vector, encoded
                f = torch.cat([f, self.dirs(F.normalize(x, dim=-1))], -1)
            return torch.cat([self.rgb(f), density], -1)
    return Implicit()


def _build_tasnet(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    n, b, h, sk, k = s["enc"], s["bottleneck"], s["hidden"], s["skip"], s["dw_k"]

    class Norm(nn.Module):
        """Global layer norm (mean and variance over channels and time) or a per-frame channel norm, written out:
        ReduceMean, Sub, Pow/Mul, ReduceMean, Add, Sqrt, Div, gamma and beta per channel."""
        def __init__(self, c):
            super().__init__()
            self.dims = (1, 2) if s["norm"] == "gln" else (1,)
            self.gamma, self.beta = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

        def forward(self, x):
            m = x.mean(self.dims, keepdim=True)
            v = ((x - m) ** 2).mean(self.dims, keepdim=True)
            return (x - m) / torch.sqrt(v + 1e-8) * self.gamma[:, None] + self.beta[:, None]

    def prelu(c):
        return nn.PReLU(c if s["prelu"] == "channel" else 1)

    class Block(nn.Module):
        """1x1 conv B -> H, PReLU, norm, depthwise conv of kernel 3 and dilation d (same padding, or a left Pad when
        causal), PReLU, norm; a 1x1 conv back to B added to x, and one to the skip path."""
        def __init__(self, d):
            super().__init__()
            self.pad = d * (k - 1)
            self.c1, self.a1, self.n1 = nn.Conv1d(b, h, 1), prelu(h), Norm(h)
            self.dw = nn.Conv1d(h, h, k, padding=0 if s["causal"] else self.pad // 2, dilation=d, groups=h)
            self.a2, self.n2 = prelu(h), Norm(h)
            self.res = nn.Conv1d(h, b, 1)
            self.skip = nn.Conv1d(h, sk, 1) if sk else None

        def forward(self, x):
            y = self.n1(self.a1(self.c1(x)))
            if s["causal"]:
                y = F.pad(y, (self.pad, 0))
            y = self.n2(self.a2(self.dw(y)))
            return x + self.res(y), (self.skip(y) if self.skip is not None else None)

    class TasNet(nn.Module):
        """[B, 1, T] -> Conv1d(1, N, L, stride L / 2) + ReLU = w -> norm, 1x1 conv to B -> R x X blocks (dilation
        2^x) -> (the skips' sum) -> PReLU, 1x1 conv to sources x N, Sigmoid/ReLU masks x w -> ConvTranspose1d(N, 1,
        L, stride L / 2) per source: [B, sources, (T' - 1) L / 2 + L]."""
        def __init__(self):
            super().__init__()
            self.encoder = nn.Conv1d(1, n, s["kernel"], s["stride"], bias=False)
            self.norm, self.bottleneck = Norm(n), nn.Conv1d(n, b, 1)
            self.blocks = nn.ModuleList([Block(2 ** x) for _ in range(s["repeats"]) for x in range(s["blocks"])])
            self.out_act, self.mask = prelu(sk or b), nn.Conv1d(sk or b, s["sources"] * n, 1)
            dec = lambda: nn.ConvTranspose1d(n, 1, s["kernel"], s["stride"], bias=False)  # noqa: E731
            self.dec = dec() if s["decoder"] == "shared" else nn.ModuleList([dec() for _ in range(s["sources"])])

        def forward(self, x):
            bs = x.shape[0]
            w = F.relu(self.encoder(x))                                      # [B, N, T']
            y, skips = self.bottleneck(self.norm(w)), None
            for blk in self.blocks:
                y, sy = blk(y)
                if sy is not None:
                    skips = sy if skips is None else skips + sy
            m = self.mask(self.out_act(skips if sk else y))
            m = torch.sigmoid(m) if s["mask"] == "sigmoid" else F.relu(m)
            masked = m.reshape(bs, s["sources"], n, -1) * w.unsqueeze(1)     # [B, sources, N, T']
            if s["decoder"] == "shared":
                return self.dec(masked.reshape(bs * s["sources"], n, -1)).reshape(bs, s["sources"], -1)
            return torch.cat([d(masked[:, i]) for i, d in enumerate(self.dec)], 1)
    return TasNet()


def _build_hrnet(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    n = s["stages"]
    c = [s["width"] << i for i in range(n)]

    def cbr(ci, co, k=3, stride=1, relu=True):
        layers = [nn.Conv2d(ci, co, k, stride, k // 2, bias=False), nn.BatchNorm2d(co)]
        return nn.Sequential(*layers, nn.ReLU()) if relu else nn.Sequential(*layers)

    def up(f):
        return nn.Upsample(scale_factor=f, mode=s["up"], **({"align_corners": False} if s["up"] == "bilinear" else {}))

    def add(ts):
        y = ts[0]
        for t in ts[1:]:
            y = y + t
        return y

    class Bottleneck(nn.Module):
        """1x1 conv to p, 3x3, 1x1 to co (BN after each), + the input (a 1x1 conv-BN when the width changes), ReLU."""
        def __init__(self, ci, p, co):
            super().__init__()
            self.body = nn.Sequential(cbr(ci, p, 1), cbr(p, p), cbr(p, co, 1, relu=False))
            self.short = cbr(ci, co, 1, relu=False) if ci != co else nn.Identity()

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    class Basic(nn.Module):
        """3x3 conv-BN-ReLU, 3x3 conv-BN, + the input, ReLU."""
        def __init__(self, ch):
            super().__init__()
            self.body = nn.Sequential(cbr(ch, ch), cbr(ch, ch, relu=False))

        def forward(self, x):
            return F.relu(self.body(x) + x)

    class Module(nn.Module):
        """k branches of `blocks` blocks each, then the fusion: output i = ReLU(sum over branches j of x_j (j = i),
        1x1 conv-BN + Resize x 2^(j - i) (j > i), or i - j stride-2 3x3 conv-BN(-ReLU) (j < i))."""
        def __init__(self, k, outs):
            super().__init__()
            blk = (lambda ch: Basic(ch)) if s["block"] == "basic" else (lambda ch: Bottleneck(ch, ch // 2, ch))
            self.branches = nn.ModuleList([nn.Sequential(*[blk(c[i]) for _ in range(s["blocks"])]) for i in range(k)])
            self.fuse = nn.ModuleList()
            for i in range(outs):
                row = nn.ModuleList()
                for j in range(k):
                    if j == i:
                        row.append(nn.Identity())
                    elif j > i:
                        row.append(nn.Sequential(cbr(c[j], c[i], 1, relu=False), up(2 ** (j - i))))
                    else:
                        row.append(nn.Sequential(*[cbr(c[j], c[i] if t == i - j - 1 else c[j], 3, 2, t < i - j - 1)
                                                   for t in range(i - j)]))
                self.fuse.append(row)

        def forward(self, xs):
            xs = [b(x) for b, x in zip(self.branches, xs)]
            return [F.relu(add([op(x) for op, x in zip(row, xs)])) for row in self.fuse]

    class HRNet(nn.Module):
        """[B, 3, H, W] -> stem to 1/4 -> stage 1 -> transition to 2 branches -> stages (each: modules, then a new
        branch by a stride-2 3x3 conv from the lowest) -> head: cls [B, classes], pose or seg [B, classes, H/4,
        W/4]."""
        def __init__(self):
            super().__init__()
            sw, w1 = s["stem_w"], s["stage1_w"]
            self.stem = nn.Sequential(cbr(3, sw, 3, 2), cbr(sw, sw, 3, 2))
            self.layer1 = nn.Sequential(*[Bottleneck(sw if i == 0 else w1, w1 // 4, w1)
                                          for i in range(s["stage1_blocks"])])
            self.trans1 = nn.ModuleList([cbr(w1, c[0]), cbr(w1, c[1], 3, 2)])
            self.stages, self.trans = nn.ModuleList(), nn.ModuleList()
            for k in range(2, n + 1):
                m = s["modules"][k - 2]
                self.stages.append(nn.ModuleList([Module(k, 1 if k == n and i == m - 1 and s["head"] == "pose" else k)
                                                  for i in range(m)]))
                if k < n:
                    self.trans.append(cbr(c[k - 1], c[k], 3, 2))
            if s["head"] == "cls":  # HRNet-C: a bottleneck per branch to 128-1024, stride-2 convs adding downwards
                q = [32, 64, 128, 256][:n]
                self.incre = nn.ModuleList([Bottleneck(c[i], q[i], 4 * q[i]) for i in range(n)])
                self.downs = nn.ModuleList([cbr(4 * q[i], 4 * q[i + 1], 3, 2) for i in range(n - 1)])
                self.final, self.fc = cbr(4 * q[-1], s["head_w"], 1), nn.Linear(s["head_w"], s["classes"])
            elif s["head"] == "pose":
                self.out = nn.Conv2d(c[0], s["classes"], 1)
            else:
                self.ups = nn.ModuleList([up(2 ** i) for i in range(1, n)])
                self.out = nn.Sequential(cbr(sum(c), sum(c), 1), nn.Conv2d(sum(c), s["classes"], 1))

        def forward(self, x):
            x = self.layer1(self.stem(x))
            xs = [t(x) for t in self.trans1]
            for k, mods in enumerate(self.stages):
                for mod in mods:
                    xs = mod(xs)
                if k < len(self.trans):
                    xs = xs + [self.trans[k](xs[-1])]
            if s["head"] == "cls":
                y = self.incre[0](xs[0])
                for i in range(1, n):
                    y = self.incre[i](xs[i]) + self.downs[i - 1](y)
                return self.fc(F.adaptive_avg_pool2d(self.final(y), 1).flatten(1))
            if s["head"] == "pose":
                return self.out(xs[0])
            return self.out(torch.cat([xs[0]] + [u(y) for u, y in zip(self.ups, xs[1:])], 1))
    return HRNet()


def _build_raft(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    h = size // 8
    hd, cd, fd, rad, nl = s["hdim"], s["cdim"], s["fdim"], s["radius"], s["levels"]
    k = (2 * rad + 1) ** 2
    dims = [h >> i for i in range(nl)]  # the correlation pyramid's (or the pooled features') side per level

    def norm(ch, kind):
        if kind == "instance":
            return nn.InstanceNorm2d(ch)
        return nn.BatchNorm2d(ch) if kind == "batch" else nn.GroupNorm(8, ch)

    class Res(nn.Module):
        """RAFT's ResidualBlock: 3x3 conv (stride), norm, ReLU, 3x3 conv, norm, ReLU, + the input (a 1x1 conv and
        norm when the shape changes), ReLU."""
        def __init__(self, ci, co, stride, kind):
            super().__init__()
            self.c1, self.n1 = nn.Conv2d(ci, co, 3, stride, 1), norm(co, kind)
            self.c2, self.n2 = nn.Conv2d(co, co, 3, 1, 1), norm(co, kind)
            self.down = nn.Sequential(nn.Conv2d(ci, co, 1, stride), norm(co, kind)) if ci != co else None

        def forward(self, x):
            y = F.relu(self.n2(self.c2(F.relu(self.n1(self.c1(x))))))
            return F.relu((x if self.down is None else self.down(x)) + y)

    def encoder(out, kind):
        """7x7 stride-2 conv, norm, ReLU; three stages of residual blocks (the 2nd and 3rd from a stride 2) to 1/8;
        a 1x1 conv to `out`."""
        w = s["enc_w"]
        layers, ci = [nn.Conv2d(3, w[0], 7, 2, 3), norm(w[0], kind), nn.ReLU()], w[0]
        for i, co in enumerate(w):
            for b in range(s["enc_blocks"]):
                layers.append(Res(ci, co, 2 if b == 0 and i > 0 else 1, kind))
                ci = co
        return nn.Sequential(*layers, nn.Conv2d(ci, out, 1))

    class GRU(nn.Module):
        """ConvGRU (3x3) or SepConvGRU (1x5 then 5x1): z, r = Sigmoid(conv[h, x]), q = Tanh(conv[r h, x]),
        h = (1 - z) h + z q."""
        def __init__(self, xd):
            super().__init__()
            ks = [(3, 3)] if s["gru"] == "conv" else [(1, 5), (5, 1)]
            self.passes = nn.ModuleList([nn.ModuleList([nn.Conv2d(hd + xd, hd, kk, padding=(kk[0] // 2, kk[1] // 2))
                                                        for _ in range(3)]) for kk in ks])

        def forward(self, hh, x):
            for cz, cr, cq in self.passes:
                hx = torch.cat([hh, x], 1)
                z, r = torch.sigmoid(cz(hx)), torch.sigmoid(cr(hx))
                hh = (1 - z) * hh + z * torch.tanh(cq(torch.cat([r * hh, x], 1)))
            return hh

    class Update(nn.Module):
        """Motion encoder (1x1 + 3x3 convs on the correlation, 7x7 + 3x3 on the flow, a 3x3 conv, the flow
        concatenated), the GRU on [context, motion], a flow head (3x3 conv, ReLU, 3x3 conv to 2)."""
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(nl * k, 2 * hd, 1), nn.Conv2d(2 * hd, 3 * hd // 2, 3, padding=1)
            self.f1, self.f2 = nn.Conv2d(2, hd, 7, padding=3), nn.Conv2d(hd, hd // 2, 3, padding=1)
            self.conv = nn.Conv2d(2 * hd, hd - 2, 3, padding=1)
            self.gru = GRU(cd + hd)
            self.head = nn.Sequential(nn.Conv2d(hd, 2 * hd, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(2 * hd, 2, 3, padding=1))

        def forward(self, net, inp, corr, flow):
            cr = F.relu(self.c2(F.relu(self.c1(corr))))
            fl = F.relu(self.f2(F.relu(self.f1(flow))))
            motion = torch.cat([F.relu(self.conv(torch.cat([cr, fl], 1))), flow], 1)
            net = self.gru(net, torch.cat([inp, motion], 1))
            return net, self.head(net)

    class RAFT(nn.Module):
        """[B, 6, H, W] (two frames) -> features of both frames in one batch, context of frame 1 (tanh hidden, ReLU
        input) -> correlation -> `iters` updates of the flow at 1/8 -> upsampled: [B, 2, H, W]."""
        def __init__(self):
            super().__init__()
            self.fnet = encoder(fd, s["norm"])
            self.cnet = (encoder(hd + cd, "batch") if s["context"] == "separate"
                         else nn.Conv2d(fd, hd + cd, 3, padding=1))
            self.update = Update()
            if s["up"] == "convex":
                self.mask = nn.Sequential(nn.Conv2d(hd, 256, 3, padding=1), nn.ReLU(), nn.Conv2d(256, 64 * 9, 1))
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(h), indexing="ij")
            self.register_buffer("coords0", torch.stack([xs, ys]).float()[None], persistent=False)   # [1, 2, h, w]
            d = torch.arange(-rad, rad + 1).float()
            dy, dx = torch.meshgrid(d, d, indexing="ij")
            self.register_buffer("delta", torch.stack([dx, dy], -1).reshape(1, 1, k, 2), persistent=False)
            for i, n_ in enumerate(dims):  # pixels -> GridSample's [-1, 1] (align_corners)
                self.register_buffer(f"scale{i}", torch.tensor([2.0 / (n_ - 1)] * 2), persistent=False)

        def lookup(self, pyramid, coords):
            """The (2r + 1)^2 window around coords (x, y in 1/8 pixels) in each level, bilinear, zeros outside:
            [B, levels x (2r + 1)^2, h, w]."""
            cs = coords.permute(0, 2, 3, 1).reshape(-1, h * h, 1, 2)
            out = []
            for i, (corr, n_) in enumerate(zip(pyramid, dims)):
                p = cs / 2 ** i + self.delta                                    # [B, hw, K, 2] pixels of level i
                if s["lookup"] == "grid_sample":
                    g = (p * getattr(self, f"scale{i}") - 1).reshape(-1, 2 * rad + 1, 2 * rad + 1, 2)
                    v = F.grid_sample(corr, g, mode="bilinear", padding_mode="zeros", align_corners=True)
                    out.append(v.reshape(-1, h * h, k))
                    continue
                p0 = torch.floor(p)
                frac = p - p0
                idx, wts = [], []
                for ox, oy in ((0, 0), (1, 0), (0, 1), (1, 1)):
                    cx, cy = p0[..., 0] + ox, p0[..., 1] + oy
                    wx = frac[..., 0] if ox else 1 - frac[..., 0]
                    wy = frac[..., 1] if oy else 1 - frac[..., 1]
                    inside = (cx >= 0) & (cx <= n_ - 1) & (cy >= 0) & (cy <= n_ - 1)
                    idx.append(cy.clamp(0, n_ - 1) * n_ + cx.clamp(0, n_ - 1))
                    wts.append(wx * wy * inside.float())
                v = torch.gather(corr.reshape(-1, h * h, n_ * n_), 2, torch.cat(idx, -1).long())   # [B, hw, 4K]
                out.append((v * torch.cat(wts, -1)).reshape(-1, h * h, 4, k).sum(2))
            return torch.cat(out, -1).transpose(1, 2).reshape(-1, nl * k, h, h)

        def local(self, f1, f2):
            """A cost volume per level: the mean over channels of f1 x f2 shifted by each displacement within the
            radius (zero-padded slices), levels by AvgPool of both features, Resized back to 1/8."""
            out = []
            for i, n_ in enumerate(dims):
                a, b = (f1, f2) if i == 0 else (F.avg_pool2d(f1, 2 ** i), F.avg_pool2d(f2, 2 ** i))
                bp = F.pad(b, (rad, rad, rad, rad))
                c = torch.cat([(a * bp[:, :, dy:dy + n_, dx:dx + n_]).mean(1, keepdim=True)
                               for dy in range(2 * rad + 1) for dx in range(2 * rad + 1)], 1)
                out.append(c if i == 0 else F.interpolate(c, size=(h, h), mode="bilinear", align_corners=False))
            return torch.cat(out, 1)

        def forward(self, x):
            f1, f2 = self.fnet(torch.cat([x[:, :3], x[:, 3:]], 0)).chunk(2, 0)  # [B, fd, h, w] each
            ctx = self.cnet(x[:, :3] if s["context"] == "separate" else f1)
            net, inp = torch.tanh(ctx[:, :hd]), F.relu(ctx[:, hd:])
            if s["corr"] == "allpairs":
                corr = f1.flatten(2).transpose(1, 2) @ f2.flatten(2) / math.sqrt(fd)   # [B, hw, hw]
                pyramid = [corr.reshape(-1, 1, h, h)]
                for _ in range(nl - 1):
                    pyramid.append(F.avg_pool2d(pyramid[-1], 2, 2))
            else:
                static = self.local(f1, f2)
            flow = torch.zeros_like(net[:, :2])
            for _ in range(s["iters"]):
                corr = self.lookup(pyramid, self.coords0 + flow) if s["corr"] == "allpairs" else static
                net, delta = self.update(net, inp, corr, flow)
                flow = flow + delta
            if s["up"] == "bilinear":
                return 8 * F.interpolate(flow, scale_factor=8, mode="bilinear", align_corners=True)
            mask = (0.25 * self.mask(net)).reshape(-1, 1, 9, 8, 8, h, h).softmax(2)
            fp = F.pad(8 * flow, (1, 1, 1, 1))
            nb = torch.stack([fp[:, :, dy:dy + h, dx:dx + h] for dy in range(3) for dx in range(3)], 2)
            up = (mask * nb[:, :, :, None, None]).sum(2)                          # [B, 2, 8, 8, h, w]
            return up.permute(0, 1, 4, 2, 5, 3).reshape(-1, 2, 8 * h, 8 * h)
    return RAFT()


def _build_fttransformer(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    nf, d, nh = size, s["d"], s["heads"]
    dh = d // nh

    class Embed(nn.Module):
        """[B, F] -> [B, F, d]: x[..., None] * W + b per feature (ReLU after or not), or periodic: Cos, Sin of
        2 pi x c (c: [F, k] frequencies), a per-feature Linear ([F, B, 2k] @ [F, 2k, d]), ReLU."""
        def __init__(self):
            super().__init__()
            self.periodic = s["embed"] == "periodic"
            if self.periodic:
                self.freq = nn.Parameter(torch.empty(nf, s["frequencies"]))
                self.w = nn.Parameter(torch.empty(nf, 2 * s["frequencies"], d))
            else:
                self.w = nn.Parameter(torch.empty(nf, d))
            self.b = nn.Parameter(torch.empty(nf, d))

        def forward(self, x):
            if self.periodic:
                v = 2 * math.pi * x[..., None] * self.freq
                v = torch.cat([torch.cos(v), torch.sin(v)], -1).transpose(0, 1)     # [F, B, 2k]
                return F.relu((v @ self.w).transpose(0, 1) + self.b)
            t = x[..., None] * self.w + self.b
            return F.relu(t) if s["embed"] == "linear_relu" else t

    class Attn(nn.Module):
        """Multi-head attention, q/k/v by separate Linears or one fused, manual Softmax or SDPA, a Linear out; the
        queries may be fewer than the keys (the CLS token alone)."""
        def __init__(self):
            super().__init__()
            if s["qkv"] == "fused":
                self.qkv = nn.Linear(d, 3 * d)
            else:
                self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.out = nn.Linear(d, d)

        def forward(self, y, cls_only):
            if s["qkv"] == "fused":
                q, kk, v = self.qkv(y).chunk(3, -1)
                if cls_only:
                    q = q[:, -1:]
            else:
                q, kk, v = self.q(y[:, -1:] if cls_only else y), self.k(y), self.v(y)
            q, kk, v = [t.reshape(t.shape[0], t.shape[1], nh, dh).transpose(1, 2) for t in (q, kk, v)]
            if s["attn"] == "sdpa":
                o = F.scaled_dot_product_attention(q, kk, v)
            else:
                o = ((q @ kk.transpose(-2, -1)) * dh ** -0.5).softmax(-1) @ v
            return self.out(o.transpose(1, 2).reshape(o.shape[0], o.shape[2], d))

    class FFN(nn.Module):
        """ReGLU / GEGLU (a Linear to 2 d_ffn, a * act(b)) or GELU, a Linear back to d."""
        def __init__(self):
            super().__init__()
            glu = s["ffn"] != "gelu"
            self.inp, self.out = nn.Linear(d, (2 if glu else 1) * s["d_ffn"]), nn.Linear(s["d_ffn"], d)

        def forward(self, x):
            y = self.inp(x)
            if s["ffn"] == "gelu":
                return self.out(F.gelu(y))
            a, b = y.chunk(2, -1)
            return self.out(a * (F.relu(b) if s["ffn"] == "reglu" else F.gelu(b)))

    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.n1 = nn.LayerNorm(d) if i > 0 or s["first_norm"] else nn.Identity()
            self.attn, self.n2, self.ffn = Attn(), nn.LayerNorm(d), FFN()
            self.cls_only = s["cls_only_last"] and i == s["layers"] - 1

        def forward(self, x):
            y = self.n1(x)
            x = (x[:, -1:] if self.cls_only else x) + self.attn(y, self.cls_only)
            return x + self.ffn(self.n2(x))

    class FTT(nn.Module):
        """[B, F] -> tokens [B, F, d] + a CLS token at the end -> layers -> LayerNorm, ReLU, Linear on the CLS
        token: [B, classes]."""
        def __init__(self):
            super().__init__()
            self.embed, self.cls = Embed(), nn.Parameter(torch.empty(1, 1, d))
            self.blocks = nn.ModuleList([Block(i) for i in range(s["layers"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.embed(x)
            t = torch.cat([t, self.cls.expand(t.shape[0], 1, d)], 1)
            for blk in self.blocks:
                t = blk(t)
            return self.head(F.relu(self.norm(t[:, -1])))
    return FTT()


def _build_vqvae(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    w, D, K = s["width"], s["code_dim"], s["codes"]
    chans = [w * min(i + 1, 2) for i in range(s["downs"])]       # w, 2w, 2w

    class Res(nn.Module):
        """x + conv1x1(ReLU(conv3x3(ReLU(x)))), hidden w."""
        def __init__(self, c):
            super().__init__()
            self.a, self.b = nn.Conv2d(c, w, 3, padding=1), nn.Conv2d(w, c, 1)

        def forward(self, x):
            return x + self.b(F.relu(self.a(F.relu(x))))

    class VQ(nn.Module):
        """z [B, D, h, w] -> its nearest codes: |z|^2 - 2 z E^T + |E|^2, ArgMin, then E[idx] (Gather) or a one-hot
        (Equal with the code indices, Cast) times E."""
        def __init__(self):
            super().__init__()
            self.codebook = nn.Parameter(torch.empty(K, D))
            self.register_buffer("ids", torch.arange(K), persistent=False)

        def forward(self, z):
            b, d, h, ww = z.shape
            f = z.permute(0, 2, 3, 1).reshape(b, h * ww, d)
            e = self.codebook
            dist = (f * f).sum(-1, keepdim=True) - 2 * f @ e.t() + (e * e).sum(-1)
            idx = dist.argmin(-1)
            q = e[idx] if s["quant"] == "gather" else (idx[..., None] == self.ids).to(f.dtype) @ e
            return q.reshape(b, h, ww, d).permute(0, 3, 1, 2)

    pad = 1
    enc, c = [], 3
    for co in chans:
        enc += [nn.Conv2d(c, co, s["down_k"], stride=2, padding=pad), nn.ReLU()]
        c = co
    enc += [Res(c) for _ in range(s["res_blocks"])] + [nn.ReLU(), nn.Conv2d(c, D, 1)]
    dec = [nn.Conv2d(D, c, 3, padding=1)] + [Res(c) for _ in range(s["res_blocks"])] + [nn.ReLU()]
    for co in list(reversed(chans))[1:] + [w]:
        if s["up"] == "convT":
            dec += [nn.ConvTranspose2d(c, co, 4, stride=2, padding=1), nn.ReLU()]
        else:
            dec += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c, co, 3, padding=1), nn.ReLU()]
        c = co
    dec += [nn.Conv2d(c, 3, 3, padding=1), nn.Tanh() if s["out_act"] == "tanh" else nn.Sigmoid()]
    return nn.Sequential(nn.Sequential(*enc), VQ(), nn.Sequential(*dec))


def _build_capsnet(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    n_in, C, O, P = _caps_n(s, size), s["classes"], s["out_dim"], s["prim_dim"]

    def squash(v):
        n2 = (v * v).sum(-1, keepdim=True)
        return n2 / (1 + n2) * v / torch.sqrt(n2 + 1e-8)

    class Caps(nn.Module):
        """conv -> primary capsules [B, N, P] squashed -> u_hat [B, N, C, O] by a MatMul batched over N ->
        routing: c = Softmax(b) over classes, s = sum_n c u_hat, v = squash(s), b += u_hat . v -> |v| [B, C]."""
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(s["in_ch"], s["conv_ch"], s["conv_k"], stride=s["conv_stride"])
            self.prim = nn.Conv2d(s["conv_ch"], s["prim_caps"] * P, s["prim_k"], stride=2)
            self.W = nn.Parameter(torch.empty(n_in, C * O, P))
            if s["decoder"]:
                self.register_buffer("ids", torch.arange(C), persistent=False)
                self.dec = nn.Sequential(nn.Linear(C * O, 512), nn.ReLU(), nn.Linear(512, 1024), nn.ReLU(),
                                         nn.Linear(1024, s["in_ch"] * size * size), nn.Sigmoid())

        def forward(self, x):
            b = x.shape[0]
            p = self.prim(F.relu(self.conv(x)))                        # [B, caps * P, h, w]
            u = squash(p.reshape(b, s["prim_caps"], P, -1).permute(0, 1, 3, 2).reshape(b, n_in, P))
            u_hat = (self.W @ u.permute(1, 2, 0)).permute(2, 0, 1).reshape(b, n_in, C, O)
            logits = torch.zeros(b, n_in, C, dtype=x.dtype)
            for i in range(s["iters"]):
                c = logits.softmax(-1)
                v = squash((c[..., None] * u_hat).sum(1))              # [B, C, O]
                if i < s["iters"] - 1:
                    logits = logits + (u_hat * v[:, None]).sum(-1)
            length = torch.sqrt((v * v).sum(-1) + 1e-8)
            if not s["decoder"]:
                return length
            mask = (length.argmax(-1, keepdim=True) == self.ids).to(x.dtype)
            return torch.cat([length, self.dec((v * mask[..., None]).reshape(b, C * O))], 1)
    return Caps()


def _build_kan(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    G, k = s["grid"], s["order"]

    class KANLayer(nn.Module):
        """y = basis(x).flatten @ W_spline (+ Linear(SiLU(x))): basis is a B-spline of order k on a uniform grid of
        G intervals over [-1, 1] (Cox-de Boor: the order-0 indicators, then k rounds of the two-term recursion),
        G + k functions an input; or G Gaussian radial functions over [-2, 2]."""
        def __init__(self, fin, fout):
            super().__init__()
            if s["basis"] == "bspline":
                h = 2.0 / G
                knots = torch.arange(-k, G + k + 1, dtype=torch.float32) * h - 1.0
                self.register_buffer("t", knots.expand(fin, -1).contiguous(), persistent=False)
                nb = G + k
            else:
                self.register_buffer("c", torch.linspace(-2.0, 2.0, G), persistent=False)
                nb = G
            self.spline = nn.Parameter(torch.empty(fin * nb, fout))
            self.base = nn.Linear(fin, fout) if s["base"] == "silu" else None

        def basis(self, x):
            if s["basis"] == "rbf":
                return torch.exp(-((x[..., None] - self.c) * (G - 1) / 4.0) ** 2)
            x, t = x[..., None], self.t
            b = ((x >= t[:, :-1]) & (x < t[:, 1:])).to(x.dtype)
            for p in range(1, k + 1):
                b = ((x - t[:, :-(p + 1)]) / (t[:, p:-1] - t[:, :-(p + 1)]) * b[..., :-1]
                     + (t[:, p + 1:] - x) / (t[:, p + 1:] - t[:, 1:-p]) * b[..., 1:])
            return b

        def forward(self, x):
            y = self.basis(x).reshape(x.shape[0], -1) @ self.spline
            return y + self.base(F.silu(x)) if self.base is not None else y

    dims = [size] + s["widths"] + [s["classes"]]
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        if s["norm"] or s["basis"] == "rbf":   # FastKAN normalises before its radial functions
            layers.append(nn.LayerNorm(a))
        layers.append(KANLayer(a, b))
    return nn.Sequential(*layers)


def _build_nascell(s):
    import torch.nn as nn

    def rcb(c, k, dilation=1):   # ReLU-Conv-BN, NAS-Bench-201's conv op
        return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, k, 1, dilation * (k // 2), dilation=dilation, bias=False),
                             nn.BatchNorm2d(c))

    def edge_op(name, c):
        if name == "skip":
            return nn.Identity()
        if name in ("conv1x1", "conv3x3"):
            return rcb(c, int(name[4]))
        if name == "avgpool3x3":
            return nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        if name == "maxpool3x3":
            return nn.MaxPool2d(3, 1, 1)
        if name == "dil3x3":
            return rcb(c, 3, dilation=2)
        # sep3x3 (DARTS): ReLU, depthwise 3x3, pointwise 1x1, BN, twice
        return nn.Sequential(*[m for _ in range(2) for m in (nn.ReLU(), nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False),
                                                             nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))])

    class Cell(nn.Module):
        """node j = sum of op_ij(node i) over i < j with op_ij not 'none'; a node with no input is left out."""
        def __init__(self, c):
            super().__init__()
            self.ops = nn.ModuleDict({e: edge_op(o, c) for e, o in s["edges"].items() if o != "none"})

        def forward(self, x):
            nodes = [x]
            for j in range(1, 4):
                ins = [self.ops[f"{i}{j}"](nodes[i]) for i in range(j)
                       if f"{i}{j}" in self.ops and nodes[i] is not None]
                nodes.append(sum(ins[1:], ins[0]) if ins else None)
            return nodes[3]

    class Reduce(nn.Module):   # NAS-Bench-201's residual block between stages: stride 2, widths doubling
        def __init__(self, cin, cout):
            super().__init__()
            self.a, self.b = nn.Sequential(nn.ReLU(), nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout)), \
                rcb(cout, 3)
            self.short = nn.Sequential(nn.AvgPool2d(2, 2), nn.Conv2d(cin, cout, 1, bias=False))

        def forward(self, x):
            return self.b(self.a(x)) + self.short(x)

    c = s["stem_w"]
    layers = [nn.Conv2d(3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)]
    for stage in range(3):
        if stage:
            layers.append(Reduce(c, 2 * c))
            c *= 2
        layers += [Cell(c) for _ in range(s["cells"])]
    layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, s["classes"])]
    return nn.Sequential(*layers)


def _build_neuralode(s, size):
    import torch
    import torch.nn as nn
    act = {"tanh": nn.Tanh, "softplus": nn.Softplus, "relu": nn.ReLU, "silu": nn.SiLU}[s["act"]]
    d, steps = s["dim"], s["steps"]

    class Field(nn.Module):
        """dz/dt = MLP([z, t]) (t a constant column when the field is time-dependent)."""
        def __init__(self):
            super().__init__()
            dims = [d + int(s["time"])] + s["hidden"]
            mods = [m for a, b in zip(dims[:-1], dims[1:]) for m in (nn.Linear(a, b), act())]
            self.mlp = nn.Sequential(*mods, nn.Linear(dims[-1], d))

        def forward(self, z, t: float):
            if s["time"]:
                z = torch.cat([z, torch.full_like(z[:, :1], t)], dim=1)
            return self.mlp(z)

    class ODENet(nn.Module):
        def __init__(self):
            super().__init__()
            self.lift, self.f, self.head = nn.Linear(size, d), Field(), nn.Linear(d, s["classes"])

        def forward(self, x):
            z, h = self.lift(x), 1.0 / steps
            for n in range(steps):   # unrolled: every step's field evaluations are nodes of their own
                t = n * h
                if s["solver"] == "euler":
                    z = z + h * self.f(z, t)
                elif s["solver"] == "midpoint":
                    z = z + h * self.f(z + 0.5 * h * self.f(z, t), t + 0.5 * h)
                else:
                    k1 = self.f(z, t)
                    k2 = self.f(z + 0.5 * h * k1, t + 0.5 * h)
                    k3 = self.f(z + 0.5 * h * k2, t + 0.5 * h)
                    k4 = self.f(z + h * k3, t + h)
                    z = z + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
            return self.head(z)

    return ODENet()


def _patch_token_net(s, d, block):
    """An image as patch tokens (a patch-sized conv to width d), s["depth"] of `block`, LayerNorm, the mean over the
    tokens, a Linear to s["classes"] (gmlp, xcit)."""
    import torch.nn as nn

    class PatchTokenNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, d, s["patch"], s["patch"])
            self.blocks = nn.Sequential(*[block() for _ in range(s["depth"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            x = self.stem(x).flatten(2).transpose(1, 2)
            return self.head(self.norm(self.blocks(x)).mean(dim=1))

    return PatchTokenNet()


def _build_gmlp(s, size):
    import torch
    import torch.nn as nn
    d, f, T = s["dim"], s["d_ffn"], (size // s["patch"]) ** 2

    class SGU(nn.Module):
        """Spatial gating: u * W_T(LayerNorm(v)) (+ a tiny attention's output, aMLP)."""
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(f // 2)
            self.proj = nn.Linear(T, T) if s["spatial"] == "linear" else nn.Conv1d(T, T, 1)

        def forward(self, x, extra=None):
            u, v = x.chunk(2, dim=-1)
            v = self.norm(v)
            v = self.proj(v.transpose(1, 2)).transpose(1, 2) if s["spatial"] == "linear" else self.proj(v)
            return u * (v + extra if extra is not None else v)

    class TinyAttn(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.qkv, self.out, self.scale = nn.Linear(d, 3 * a), nn.Linear(a, f // 2), a ** -0.5

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            return self.out(torch.softmax(q @ k.transpose(1, 2) * self.scale, dim=-1) @ v)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.fc1, self.act = nn.LayerNorm(d), nn.Linear(d, f), nn.GELU()
            self.sgu, self.fc2 = SGU(), nn.Linear(f // 2, d)
            self.attn = TinyAttn(s["tiny_attn"]) if s["tiny_attn"] else None

        def forward(self, x):
            y = self.norm(x)
            extra = self.attn(y) if self.attn is not None else None
            return x + self.fc2(self.sgu(self.act(self.fc1(y)), extra))

    return _patch_token_net(s, d, Block)


def _build_xcit(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    d, h, side = s["dim"], s["heads"], size // s["patch"]

    class XCA(nn.Module):
        """Cross-covariance attention: a D_h x D_h map per head over L2-normalised q and k (tokens on the last axis)."""
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.temperature = nn.Parameter(torch.ones(h, 1, 1))

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).reshape(B, T, 3, h, d // h).permute(2, 0, 3, 4, 1).unbind(0)   # [B, h, D_h, T]
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            attn = torch.softmax(q @ k.transpose(-2, -1) * self.temperature, dim=-1)
            return self.proj((attn @ v).permute(0, 3, 1, 2).reshape(B, T, d))

    class LPI(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.act = nn.Conv2d(d, d, 3, padding=1, groups=d), nn.GELU()
            self.bn, self.c2 = nn.BatchNorm2d(d), nn.Conv2d(d, d, 3, padding=1, groups=d)

        def forward(self, x):
            B, T, _ = x.shape
            y = x.transpose(1, 2).reshape(B, d, side, side)
            return self.c2(self.bn(self.act(self.c1(y)))).reshape(B, d, T).transpose(1, 2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.xca, self.n3 = nn.LayerNorm(d), XCA(), nn.LayerNorm(d)
            if s["lpi"]:
                self.n2, self.local = nn.LayerNorm(d), LPI()
            self.mlp = nn.Sequential(nn.Linear(d, d * s["mlp_ratio"]), nn.GELU(), nn.Linear(d * s["mlp_ratio"], d))

        def forward(self, x):
            x = x + self.xca(self.n1(x))
            if s["lpi"]:
                x = x + self.local(self.n2(x))
            return x + self.mlp(self.n3(x))

    return _patch_token_net(s, d, Block)


def _build_stn(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class SpatialTransformer(nn.Module):
        """A localization CNN regresses an affine map (started at the identity); the grid is the base grid MatMul
        the map's transpose (no AffineGrid op at opset 17), sampled by GridSample."""
        def __init__(self, c, side):
            super().__init__()
            w = s["loc_w"]
            self.loc = nn.Sequential(nn.Conv2d(c, w, 5, padding=2), nn.MaxPool2d(2), nn.ReLU(),
                                     nn.Conv2d(w, w, 3, padding=1), nn.MaxPool2d(2), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(16 * w, 6))
            self.side = side
            ys, xs = torch.meshgrid(torch.linspace(-1, 1, side), torch.linspace(-1, 1, side), indexing="ij")
            self.register_buffer("base", torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(1, side * side, 3))
            self.identity = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]])

        def forward(self, x):
            # small moves around the identity (build_model draws the Linear's weights at random)
            theta = self.loc(x).reshape(-1, 2, 3) * 0.1 + self.identity
            grid = (self.base @ theta.transpose(1, 2)).reshape(-1, self.side, self.side, 2)
            return F.grid_sample(x, grid, mode=s["mode"], padding_mode=s["padding"], align_corners=False)

    class STN(nn.Module):
        def __init__(self):
            super().__init__()
            mods, c, side = [], 3, size
            for i in range(s["transformers"]):
                mods.append(SpatialTransformer(c, side))
                w = s["widths"][i]
                for _ in range(s["layers"]):
                    mods += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU()]
                    c = w
                mods.append(nn.MaxPool2d(2))
                side //= 2
            self.features = nn.Sequential(*mods)
            self.head = nn.Linear(c, s["classes"])

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    return STN()


def _build_aft(s, size):
    import torch
    import torch.nn as nn
    d, T = s["dim"], size

    class AFT(nn.Module):
        """Attention Free Transformer: Sigmoid(q) times a position-weighted average of v with weights exp(k + w)."""
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.w = nn.Parameter(torch.zeros(T, T)) if s["variant"] == "full" else None

        def forward(self, x):
            q, k, v = self.q(x), self.k(x), self.v(x)
            if self.w is None:   # AFT-simple: no position biases, a Softmax over the tokens
                ctx = (torch.softmax(k, dim=1) * v).sum(dim=1, keepdim=True)
                return self.out(torch.sigmoid(q) * ctx)
            ek = torch.exp(k - k.amax(dim=1, keepdim=True))
            ew = torch.exp(self.w - self.w.amax())
            return self.out(torch.sigmoid(q) * (ew @ (ek * v)) / (ew @ ek))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.aft, self.n2 = nn.LayerNorm(d), AFT(), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, d * s["ffn_ratio"]), nn.GELU(), nn.Linear(d * s["ffn_ratio"], d))

        def forward(self, x):
            x = x + self.aft(self.n1(x))
            return x + self.mlp(self.n2(x))

    class AFTNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*[Block() for _ in range(s["depth"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])

        def forward(self, x):
            return self.head(self.norm(self.blocks(x)).mean(dim=1))

    return AFTNet()


def _build_res2net(s):
    import torch
    import torch.nn as nn

    def cbr(ci, co, k=3, stride=1):
        return nn.Sequential(nn.Conv2d(ci, co, k, stride, k // 2, bias=False), nn.BatchNorm2d(co), nn.ReLU())

    class Bottle2neck(nn.Module):
        """1x1 conv to scale x w, split; slice i > 0 gets a 3x3 conv of itself plus the previous output (a strided
        or widening first block: of itself alone, the last slice average-pooled), Concat, 1x1 conv, SE, residual."""
        def __init__(self, ci, w, co, stride, first):
            super().__init__()
            sc = s["scale"]
            self.w, self.first = w, first
            self.reduce = cbr(ci, w * sc, 1)
            self.convs = nn.ModuleList([cbr(w, w, 3, stride) for _ in range(sc - 1)])
            self.pool = nn.AvgPool2d(3, stride, 1) if first else None
            self.expand = nn.Sequential(nn.Conv2d(w * sc, co, 1, bias=False), nn.BatchNorm2d(co))
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(co, max(co // 16, 8), 1), nn.ReLU(),
                                    nn.Conv2d(max(co // 16, 8), co, 1), nn.Sigmoid()) if s["se"] else None
            self.down = (nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))
                         if stride != 1 or ci != co else None)

        def forward(self, x):
            parts = torch.split(self.reduce(x), self.w, dim=1)
            outs, y = [], None
            for i, conv in enumerate(self.convs):
                y = conv(parts[i] if self.first or y is None else parts[i] + y)
                outs.append(y)
            outs.append(self.pool(parts[-1]) if self.first else parts[-1])
            z = self.expand(torch.cat(outs, dim=1))
            if self.se is not None:
                z = z * self.se(z)
            return torch.relu(z + (self.down(x) if self.down is not None else x))

    class Res2Net(nn.Module):
        def __init__(self):
            super().__init__()
            c = s["stem_ch"]
            mods = [cbr(3, c, s["stem"], 2), nn.MaxPool2d(3, 2, 1)]
            for i, n in enumerate(s["blocks"]):
                w = s["width"] * 2 ** i
                co = 32 * s["expansion"] * 2 ** i   # ResNet's widths at expansion 4: 128 to 1024
                for j in range(n):
                    mods.append(Bottle2neck(c, w, co, 2 if (j == 0 and i > 0) else 1, j == 0))
                    c = co
            self.features = nn.Sequential(*mods)
            self.head = nn.Linear(c, s["classes"])

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    return Res2Net()


def _build_hourglass(s):
    import torch.nn as nn
    import torch.nn.functional as F
    c = s["ch"]

    class Residual(nn.Module):
        """Pre-activation bottleneck (BN-ReLU-conv 1x1, 3x3, 1x1 at c/2), identity skip."""
        def __init__(self):
            super().__init__()
            h = c // 2
            self.body = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, h, 1), nn.BatchNorm2d(h), nn.ReLU(),
                                      nn.Conv2d(h, h, 3, padding=1), nn.BatchNorm2d(h), nn.ReLU(), nn.Conv2d(h, c, 1))

        def forward(self, x):
            return x + self.body(x)

    def res():
        return nn.Sequential(*[Residual() for _ in range(s["res_blocks"])])

    class Hourglass(nn.Module):
        def __init__(self, depth):
            super().__init__()
            self.skip, self.down, self.up = res(), res(), res()
            self.inner = Hourglass(depth - 1) if depth > 1 else res()

        def forward(self, x):
            low = self.up(self.inner(self.down(F.max_pool2d(x, 2))))
            return self.skip(x) + F.interpolate(low, scale_factor=2.0, mode="nearest")

    class StackedHourglass(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, c, 7, 2, 3), nn.BatchNorm2d(c), nn.ReLU(), Residual(),
                                      nn.MaxPool2d(2), Residual())
            n = s["stacks"]
            self.hgs = nn.ModuleList([Hourglass(s["depth"]) for _ in range(n)])
            self.feats = nn.ModuleList([nn.Sequential(res(), nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.ReLU())
                                        for _ in range(n)])
            self.heads = nn.ModuleList([nn.Conv2d(c, s["joints"], 1) for _ in range(n)])
            self.merge_f = nn.ModuleList([nn.Conv2d(c, c, 1) for _ in range(n - 1)])
            self.merge_h = nn.ModuleList([nn.Conv2d(s["joints"], c, 1) for _ in range(n - 1)])

        def forward(self, x):
            x = self.stem(x)
            for i, (hg, feat, head) in enumerate(zip(self.hgs, self.feats, self.heads)):
                f = feat(hg(x))
                heat = head(f)
                if i < len(self.merge_f):   # intermediate supervision fed back into the next stack
                    x = x + self.merge_f[i](f) + self.merge_h[i](heat)
            return heat

    return StackedHourglass()


def _build_retnet(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    d, h, T = s["dim"], s["heads"], size
    dh = d // h

    class Retention(nn.Module):
        """Parallel retention: (q k^T / sqrt(d_h) times D) v, D[n, m] = gamma_h^(n - m) for m <= n, else 0 (one
        [h, T, T] mask for all blocks); a GroupNorm per head, a SiLU gate."""
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.g, self.out = (nn.Linear(d, d, bias=False) for _ in range(5))
            self.norm = nn.GroupNorm(h, d)

        def forward(self, x, decay):
            B = x.shape[0]
            q, k, v = (m(x).reshape(B, T, h, dh).transpose(1, 2) for m in (self.q, self.k, self.v))
            r = ((q @ k.transpose(-2, -1)) * (dh ** -0.5) * decay) @ v          # [B, h, T, dh]
            r = self.norm(r.transpose(1, 2).reshape(B * T, d)).reshape(B, T, d)
            return self.out(F.silu(self.g(x)) * r)

    class FFN(nn.Module):
        def __init__(self):
            super().__init__()
            f = d * s["ffn_ratio"]
            self.swiglu = s["ffn"] == "swiglu"
            self.up = nn.Linear(d, 2 * f if self.swiglu else f)
            self.down = nn.Linear(f, d)

        def forward(self, x):
            if self.swiglu:
                a, b = self.up(x).chunk(2, dim=-1)
                return self.down(F.silu(a) * b)
            return self.down(F.gelu(self.up(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.ret, self.n2, self.ffn = nn.LayerNorm(d), Retention(), nn.LayerNorm(d), FFN()

        def forward(self, x, decay):
            x = x + self.ret(self.n1(x), decay)
            return x + self.ffn(self.n2(x))

    class RetNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(s["depth"])])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, s["classes"])
            gamma = 1 - 2.0 ** (-5 - torch.arange(h, dtype=torch.float32))
            n = torch.arange(T, dtype=torch.float32)
            diff = n[:, None] - n[None, :]
            decay = torch.where(diff >= 0, gamma[:, None, None] ** diff.clamp(min=0), torch.zeros(()))
            self.register_buffer("decay", decay / decay.sum(-1, keepdim=True).sqrt())   # [h, T, T], row-scaled

        def forward(self, x):
            for b in self.blocks:
                x = b(x, self.decay)
            return self.head(self.norm(x)[:, -1])

    return RetNet()


def _build_convmixer(s):
    import torch.nn as nn
    d, k = s["dim"], s["k"]

    class Residual(nn.Module):
        def __init__(self, body):
            super().__init__()
            self.body = body

        def forward(self, x):
            return x + self.body(x)

    class ConvMixer(nn.Module):
        """Patch conv (stride = patch), GELU, BN; blocks of Residual(depthwise kxk 'same', GELU, BN) then 1x1 conv,
        GELU, BN; global average pool, Linear."""
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, d, s["patch"], s["patch"]), nn.GELU(), nn.BatchNorm2d(d))
            self.blocks = nn.Sequential(*[nn.Sequential(
                Residual(nn.Sequential(nn.Conv2d(d, d, k, groups=d, padding=k // 2), nn.GELU(), nn.BatchNorm2d(d))),
                nn.Conv2d(d, d, 1), nn.GELU(), nn.BatchNorm2d(d)) for _ in range(s["depth"])])
            self.head = nn.Linear(d, s["classes"])

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))

    return ConvMixer()


def _build_wavenet(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    rc, sc, k = s["res_ch"], s["skip_ch"], s["k"]

    class Layer(nn.Module):
        """Left Pad by (k - 1) x dilation, a dilated Conv1d to 2 x rc split into filter and gate,
        tanh(f) * sigmoid(g); a 1x1 residual conv added to the input (not in the last layer, whose residual output
        nothing reads) and a 1x1 skip conv."""
        def __init__(self, dilation, last):
            super().__init__()
            self.pad = (k - 1) * dilation
            self.conv = nn.Conv1d(rc, 2 * rc, k, dilation=dilation)
            self.res, self.skip = None if last else nn.Conv1d(rc, rc, 1), nn.Conv1d(rc, sc, 1)

        def forward(self, x):
            f, g = self.conv(F.pad(x, (self.pad, 0))).chunk(2, dim=1)
            h = torch.tanh(f) * torch.sigmoid(g)
            return (x if self.res is None else x + self.res(h)), self.skip(h)

    class WaveNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Conv1d(s["c_in"], rc, 1)
            n = s["cycles"] * s["layers"]
            self.layers = nn.ModuleList([Layer(2 ** (j % s["layers"]), j == n - 1) for j in range(n)])
            self.out1, self.out2 = nn.Conv1d(sc, sc, 1), nn.Conv1d(sc, s["out_ch"], 1)

        def forward(self, x):
            x, skips = self.inp(x), None
            for layer in self.layers:
                x, h = layer(x)
                skips = h if skips is None else skips + h
            return self.out2(F.relu(self.out1(F.relu(skips))))

    return WaveNet()


def _t5_buckets(T: int, buckets: int, max_distance: int):
    """T5's bidirectional relative-position buckets of a [T, T] grid (key j minus query i): half the buckets for
    each sign; within a half, exact distances below a quarter of the buckets, then log-spaced up to max_distance."""
    rel = np.arange(T)[None, :] - np.arange(T)[:, None]
    half = buckets // 2
    out = (rel > 0).astype(np.int64) * half
    n = np.abs(rel)
    exact = half // 2
    log_ratio = np.log(np.maximum(n, 1) / exact) / math.log(max_distance / exact)
    large = exact + (log_ratio * (half - exact)).astype(np.int64)
    return out + np.where(n < exact, n, np.minimum(large, half - 1))


def _build_t5enc(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    d, h, T = s["dim"], s["heads"], size
    dh = d // h
    approx = s["gelu"]

    class RelBias(nn.Module):
        """A learned [buckets, heads] table gathered by the constant [T, T] bucket ids: [1, heads, T, T]."""
        def __init__(self, ids):
            super().__init__()
            self.table = nn.Embedding(s["buckets"], h)
            self.ids = ids

        def forward(self):
            return self.table(self.ids).permute(2, 0, 1).unsqueeze(0)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))

        def forward(self, x, bias):
            B = x.shape[0]
            q, k, v = (m(x).reshape(B, T, h, dh).transpose(1, 2) for m in (self.q, self.k, self.v))
            a = torch.softmax(q @ k.transpose(-2, -1) + bias, dim=-1)   # T5: no 1/sqrt(d_h)
            return self.o((a @ v).transpose(1, 2).reshape(B, T, d))

    class GatedGELU(nn.Module):
        def __init__(self):
            super().__init__()
            f = d * s["ffn_ratio"]
            self.wi_0, self.wi_1, self.wo = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False), \
                nn.Linear(f, d, bias=False)

        def forward(self, x):
            return self.wo(F.gelu(self.wi_0(x), approximate=approx) * self.wi_1(x))

    class Block(nn.Module):
        def __init__(self, rel):
            super().__init__()
            self.n1, self.attn, self.n2, self.ffn, self.rel = _rmsnorm(d), Attention(), _rmsnorm(d), GatedGELU(), rel

        def forward(self, x, bias):
            if self.rel is not None:
                bias = self.rel()
            x = x + self.attn(self.n1(x), bias)
            return x + self.ffn(self.n2(x))

    class T5Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buckets", torch.from_numpy(_t5_buckets(T, s["buckets"], s["max_distance"])))
            per = s["bias_per_layer"]
            self.rel = None if per else RelBias(self.buckets)
            self.blocks = nn.ModuleList([Block(RelBias(self.buckets) if per else None) for _ in range(s["depth"])])
            self.norm = _rmsnorm(d)

        def forward(self, x):
            bias = None if self.rel is None else self.rel()
            for b in self.blocks:
                x = b(x, bias)
            return self.norm(x)

    return T5Encoder()


def _build_llama(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    d, h, kvh, T = s["dim"], s["heads"], s["kv_heads"], size
    hd, rep = d // h, h // kvh
    hidden = 64 * -(-int(8 * d / 3 * s["ffn_mult"]) // 64)

    def rotate_half(x):
        return torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.k, self.v = nn.Linear(d, kvh * hd, bias=False), nn.Linear(d, kvh * hd, bias=False)

        def forward(self, x, cos, sin, mask):
            B = x.shape[0]
            q = self.q(x).reshape(B, T, h, hd).transpose(1, 2)
            k = self.k(x).reshape(B, T, kvh, hd).transpose(1, 2)
            v = self.v(x).reshape(B, T, kvh, hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if rep > 1:   # grouped-query attention: each key/value head serves `rep` query heads
                k = k[:, :, None].expand(B, kvh, rep, T, hd).reshape(B, h, T, hd)
                v = v[:, :, None].expand(B, kvh, rep, T, hd).reshape(B, h, T, hd)
            if mask is None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                o = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(hd) + mask, dim=-1) @ v
            return self.o(o.transpose(1, 2).reshape(B, T, d))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.attn, self.n2 = _rmsnorm(d), Attention(), _rmsnorm(d)
            self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.w2 = nn.Linear(hidden, d, bias=False)

        def forward(self, x, cos, sin, mask):
            x = x + self.attn(self.n1(x), cos, sin, mask)
            y = self.n2(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            inv = 1.0 / s["rope_base"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
            ang = torch.cat([ang, ang], dim=-1)                               # [T, hd]
            self.register_buffer("cos", ang.cos()[None, None])
            self.register_buffer("sin", ang.sin()[None, None])
            self.register_buffer("mask", None if s["attn"] == "sdpa" else
                                 torch.full((T, T), float("-inf")).triu(1)[None, None])
            self.blocks = nn.ModuleList([Block() for _ in range(s["depth"])])
            self.norm = _rmsnorm(d)
            self.head = nn.Linear(d, s["vocab"], bias=False) if s["vocab"] else None

        def forward(self, x):
            for b in self.blocks:
                x = b(x, self.cos, self.sin, self.mask)
            x = self.norm(x)
            return x if self.head is None else self.head(x)

    return Llama()


def _build_maxvit(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    P = s["window"]

    def bn_act(c, act=True):
        return nn.Sequential(nn.BatchNorm2d(c), nn.GELU()) if act else nn.BatchNorm2d(c)

    class MBConv(nn.Module):
        """1x1 expand x4, depthwise 3x3 (stride 1 or 2), squeeze-and-excite (1/4 of cin), 1x1 project; a residual
        (average-pooled and 1x1-projected when it strides or widens)."""
        def __init__(self, cin, cout, stride):
            super().__init__()
            mid = 4 * cout
            self.body = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), bn_act(mid),
                                      nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), bn_act(mid))
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, max(cin // 4, 8), 1), nn.SiLU(),
                                    nn.Conv2d(max(cin // 4, 8), mid, 1), nn.Sigmoid())
            self.proj = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), bn_act(cout, act=False))
            self.short = None if (stride == 1 and cin == cout) else nn.Sequential(
                nn.AvgPool2d(stride) if stride > 1 else nn.Identity(), nn.Conv2d(cin, cout, 1))

        def forward(self, x):
            y = self.body(x)
            y = self.proj(y * self.se(y))
            return y + (x if self.short is None else self.short(x))

    class RelAttention(nn.Module):
        """Multi-head self-attention over [N, P*P, C] windows, with a learned [(2P-1)^2, heads] relative bias
        gathered by constant ids (optional)."""
        def __init__(self, c):
            super().__init__()
            self.h = max(c // 32, 1)
            self.c, self.scale = c, 1.0 / math.sqrt(c // self.h)
            self.qkv, self.o = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.table = nn.Parameter(torch.randn((2 * P - 1) ** 2, self.h) * 0.02) if s["rel_bias"] else None
            yy, xx = torch.meshgrid(torch.arange(P), torch.arange(P), indexing="ij")
            co = torch.stack([yy.flatten(), xx.flatten()])                    # [2, P*P]
            rel = (co[:, :, None] - co[:, None, :]) + (P - 1)
            self.register_buffer("ids", rel[0] * (2 * P - 1) + rel[1])       # [P*P, P*P]

        def forward(self, x):
            N, L, C = x.shape[0], P * P, self.c
            q, k, v = self.qkv(x).reshape(N, L, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4).unbind(0)
            a = q @ k.transpose(-2, -1) * self.scale
            if self.table is not None:
                a = a + self.table[self.ids].permute(2, 0, 1)[None]
            return self.o((torch.softmax(a, dim=-1) @ v).transpose(1, 2).reshape(N, L, C))

    class PartitionAttention(nn.Module):
        """Channels-last [B, H, W, C]: block (P x P windows of neighbours) or grid (a P x P grid of pixels H/P
        apart) partition, LayerNorm, attention, residual; LayerNorm MLP x4, residual."""
        def __init__(self, c, grid):
            super().__init__()
            self.grid, self.n1, self.attn, self.n2 = grid, nn.LayerNorm(c), RelAttention(c), nn.LayerNorm(c)
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

        def forward(self, x):
            B, H, W, C = x.shape
            if self.grid:
                t = x.reshape(B, P, H // P, P, W // P, C).permute(0, 2, 4, 1, 3, 5).reshape(-1, P * P, C)
            else:
                t = x.reshape(B, H // P, P, W // P, P, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, P * P, C)
            t = self.attn(self.n1(t))
            if self.grid:
                t = t.reshape(B, H // P, W // P, P, P, C).permute(0, 3, 1, 4, 2, 5).reshape(B, H, W, C)
            else:
                t = t.reshape(B, H // P, W // P, P, P, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
            x = x + t
            return x + self.mlp(self.n2(x))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.mb = MBConv(cin, cout, stride)
            self.block, self.gridded = PartitionAttention(cout, False), PartitionAttention(cout, True)

        def forward(self, x):
            x = self.mb(x).permute(0, 2, 3, 1)
            return self.gridded(self.block(x)).permute(0, 3, 1, 2)

    class MaxViT(nn.Module):
        def __init__(self):
            super().__init__()
            sw = s["stem_w"]
            self.stem = nn.Sequential(nn.Conv2d(3, sw, 3, 2, 1, bias=False), bn_act(sw),
                                      nn.Conv2d(sw, sw, 3, 1, 1))
            blocks, c = [], sw
            for i, dpt in enumerate(s["depths"]):
                w = s["base"] * 2 ** i
                for j in range(dpt):
                    blocks.append(Block(c, w, 2 if j == 0 else 1))
                    c = w
            self.blocks = nn.Sequential(*blocks)
            self.norm, self.head = nn.LayerNorm(c), nn.Linear(c, s["classes"])

        def forward(self, x):
            return self.head(self.norm(self.blocks(self.stem(x)).mean(dim=(2, 3))))

    return MaxViT()


def _build_focalnet(s):
    import torch.nn as nn
    import torch.nn.functional as F
    L = s["levels"]

    class FocalModulation(nn.Module):
        """Channels-last [B, H, W, C]: Linear to q, context and L + 1 gates; L levels of depthwise conv + GELU on
        the context (kernel k0 + 2 l), each gated and summed, plus the gated GELU of its global mean; a 1x1 conv
        of the sum (the modulator) multiplies q; a Linear out."""
        def __init__(self, c):
            super().__init__()
            self.c, self.f = c, nn.Linear(c, 2 * c + L + 1)
            self.levels = nn.ModuleList([nn.Sequential(
                nn.Conv2d(c, c, s["k0"] + 2 * lv, padding=(s["k0"] + 2 * lv) // 2, groups=c, bias=False), nn.GELU())
                for lv in range(L)])
            self.h, self.proj = nn.Conv2d(c, c, 1), nn.Linear(c, c)

        def forward(self, x):
            c = self.c
            y = self.f(x).permute(0, 3, 1, 2)                                # [B, 2C + L + 1, H, W]
            q, ctx, gates = y[:, :c], y[:, c:2 * c], y[:, 2 * c:]
            ctx_all = 0
            for lv, conv in enumerate(self.levels):
                ctx = conv(ctx)
                ctx_all = ctx_all + ctx * gates[:, lv:lv + 1]
            glob = F.gelu(ctx.mean(dim=(2, 3), keepdim=True))
            ctx_all = ctx_all + glob * gates[:, L:]
            if s["norm_modulator"]:
                ctx_all = ctx_all / (L + 1)
            return self.proj((q * self.h(ctx_all)).permute(0, 2, 3, 1))

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n1, self.mod, self.n2 = nn.LayerNorm(c), FocalModulation(c), nn.LayerNorm(c)
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

        def forward(self, x):
            x = x + self.mod(self.n1(x))
            return x + self.mlp(self.n2(x))

    class Down(nn.Module):
        """channels last in and out: a k x k stride-k conv (channels first) and a LayerNorm."""
        def __init__(self, cin, cout, k):
            super().__init__()
            self.conv, self.norm = nn.Conv2d(cin, cout, k, k), nn.LayerNorm(cout)

        def forward(self, x):
            return self.norm(self.conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1))

    class FocalNet(nn.Module):
        def __init__(self):
            super().__init__()
            b = s["base"]
            self.stem = nn.Conv2d(3, b, 4, 4)
            self.stem_norm = nn.LayerNorm(b)
            layers, c = [], b
            for i, dpt in enumerate(s["depths"]):
                if i:
                    layers.append(Down(c, 2 * c, 2))
                    c *= 2
                layers += [Block(c) for _ in range(dpt)]
            self.layers = nn.Sequential(*layers)
            self.norm, self.head = nn.LayerNorm(c), nn.Linear(c, s["classes"])

        def forward(self, x):
            x = self.stem_norm(self.stem(x).permute(0, 2, 3, 1))
            return self.head(self.norm(self.layers(x).mean(dim=(1, 2))))

    return FocalNet()


def _levit_bias_ids(q_side: int, k_side: int, stride: int):
    """LeViT's relative position ids: for each query point (on a grid `stride` apart) and key point, the id of the
    offset (|dy|, |dx|); [Nq, Nk] int64 and the number of distinct offsets."""
    qs = [(i * stride, j * stride) for i in range(q_side) for j in range(q_side)]
    ks = [(i, j) for i in range(k_side) for j in range(k_side)]
    ids, table = np.zeros((len(qs), len(ks)), dtype=np.int64), {}
    for a, (qi, qj) in enumerate(qs):
        for b, (ki, kj) in enumerate(ks):
            ids[a, b] = table.setdefault((abs(qi - ki), abs(qj - kj)), len(table))
    return ids, len(table)


def _build_levit(s, size):
    import torch
    import torch.nn as nn
    kd, vr = s["key_dim"], s["v_ratio"]

    class LinearBN(nn.Module):
        """Linear (no bias) then BatchNorm over the flattened tokens, as LeViT."""
        def __init__(self, cin, cout):
            super().__init__()
            self.lin, self.bn = nn.Linear(cin, cout, bias=False), nn.BatchNorm1d(cout)

        def forward(self, x):
            B, N, _ = x.shape
            return self.bn(self.lin(x).flatten(0, 1)).reshape(B, N, -1)

    class Attention(nn.Module):
        """Queries from every token (stride 1) or from the stride-2 subsampled ones (shrinking, between stages);
        a learned bias per head and relative offset, gathered by constant ids."""
        def __init__(self, cin, cout, heads, side, stride):
            super().__init__()
            self.h, self.side, self.stride, self.dv = heads, side, stride, vr * kd
            self.q_side = (side - 1) // stride + 1
            self.q = LinearBN(cin, heads * kd)
            self.kv = LinearBN(cin, heads * (kd + self.dv))
            self.proj = nn.Sequential(nn.Hardswish(), LinearBN(heads * self.dv, cout))
            ids, n = _levit_bias_ids(self.q_side, side, stride)
            self.bias = nn.Parameter(torch.zeros(heads, n))
            self.register_buffer("ids", torch.from_numpy(ids), persistent=False)

        def forward(self, x):
            B, N, C = x.shape
            h, sd = self.h, self.side
            xq = x
            if self.stride > 1:
                xq = x.reshape(B, sd, sd, C)[:, ::self.stride, ::self.stride].reshape(B, -1, C)
            q = self.q(xq).reshape(B, -1, h, kd).transpose(1, 2)
            k, v = self.kv(x).reshape(B, N, h, kd + self.dv).transpose(1, 2).split([kd, self.dv], dim=-1)
            a = (q @ k.transpose(-2, -1)) * kd ** -0.5 + self.bias[:, self.ids]
            o = (a.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, -1, h * self.dv)
            return self.proj(o)

    class MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.f = nn.Sequential(LinearBN(c, 2 * c), nn.Hardswish(), LinearBN(2 * c, c))

        def forward(self, x):
            return x + self.f(x)

    class Block(nn.Module):
        def __init__(self, c, heads, side):
            super().__init__()
            self.attn, self.mlp = Attention(c, c, heads, side, 1), MLP(c)

        def forward(self, x):
            return self.mlp(x + self.attn(x))

    class LeViT(nn.Module):
        def __init__(self):
            super().__init__()
            d = s["dims"]
            w = [d[0] // 8, d[0] // 4, d[0] // 2, d[0]]
            stem = []
            for i, c in enumerate(w):
                stem += [nn.Conv2d(w[i - 1] if i else 3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c)]
                if i < 3:
                    stem.append(nn.Hardswish())
            self.stem = nn.Sequential(*stem)
            side, layers = size // 16, []
            for i, (c, h, dp) in enumerate(zip(d, s["heads"], s["depths"])):
                if i:   # shrink: queries at stride 2, the width to this stage's, and an MLP
                    layers += [Attention(d[i - 1], c, s["heads"][i - 1] * 2, side, 2), MLP(c)]
                    side = (side - 1) // 2 + 1
                layers += [Block(c, h, side) for _ in range(dp)]
            self.layers = nn.Sequential(*layers)
            self.norm, self.head = nn.BatchNorm1d(d[-1]), nn.Linear(d[-1], s["classes"])

        def forward(self, x):
            x = self.layers(self.stem(x).flatten(2).transpose(1, 2))
            return self.head(self.norm(x.mean(dim=1)))

    return LeViT()


def _build_poolformer(s):
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n1, self.n2 = nn.GroupNorm(1, c), nn.GroupNorm(1, c)
            self.pool = nn.AvgPool2d(s["pool_k"], 1, s["pool_k"] // 2, count_include_pad=False)
            hidden = s["mlp_ratio"] * c
            self.mlp = nn.Sequential(nn.Conv2d(c, hidden, 1), nn.GELU(), nn.Conv2d(hidden, c, 1))
            self.ls1 = nn.Parameter(torch.full((c, 1, 1), 0.5)) if s["layer_scale"] else None
            self.ls2 = nn.Parameter(torch.full((c, 1, 1), 0.5)) if s["layer_scale"] else None

        def forward(self, x):
            y = self.n1(x)
            y = self.pool(y) - y                      # the token mixer: pooling minus the identity
            x = x + (y * self.ls1 if self.ls1 is not None else y)
            y = self.mlp(self.n2(x))
            return x + (y * self.ls2 if self.ls2 is not None else y)

    class PoolFormer(nn.Module):
        def __init__(self):
            super().__init__()
            w = s["widths"]
            layers = [nn.Conv2d(3, w[0], 7, 4, 2)]
            for i, (c, dp) in enumerate(zip(w, s["depths"])):
                if i:
                    layers.append(nn.Conv2d(w[i - 1], c, 3, 2, 1))
                layers += [Block(c) for _ in range(dp)]
            self.layers = nn.Sequential(*layers)
            self.norm, self.head = nn.GroupNorm(1, w[-1]), nn.Linear(w[-1], s["classes"])

        def forward(self, x):
            return self.head(self.norm(self.layers(x)).mean(dim=(2, 3)))

    return PoolFormer()


def _build_mobilevit(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    hd = s["head_dim"]

    def mv2(cin, cout, stride):
        hidden = s["expand"] * cin

        class MV2(nn.Module):
            def __init__(self):
                super().__init__()
                self.f = nn.Sequential(_conv_bn(cin, hidden, 1, act="silu"),
                                       _conv_bn(hidden, hidden, 3, stride, groups=hidden, act="silu"),
                                       _conv_bn(hidden, cout, 1, act=None))
                self.res = stride == 1 and cin == cout

            def forward(self, x):
                return x + self.f(x) if self.res else self.f(x)
        return MV2()

    class Layer(nn.Module):
        """A pre-norm transformer layer on [B', N, D]."""
        def __init__(self, d):
            super().__init__()
            self.h = max(d // hd, 1)
            self.n1, self.qkv, self.o = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.n2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))

        def forward(self, x):
            Bp, N, D = x.shape
            q, k, v = self.qkv(self.n1(x)).reshape(Bp, N, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
            if s["attn"] == "sdpa":
                a = F.scaled_dot_product_attention(q, k, v)
            else:
                a = torch.softmax(q @ k.transpose(-2, -1) * (D // self.h) ** -0.5, dim=-1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(Bp, N, D))
            return x + self.mlp(self.n2(x))

    class MobileViTBlock(nn.Module):
        def __init__(self, c, d, depth):
            super().__init__()
            self.local = nn.Sequential(_conv_bn(c, c, 3, act="silu"), nn.Conv2d(c, d, 1, bias=False))
            self.layers = nn.Sequential(*[Layer(d) for _ in range(depth)])
            self.norm = nn.LayerNorm(d)
            self.back = _conv_bn(d, c, 1, act="silu")
            self.fuse = _conv_bn(2 * c, c, 3, act="silu")

        def forward(self, x):
            B, _, H, W = x.shape
            y = self.local(x)
            D = y.shape[1]
            # unfold: 2x2 patch groups, each a sequence of the (H/2)(W/2) patches -> [B * 4, N, D]
            y = y.reshape(B, D, H // 2, 2, W // 2, 2).permute(0, 3, 5, 2, 4, 1).reshape(B * 4, -1, D)
            y = self.norm(self.layers(y))
            y = y.reshape(B, 2, 2, H // 2, W // 2, D).permute(0, 5, 3, 1, 4, 2).reshape(B, D, H, W)
            return self.fuse(torch.cat([x, self.back(y)], dim=1))

    class MobileViT(nn.Module):
        def __init__(self):
            super().__init__()
            c0, w = s["stem_w"], s["widths"]
            layers = [_conv_bn(3, c0, 3, 2, act="silu"), mv2(c0, c0, 1), mv2(c0, w[0], 2), mv2(w[0], w[0], 1)]
            for i, (d, dp) in enumerate(zip(s["dims"], s["vit_depths"])):
                layers += [mv2(w[i], w[i + 1], 2), MobileViTBlock(w[i + 1], d, dp)]
            layers.append(_conv_bn(w[-1], 4 * w[-1], 1, act="silu"))
            self.layers = nn.Sequential(*layers)
            self.head = nn.Linear(4 * w[-1], s["classes"])

        def forward(self, x):
            return self.head(self.layers(x).mean(dim=(2, 3)))

    return MobileViT()


def _build_resmlp(s, size):
    import torch
    import torch.nn as nn
    d, n = s["dim"], (size // s["patch"]) ** 2

    class Affine(nn.Module):
        """ResMLP's norm: alpha * x + beta per channel (a Mul and an Add), no statistics."""
        def __init__(self):
            super().__init__()
            self.alpha, self.beta = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return self.alpha * x + self.beta

    class CrossPatch(nn.Module):
        """A Linear over the token axis of [B, N, D]: Transpose, Linear N -> N, Transpose ('linear'); or the
        [N, N] weight MatMul'ed from the left plus a per-token bias ('matmul')."""
        def __init__(self):
            super().__init__()
            if s["token_mix"] == "linear":
                self.lin = nn.Linear(n, n)
            else:
                self.w, self.b = nn.Parameter(torch.eye(n)), nn.Parameter(torch.zeros(n))

        def forward(self, x):
            if s["token_mix"] == "linear":
                return self.lin(x.transpose(1, 2)).transpose(1, 2)
            return torch.matmul(self.w, x) + self.b.unsqueeze(-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.tok, self.n2 = Affine(), CrossPatch(), Affine()
            self.mlp = nn.Sequential(nn.Linear(d, s["mlp_ratio"] * d), nn.GELU(), nn.Linear(s["mlp_ratio"] * d, d))
            self.ls1, self.ls2 = nn.Parameter(torch.full((d,), 0.1)), nn.Parameter(torch.full((d,), 0.1))

        def forward(self, x):
            x = x + self.ls1 * self.tok(self.n1(x))
            return x + self.ls2 * self.mlp(self.n2(x))

    class ResMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, d, s["patch"], s["patch"])
            self.blocks = nn.Sequential(*[Block() for _ in range(s["depth"])])
            self.norm, self.head = Affine(), nn.Linear(d, s["classes"])

        def forward(self, x):
            t = self.blocks(self.embed(x).flatten(2).transpose(1, 2))
            return self.head(self.norm(t).mean(dim=1))

    return ResMLP()


def _build_ghostnet(s):
    import torch
    import torch.nn as nn
    ratio = s["ratio"]

    class Ghost(nn.Module):
        """A 1x1 conv to ceil(C / ratio) channels, a cheap depthwise 3x3 conv making (ratio - 1) more of each,
        concatenated and sliced to C."""
        def __init__(self, cin, cout, relu):
            super().__init__()
            init = -(-cout // ratio)
            act = "relu" if relu else None
            self.cout = cout if init * ratio > cout else None   # slice only what the Concat makes over C
            self.primary = _conv_bn(cin, init, 1, act=act)
            self.cheap = _conv_bn(init, init * (ratio - 1), 3, groups=init, act=act)

        def forward(self, x):
            a = self.primary(x)
            y = torch.cat([a, self.cheap(a)], dim=1)
            return y if self.cout is None else y[:, :self.cout]

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            hidden = _div4(c / 4)
            self.f = nn.Sequential(nn.Conv2d(c, hidden, 1), nn.ReLU(), nn.Conv2d(hidden, c, 1), nn.Hardsigmoid())

        def forward(self, x):
            return x * self.f(x.mean(dim=(2, 3), keepdim=True))

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, cout, k, stride, se):
            super().__init__()
            self.g1 = Ghost(cin, mid, True)
            self.dw = _conv_bn(mid, mid, k, stride, groups=mid, act=None) if stride > 1 else None
            self.se = SE(mid) if se else None
            self.g2 = Ghost(mid, cout, False)
            self.short = None if stride == 1 and cin == cout else nn.Sequential(
                _conv_bn(cin, cin, k, stride, groups=cin, act=None), _conv_bn(cin, cout, 1, act=None))

        def forward(self, x):
            y = self.g1(x)
            if self.dw is not None:
                y = self.dw(y)
            if self.se is not None:
                y = self.se(y)
            y = self.g2(y)
            return y + (x if self.short is None else self.short(x))

    class GhostNet(nn.Module):
        def __init__(self):
            super().__init__()
            c = s["stem_w"]
            layers = [_conv_bn(3, c, 3, 2), Bottleneck(c, c, c, 3, 1, False)]
            for w, st, dp, k, e, se in zip(s["widths"], s["strides"], s["depths"], s["kernels"], s["expand"],
                                           s["se"]):
                for j in range(dp):
                    layers.append(Bottleneck(c, _div4(e * c), w, k, st if j == 0 else 1, se))
                    c = w
            head_c = _div4(6 * c)
            layers.append(_conv_bn(c, head_c, 1))
            self.layers = nn.Sequential(*layers)
            self.conv_head = nn.Sequential(nn.Conv2d(head_c, s["head_w"], 1), nn.ReLU())
            self.head = nn.Linear(s["head_w"], s["classes"])

        def forward(self, x):
            y = self.conv_head(self.layers(x).mean(dim=(2, 3), keepdim=True))
            return self.head(y.flatten(1))

    return GhostNet()


def hardnet_links(n: int, growth: int, grmul: float, base: int) -> tuple:
    """A harmonic dense block of n layers over `base` input channels: (links, widths, out_ch). Layer l (1-based)
    reads the Concat of layers l - 2^i for every 2^i dividing l (layer 0: the block's input); its width is
    growth x grmul^(number of those links - 1), rounded to an even count; the block's output is the Concat of the odd
    layers and the last."""
    links, widths = [[]], [base]
    for layer in range(1, n + 1):
        link, ch, i = [], float(growth), 0
        while 2 ** i <= layer:
            if layer % 2 ** i == 0:
                link.append(layer - 2 ** i)
                if i > 0:
                    ch *= grmul
            i += 1
        links.append(link)
        widths.append(int(int(ch + 1) / 2) * 2)
    out = [j for j in range(1, n + 1) if j % 2 == 1 or j == n]
    return links, widths, sum(widths[j] for j in out)


def _build_hardnet(s):
    import torch
    import torch.nn as nn

    def act():
        return nn.ReLU6() if s["act"] == "relu6" else nn.ReLU()

    def cba(cin, cout, k=3, stride=1, groups=1, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*(layers + [act()] if relu else layers))

    def layer(cin, cout):
        """A 3x3 conv-BN-act, or (HarDNet-DS) a 1x1 conv-BN-act and a depthwise 3x3 conv-BN."""
        if s["depthwise"]:
            return nn.Sequential(cba(cin, cout, 1), cba(cout, cout, 3, groups=cout, relu=False))
        return cba(cin, cout, 3)

    class HarDBlock(nn.Module):
        def __init__(self, base, growth, n):
            super().__init__()
            self.links, widths, self.out_ch = hardnet_links(n, growth, s["grmul"], base)
            self.out = [j for j in range(1, n + 1) if j % 2 == 1 or j == n]
            self.layers = nn.ModuleList([layer(sum(widths[i] for i in self.links[j]), widths[j])
                                         for j in range(1, n + 1)])

        def forward(self, x):
            ys = [x]
            for j, f in enumerate(self.layers, 1):
                tin = [ys[i] for i in self.links[j]]
                ys.append(f(torch.cat(tin, dim=1) if len(tin) > 1 else tin[0]))
            return torch.cat([ys[j] for j in self.out], dim=1)

    class HarDNet(nn.Module):
        def __init__(self):
            super().__init__()
            c1, c2 = s["stem_w"]
            ds = s["depthwise"]
            blocks = [cba(3, c1, 3, 2), cba(c1, c2, 1 if ds else 3),
                      cba(c2, c2, 3, 2, groups=c2, relu=False) if ds else nn.MaxPool2d(3, 2, 1)]
            c = c2
            for w, g, n, down in zip(s["widths"], s["growth"], s["layers"], s["down"]):
                blk = HarDBlock(c, g, n)
                blocks += [blk, cba(blk.out_ch, w, 1)]
                c = w
                if down:
                    blocks.append(cba(c, c, 3, 2, groups=c, relu=False) if ds else nn.AvgPool2d(2, 2))
            self.features = nn.Sequential(*blocks)
            self.head = nn.Linear(c, s["classes"])

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    return HarDNet()


def _token_encoder(attention, T: int, d: int, s: dict):
    """An encoder over a float sequence [B, T, d] (nystromformer, bigbird): a learned position table, s["depth"]
    pre- or post-norm blocks of attention(layer) and a GELU FFN (x s["ffn_ratio"]), the sequence or a mean + Linear."""
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.n1, self.attn, self.n2 = nn.LayerNorm(d), attention(layer), nn.LayerNorm(d)
            self.ffn = nn.Sequential(nn.Linear(d, s["ffn_ratio"] * d), nn.GELU(), nn.Linear(s["ffn_ratio"] * d, d))

        def forward(self, x):
            if s["norm"] == "pre":
                x = x + self.attn(self.n1(x))
                return x + self.ffn(self.n2(x))
            x = self.n1(x + self.attn(x))
            return self.n2(x + self.ffn(x))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Parameter(torch.randn(1, T, d) * 0.02)
            self.blocks = nn.Sequential(*[Block(i) for i in range(s["depth"])])
            self.norm = nn.LayerNorm(d) if s["norm"] == "pre" else None   # post-norm blocks end normalised
            self.head = nn.Linear(d, s["classes"]) if s["head"] == "mean" else None

        def forward(self, x):
            y = self.blocks(x + self.pos)
            y = y if self.norm is None else self.norm(y)
            return y if self.head is None else self.head(y.mean(dim=1))

    return Encoder()


def _build_nystromformer(s, size):
    import torch
    import torch.nn as nn
    d, h, m, T = s["dim"], s["heads"], s["landmarks"], size
    dh = d // h

    class NystromAttention(nn.Module):
        """Self-attention through m landmarks (segment means of q and k over S / m tokens each): softmax(q kl^T)
        [S, m] times the Moore-Penrose pseudo-inverse of softmax(ql kl^T) [m, m] (pinv_iters Newton-Schulz steps,
        4 m x m MatMuls each) times softmax(ql k^T) v [m, dh]; optionally plus a depthwise (conv_k x 1) conv of v
        over the tokens, one per head."""
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            k = s["conv_k"]
            self.conv = nn.Conv2d(h, h, (k, 1), padding=(k // 2, 0), groups=h, bias=False) if k else None
            self.register_buffer("eye", torch.eye(m), persistent=False)

        def pinv(self, a):
            v = a.transpose(-1, -2) / (a.sum(dim=-2).amax(dim=-1) * a.sum(dim=-1).amax(dim=-1))[..., None, None]
            eye = self.eye
            for _ in range(s["pinv_iters"]):
                av = a @ v
                v = (0.25 * v) @ (13 * eye - av @ (15 * eye - av @ (7 * eye - av)))
            return v

        def forward(self, x):
            q, k, v = self.qkv(x).reshape(-1, T, 3, h, dh).permute(2, 0, 3, 1, 4).unbind(0)
            q = q * dh ** -0.5
            ql = q.reshape(-1, h, m, T // m, dh).mean(dim=-2)
            kl = k.reshape(-1, h, m, T // m, dh).mean(dim=-2)
            k1 = torch.softmax(q @ kl.transpose(-1, -2), dim=-1)     # [B, h, S, m]
            k2 = torch.softmax(ql @ kl.transpose(-1, -2), dim=-1)    # [B, h, m, m]
            k3 = torch.softmax(ql @ k.transpose(-1, -2), dim=-1)     # [B, h, m, S]
            y = k1 @ (self.pinv(k2) @ (k3 @ v))
            if self.conv is not None:
                y = y + self.conv(v)
            return self.out(y.transpose(1, 2).reshape(-1, T, d))

    return _token_encoder(lambda layer: NystromAttention(), T, d, s)



def _build_rednet(s, size):
    import torch
    import torch.nn as nn

    def cbr(cin, cout, k=1, stride=1, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*(layers + [nn.ReLU()] if relu else layers))

    class Involution(nn.Module):
        """A k x k involution: a kernel per pixel and per group of group_ch channels, generated from the input (a
        2x2 average pool where it strides, a 1x1 conv-BN-ReLU reducing by `reduction`, a 1x1 conv to groups x k^2,
        a Softmax over the taps), multiplied with the input's k x k neighbourhood (nn.Unfold, or k^2 shifted
        Slices) and summed over the taps; hw: the input's height and width (static Slices and Reshapes)."""
        def __init__(self, c, k, stride, hw):
            super().__init__()
            self.c, self.k, self.stride, self.g = c, k, stride, max(c // s["group_ch"], 1)   # (the stem's: 1-4)
            self.hw = hw // stride   # the output's height and width
            self.pool = nn.AvgPool2d(stride, stride) if stride > 1 else nn.Identity()
            self.reduce = cbr(c, c // s["reduction"])
            self.span = nn.Conv2d(c // s["reduction"], self.g * k * k, 1)
            self.unfold = nn.Unfold(k, padding=(k - 1) // 2, stride=stride) if s["unfold"] == "unfold" else None

        def forward(self, x):
            k, g, c = self.k, self.g, self.c
            w = self.span(self.reduce(self.pool(x)))
            h = wd = self.hw
            w = w.reshape(-1, g, 1, k * k, h, wd)
            # a Softmax over the k^2 taps (SAN's patchwise weights): with random weights an unbounded kernel, linear
            # in the input, would square the activations block after block
            w = torch.softmax(w, dim=3)
            if self.unfold is not None:
                u = self.unfold(x).reshape(-1, g, c // g, k * k, h, wd)
                return (w * u).sum(dim=3).reshape(-1, c, h, wd)
            p, st = (k - 1) // 2, self.stride
            xp = nn.functional.pad(x, (p, p, p, p))
            out = None
            for t, wt in enumerate(w.unbind(dim=3)):
                i, j = divmod(t, k)
                tap = xp[:, :, i:i + st * (h - 1) + 1:st, j:j + st * (wd - 1) + 1:st].reshape(-1, g, c // g, h, wd)
                out = tap * wt if out is None else out + tap * wt
            return out.reshape(-1, c, h, wd)

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, stride, hw):
            super().__init__()
            cout = mid * s["expansion"]
            self.body = nn.Sequential(cbr(cin, mid), Involution(mid, s["k"], stride, hw), nn.BatchNorm2d(mid),
                                      nn.ReLU(), cbr(mid, cout, relu=False))
            self.short = cbr(cin, cout, 1, stride, relu=False) if stride > 1 or cin != cout else nn.Identity()
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.body(x) + self.short(x))

    class RedNet(nn.Module):
        def __init__(self):
            super().__init__()
            c0 = s["stem_w"]
            stem = [cbr(3, c0 // 2, 3, 2)]
            if s["stem_inv"]:   # RedNet's stem: an involution between the two convs
                stem += [Involution(c0 // 2, 3, 1, size // 2), nn.BatchNorm2d(c0 // 2), nn.ReLU()]
            stem += [cbr(c0 // 2, c0, 3), nn.MaxPool2d(3, 2, 1)]
            blocks, c, hw = stem, c0, size // 4
            for i, (mid, n) in enumerate(zip(s["mids"], s["depths"])):
                for b in range(n):
                    stride = 2 if i > 0 and b == 0 else 1
                    blocks.append(Bottleneck(c, mid, stride, hw))
                    c, hw = mid * s["expansion"], hw // stride
            self.features = nn.Sequential(*blocks)
            self.head = nn.Linear(c, s["classes"])

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    return RedNet()


def bigbird_random_blocks(nb: int, r: int, global_blocks: int, seed: int, layer: int) -> np.ndarray:
    """[nb, r] key-block ids per query block: drawn (without replacement, from the seed and the layer) among the
    blocks outside the query block's window (b - 1, b, b + 1) and outside the first `global_blocks` blocks."""
    rng = np.random.default_rng([FAMILIES.index("bigbird"), int(seed), nb, layer])
    out = np.zeros((nb, r), dtype=np.int64)
    for b in range(nb):
        pool = [j for j in range(global_blocks, nb) if abs(j - b) > 1]
        out[b] = rng.choice(pool, size=r, replace=False)
    return out


def _build_bigbird(s, size):
    import torch
    import torch.nn as nn
    d, h, w, T = s["dim"], s["heads"], s["block"], size
    dh, nb, r, g = d // h, size // s["block"], s["rand_blocks"], s["global_tokens"]

    class SparseAttention(nn.Module):
        """Block-sparse self-attention (BigBird ITC / Longformer): each query block of w tokens attends to its
        window of 3 key blocks, r random key blocks and the g global tokens, in one Softmax; the g global queries
        attend to every token."""
        def __init__(self, layer):
            super().__init__()
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            cols = (3 + r) * w + g
            mask = torch.zeros(nb, 1, cols)
            mask[0, 0, :w] = float("-inf")                  # the padded block before the first
            mask[nb - 1, 0, 2 * w:3 * w] = float("-inf")    # and after the last
            if g:                                           # global keys already in the window (block 0's tokens)
                mask[:2, 0, (3 + r) * w:] = float("-inf")
            self.register_buffer("mask", mask, persistent=False)
            ids = bigbird_random_blocks(nb, r, 1 if g else 0, s["seed"], layer) if r else None
            self.register_buffer("rand", torch.from_numpy(ids) if r else None, persistent=False)

        def forward(self, x):
            q, k, v = self.qkv(x).reshape(-1, T, 3, h, dh).permute(2, 0, 3, 1, 4).unbind(0)
            q = q * dh ** -0.5
            qb, kb, vb = (t.reshape(-1, h, nb, w, dh) for t in (q, k, v))

            def window(t):   # [B, h, nb, (3 + r) w, dh]: the previous, own and next blocks, then the random ones
                tp = nn.functional.pad(t, (0, 0, 0, 0, 1, 1))
                parts = [tp[:, :, :-2], tp[:, :, 1:-1], tp[:, :, 2:]]
                if r:
                    parts.append(t[:, :, self.rand].reshape(-1, h, nb, r * w, dh))
                return torch.cat(parts, dim=3)
            kw, vw = window(kb), window(vb)
            scores = qb @ kw.transpose(-1, -2)                               # [B, h, nb, w, (3 + r) w]
            if g:
                kg, vg = k[:, :, None, :g], v[:, :, None, :g]                # [B, h, 1, g, dh]
                scores = torch.cat([scores, qb @ kg.transpose(-1, -2)], dim=-1)
            p = torch.softmax(scores + self.mask, dim=-1)
            y = p[..., :(3 + r) * w] @ vw
            if g:
                y = y + p[..., (3 + r) * w:] @ vg
            y = y.reshape(-1, h, T, dh)
            if g:                                                            # global queries: full attention
                yg = torch.softmax(q[:, :, :g] @ k.transpose(-1, -2), dim=-1) @ v
                y = torch.cat([yg, y[:, :, g:]], dim=2)
            return self.out(y.transpose(1, 2).reshape(-1, T, d))

    return _token_encoder(SparseAttention, T, d, s)


def _build_dgcnn(s, size):
    import torch
    import torch.nn as nn
    n, k = size, s["k"]

    def cbl(conv, ci, co, bn):   # a shared 1x1 conv (Conv2d over the edges, Conv1d over the points)-BN-LeakyReLU
        return [conv(ci, co, 1, bias=False), bn(co), nn.LeakyReLU(0.2)]

    def knn(x):   # [B, C, N] -> [B, N, k]: TopK of the negative squared distances -|xi|^2 + 2 xi.xj - |xj|^2
        inner = torch.matmul(x.transpose(2, 1), x)                                # [B, N, N]
        sq = (x * x).sum(1, keepdim=True)                                         # [B, 1, N]: a ReduceSum
        return (2 * inner - sq - sq.transpose(2, 1)).topk(k, -1)[1]

    class EdgeConv(nn.Module):
        """The k nearest neighbours of every point in this layer's input features (the graph recomputed), their
        features gathered (rows: a Gather of the points-first [B N, C] at the flattened indices + b N; elements: a
        GatherElements of the channels-first [B, C, N k] at the indices broadcast over the channels), edge features
        [xj - xi, xi] as [B, 2C, N, k], 1 or 2 shared 1x1 Conv2d-BN-LeakyReLU(0.2), a max over the neighbours."""
        def __init__(self, ci, co):
            super().__init__()
            self.ci = ci
            layers = cbl(nn.Conv2d, 2 * ci, co, nn.BatchNorm2d)
            self.conv = nn.Sequential(*(layers + cbl(nn.Conv2d, co, co, nn.BatchNorm2d) if s["convs"] == 2 else layers))

        def forward(self, x):
            c, idx = self.ci, knn(x)
            if s["gather"] == "elements":
                nb = torch.gather(x, 2, idx.reshape(-1, 1, n * k).expand(-1, c, -1)).reshape(-1, c, n, k)
                xi = x.unsqueeze(-1).expand(-1, -1, -1, k)
                e = torch.cat([nb - xi, xi], 1)                                   # [B, 2C, N, k]
            else:
                b = x.shape[0]
                xt = x.transpose(2, 1)                                            # [B, N, C]
                base = torch.arange(b, device=x.device).reshape(b, 1, 1) * n
                nb = xt.reshape(b * n, c)[(idx + base).reshape(-1)].reshape(b, n, k, c)
                xi = xt.unsqueeze(2).expand(-1, -1, k, -1)
                e = torch.cat([nb - xi, xi], 3).permute(0, 3, 1, 2)               # [B, 2C, N, k]
            return self.conv(e).amax(-1)

    class DGCNN(nn.Module):
        """[B, 3, N] -> 2-4 EdgeConvs -> Concat of their outputs -> 1x1 Conv1d-BN-LeakyReLU to emb -> global max
        (and mean) over the points -> Linear-BN-LeakyReLU head -> classes."""
        def __init__(self):
            super().__init__()
            cs = [3] + s["edges"]
            self.edges = nn.ModuleList([EdgeConv(cs[i], cs[i + 1]) for i in range(len(s["edges"]))])
            self.emb = nn.Sequential(*cbl(nn.Conv1d, sum(s["edges"]), s["emb"], nn.BatchNorm1d))
            head, c = [], s["emb"] * (2 if s["pool"] == "max_avg" else 1)
            for w in s["head"]:
                head += [nn.Linear(c, w, bias=False), nn.BatchNorm1d(w), nn.LeakyReLU(0.2)]
                c = w
            self.head = nn.Sequential(*head, nn.Linear(c, s["classes"]))

        def forward(self, x):
            outs = []
            for ec in self.edges:
                x = ec(x)
                outs.append(x)
            y = self.emb(torch.cat(outs, 1))
            p = torch.cat([y.amax(-1), y.mean(-1)], 1) if s["pool"] == "max_avg" else y.amax(-1)
            return self.head(p)

    return DGCNN()


def deformattn_levels(s: dict, size: int) -> list:
    """A deformattn's feature levels at H = W = size: [(stride, side)], strides 16-32 (2 levels), 8-32 (3) or 8-64
    (4: the 4th from a stride-2 3x3 conv on the stride-32 stage, as Deformable DETR's)."""
    return [(st, size // st) for st in {2: (16, 32), 3: (8, 16, 32), 4: (8, 16, 32, 64)}[s["levels"]]]


def deformattn_tokens(s: dict, size: int) -> int:
    """The encoder's tokens: every level's pixels."""
    return sum(side * side for _, side in deformattn_levels(s, size))


def _build_deformattn(s, size, M):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    d, h, L, P = s["dim"], s["heads"], s["levels"], s["points"]
    dh, levels = d // h, deformattn_levels(s, size)
    sides = [side for _, side in levels]
    starts = np.cumsum([0] + [side * side for side in sides]).tolist()
    N = starts[-1]

    def sine(side):   # DETR's 2-D sine positions of a side x side grid: [side^2, d] (y then x, sin and cos)
        c = (torch.arange(side, dtype=torch.float64) + 0.5) / side * 2 * math.pi
        f = 10000.0 ** (2 * (torch.arange(d // 4, dtype=torch.float64)) / (d // 2))
        y, x = (c[:, None] / f).repeat_interleave(side, 0), (c[:, None] / f).repeat(side, 1)
        return torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], 1).float()

    class MSDeformAttn(nn.Module):
        """Multi-scale deformable attention: each query, per head and per level, samples P points at its reference
        point + offsets (a Linear of the query, in pixels of the level) from that level's value map by bilinear
        GridSample (align_corners False, zeros outside); the h x L x P weights (a Linear, a Softmax over L x P)
        sum them; an output Linear."""
        def __init__(self):
            super().__init__()
            self.off, self.attw = nn.Linear(d, h * L * P * 2), nn.Linear(d, h * L * P)
            self.value, self.out = nn.Linear(d, d), nn.Linear(d, d)
            with torch.no_grad():   # Deformable DETR's offset bias: head i's points on a ray at 2 pi i / h, 1..P out
                th = torch.arange(h, dtype=torch.float32) * (2 * math.pi / h)
                g = torch.stack([th.cos(), th.sin()], -1)
                g = (g / g.abs().max(-1, keepdim=True)[0]).reshape(h, 1, 1, 2)
                g = g * torch.arange(1, P + 1, dtype=torch.float32).reshape(1, 1, P, 1)
                self.off.bias.copy_(g.expand(h, L, P, 2).flatten())
            # each query's reference point: its own pixel's centre (x, y) in [0, 1], the same on every level
            xs = torch.cat([(torch.arange(sd * sd) % sd + 0.5) / sd for sd in sides])
            ys = torch.cat([(torch.arange(sd * sd) // sd + 0.5) / sd for sd in sides])
            self.register_buffer("ref", torch.stack([xs, ys], -1).reshape(1, N, 1, 1, 1, 2), persistent=False)
            scale = torch.tensor([[2.0 / sd, 2.0 / sd] for sd in sides]).reshape(1, 1, 1, L, 1, 2)
            self.register_buffer("scale", scale, persistent=False)                 # pixels of a level -> [-1, 1]

        def forward(self, q, x):   # q: the queries (with positions), x: the values' input, both [B, N, d]
            v = self.value(x)
            # sampling locations in GridSample's [-1, 1]: 2 (reference + offset / side) - 1
            grid = 2 * self.ref - 1 + self.off(q).reshape(-1, N, h, L, P, 2) * self.scale
            a = torch.softmax(self.attw(q).reshape(-1, N, h, L * P), -1).permute(0, 2, 1, 3).reshape(-1, 1, N, L * P)
            sampled = []
            for lv, side in enumerate(sides):
                vl = v[:, starts[lv]:starts[lv + 1]].reshape(-1, side * side, h, dh).permute(0, 2, 3, 1)
                gl = grid[:, :, :, lv].permute(0, 2, 1, 3, 4).reshape(-1, N, P, 2)          # [B h, N, P, 2]
                sampled.append(F.grid_sample(vl.reshape(-1, dh, side, side), gl, mode="bilinear",
                                             padding_mode="zeros", align_corners=False))    # [B h, dh, N, P]
            y = (torch.cat(sampled, -1) * a).sum(-1)                                         # [B h, dh, N]
            return self.out(y.reshape(-1, d, N).transpose(1, 2))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.n1, self.n2 = MSDeformAttn(), nn.LayerNorm(d), nn.LayerNorm(d)
            self.ffn = nn.Sequential(nn.Linear(d, s["ffn_ratio"] * d), _act(s["act"]), nn.Linear(s["ffn_ratio"] * d, d))

        def forward(self, x, pos):
            if s["norm"] == "pre":
                y = self.n1(x)
                x = x + self.attn(y + pos, y)
                return x + self.ffn(self.n2(x))
            x = self.n1(x + self.attn(x + pos, x))
            return self.n2(x + self.ffn(x))

    class DeformableEncoder(nn.Module):
        """Image -> a ResNet-like backbone (a stride-2 stem, 4 stages of basic blocks) -> its stride 16-32 or 8-32
        maps (and a stride-2 conv's at 64) as L levels, each a 1x1 (or 3x3 stride-2) conv to d + GroupNorm(32),
        flattened and concatenated [B, N, d]; sine positions + a learned level embedding; the encoder layers; mean +
        Linear."""
        def __init__(self):
            super().__init__()
            bb, c0 = {"block": "basic", "act": "relu"}, s["stem_w"]
            widths = [c0 * 2 ** i for i in range(4)]                      # stages at strides 4, 8, 16, 32
            self.stem, stages, c = _conv_bn(3, c0, 3, 2), [], c0
            for w in widths:
                stages.append(nn.Sequential(*[_fpn_block(bb, M, c if j == 0 else w, w, 2 if j == 0 else 1)
                                              for j in range(s["blocks"])]))
                c = w
            self.stages = nn.ModuleList(stages)
            strides = {st for st, _ in levels}
            self.taps = [i for i, st in enumerate((4, 8, 16, 32)) if st in strides]   # the stages that are levels
            proj = [nn.Sequential(nn.Conv2d(widths[i], d, 1), nn.GroupNorm(32, d)) for i in self.taps]
            if L == 4:
                proj.append(nn.Sequential(nn.Conv2d(widths[-1], d, 3, 2, 1), nn.GroupNorm(32, d)))
            self.proj = nn.ModuleList(proj)
            self.register_buffer("pos", torch.cat([sine(side) for side in sides])[None], persistent=False)
            self.level = nn.Parameter(torch.zeros(L, d))
            self.counts = [side * side for side in sides]
            self.layers = nn.ModuleList([Layer() for _ in range(s["depth"])])
            self.norm = nn.LayerNorm(d) if s["norm"] == "pre" else None
            self.head = nn.Linear(d, s["classes"])

        def forward(self, x):
            x, maps = self.stem(x), []
            for i, stage in enumerate(self.stages):
                x = stage(x)
                if i in self.taps:
                    maps.append(x)
            if L == 4:
                maps.append(x)
            src = torch.cat([p(m).flatten(2) for p, m in zip(self.proj, maps)], 2).transpose(1, 2)   # [B, N, d]
            pos = self.pos + torch.cat([self.level[i:i + 1].expand(n, d) for i, n in enumerate(self.counts)])
            for layer in self.layers:
                src = layer(src, pos)
            if self.norm is not None:
                src = self.norm(src)
            return self.head(src.mean(dim=1))

    return DeformableEncoder()


def condconv_blocks(s: dict) -> list:
    """A condconv's blocks in order: (c_in, c_out, stride); each stage's first block strides 2 (the stem did too)."""
    out, c = [], s["stem_w"]
    for w, d in zip(s["widths"], s["depths"]):
        for j in range(d):
            out.append((c, w, 2 if j == 0 else 1))
            c = w
    return out


def condconv_kernels(s: dict) -> list:
    """Every dynamic conv's per-sample kernel, C_out x C_in/g x k x k elements (an mbconv's 1x1 expand and
    project only where they are dynamic; its depthwise always)."""
    out = []
    for ci, co, _ in condconv_blocks(s):
        if s["block"] == "basic":
            out += [co * ci * 9, co * co * 9]
        else:
            mid = _div4(ci * s["expand"])
            out += [mid * s["k"] ** 2] + ([mid * ci, co * mid] if s["dynamic"] == "all" else [])
    return out


def _build_condconv(s):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    K = s["experts"]

    class Router(nn.Module):
        """Routing weights [B, K] from a global average pool: a Linear (or Linear-ReLU-Linear, C/4 wide), then a
        Sigmoid (CondConv) or a Softmax of the logits over the temperature (DynamicConv)."""
        def __init__(self, c):
            super().__init__()
            self.fc = (nn.Sequential(nn.Linear(c, max(16, c // 4)), nn.ReLU(), nn.Linear(max(16, c // 4), K))
                       if s["router_mlp"] else nn.Linear(c, K))

        def forward(self, x):
            z = self.fc(x.mean(dim=(2, 3)))
            return torch.sigmoid(z) if s["routing"] == "sigmoid" else torch.softmax(z / s["temperature"], -1)

    class DynConv(nn.Module):
        """A conv whose kernel is computed per sample: routing [B, K] @ the experts [K, C_out C_in/g k k] (one
        MatMul), reshaped to [B C_out, C_in/g, k, k] and applied as ONE grouped Conv over the input reshaped to
        [1, B C_in, H, W] with B g groups (the batch folded into the groups, as timm's CondConv2d); then BN (whose
        gamma starts at the inverse of the mixture's expected gain under random weights: sqrt(K) for a near-uniform
        Softmax, 2 / sqrt(K) for K Sigmoids near 1/2)."""
        def __init__(self, cin, cout, k, stride=1, groups=1):
            super().__init__()
            self.cout, self.cg, self.k, self.stride, self.groups = cout, cin // groups, k, stride, groups
            # K experts stacked on the first axis (each row of a kernel has its fan-in, as moe's w1)
            self.experts = nn.Parameter(torch.empty(K * cout, cin // groups, k, k))
            self.router = Router(cin) if s["router"] == "conv" else None
            self.bn = nn.BatchNorm2d(cout)
            with torch.no_grad():
                self.bn.weight.fill_(math.sqrt(K) if s["routing"] == "softmax" else 2 / math.sqrt(K))

        def forward(self, x, r=None):
            b, c, h, w = x.shape
            r = self.router(x) if self.router is not None else r
            kernel = (r @ self.experts.reshape(K, -1)).reshape(b * self.cout, self.cg, self.k, self.k)
            y = F.conv2d(x.reshape(1, b * c, h, w), kernel, None, self.stride, self.k // 2, groups=b * self.groups)
            return self.bn(y.reshape(b, self.cout, y.shape[2], y.shape[3]))

    class StaticConv(nn.Module):
        """A plain 1x1 conv-BN, called as DynConv is (an mbconv's expand or project where only its depthwise conv
        is dynamic)."""
        def __init__(self, cin, cout, k):
            super().__init__()
            self.conv = _conv_bn(cin, cout, k, act=None)

        def forward(self, x, r=None):
            return self.conv(x)

    class Block(nn.Module):
        """mbconv: a 1x1 expand, a depthwise kxk (strided where the stage starts), an optional squeeze-and-excite,
        a 1x1 project, a residual where the shape stays; the depthwise conv always dynamic, the 1x1s where `dynamic`
        is all. basic: two dynamic 3x3 convs, a residual (a static 1x1 conv-BN shortcut where the shape changes).
        One routing a block from its input (router 'block', CondConv's) or one a conv from that conv's input."""
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.act = _act(s["act"])
            self.router = Router(cin) if s["router"] == "block" else None
            if s["block"] == "basic":
                self.convs = nn.ModuleList([DynConv(cin, cout, 3, stride), DynConv(cout, cout, 3)])
                self.short = None if stride == 1 and cin == cout else _conv_bn(cin, cout, 1, stride, act=None)
                self.se = None
            else:
                mid, k = _div4(cin * s["expand"]), s["k"]
                pw = DynConv if s["dynamic"] == "all" else StaticConv
                self.convs = nn.ModuleList([pw(cin, mid, 1), DynConv(mid, mid, k, stride, mid), pw(mid, cout, 1)])
                self.short = "identity" if stride == 1 and cin == cout else None
                sq = _div4(cin / 4)
                self.se = nn.Sequential(nn.Conv2d(mid, sq, 1), nn.ReLU(), nn.Conv2d(sq, mid, 1),
                                        nn.Sigmoid()) if s["se"] else None

        def forward(self, x):
            r = self.router(x) if self.router is not None else None
            if s["block"] == "basic":
                y = self.convs[1](self.act(self.convs[0](x, r)), r)
                return self.act(y + (x if self.short is None else self.short(x)))
            y = self.act(self.convs[0](x, r))
            y = self.act(self.convs[1](y, r))
            if self.se is not None:
                y = y * self.se(y.mean(dim=(2, 3), keepdim=True))
            y = self.convs[2](y, r)
            return y + x if self.short == "identity" else y

    class CondConvNet(nn.Module):
        """A stride-2 3x3 conv-BN-act stem, the blocks, a 1x1 conv-BN-act to head_w, global average pool, Linear."""
        def __init__(self):
            super().__init__()
            self.stem = _conv_bn(3, s["stem_w"], 3, 2, act=s["act"])
            self.blocks = nn.Sequential(*[Block(ci, co, st) for ci, co, st in condconv_blocks(s)])
            self.conv_head = _conv_bn(s["widths"][-1], s["head_w"], 1, act=s["act"])
            self.head = nn.Linear(s["head_w"], s["classes"])

        def forward(self, x):
            return self.head(self.conv_head(self.blocks(self.stem(x))).mean(dim=(2, 3)))

    return CondConvNet()


def _sparsemax(z):
    """Sparsemax over the last axis (Martins & Astudillo; pytorch-tabnet's): the row less its max, sorted descending
    (a TopK over all of it), CumSum, the support size (k z_(k) > cumsum_k - 1, a ReduceSum), the threshold tau (a
    GatherElements of the cumsum at the support size, over it), z - tau clamped at 0 (a Clip)."""
    import torch
    z = z - z.amax(-1, keepdim=True)
    zs = torch.sort(z, dim=-1, descending=True)[0]
    rho = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cs = zs.cumsum(-1) - 1
    k = (rho * zs > cs).sum(-1, keepdim=True)
    tau = cs.gather(-1, k - 1) / k.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def _entmax15(z):
    """1.5-entmax over the last axis (Peters et al.; pytorch-tabnet's exact sort-based one): z / 2 less its max,
    sorted descending, the running mean and mean of squares (CumSums), each prefix's threshold mean - sqrt((1 - k
    (mean_sq - mean^2)) / k), the support size (a ReduceSum of tau <= z_(k)), its threshold gathered, z - tau
    clamped at 0 and squared."""
    import torch
    z = z / 2
    z = z - z.amax(-1, keepdim=True)
    zs = torch.sort(z, dim=-1, descending=True)[0]
    rho = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    mean = zs.cumsum(-1) / rho
    mean_sq = (zs * zs).cumsum(-1) / rho
    delta = (1 - rho * (mean_sq - mean * mean)) / rho
    tau = mean - torch.sqrt(torch.clamp(delta, min=0))
    k = (tau <= zs).sum(-1, keepdim=True)
    return torch.clamp(z - tau.gather(-1, k - 1), min=0) ** 2


def _build_tabnet(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    nf, nd, na = size, s["n_d"], s["n_a"]
    mask = {"sparsemax": _sparsemax, "entmax15": _entmax15, "softmax": lambda z: torch.softmax(z, -1)}[s["mask"]]

    class GBN(nn.Module):
        """BatchNorm1d, or ghost BN: the batch cut into virtual batches of vbs rows (the last one what is left: a
        Split), the same BN on each, Concat (pytorch-tabnet's; one BN where the batch is one virtual batch)."""
        def __init__(self, c):
            super().__init__()
            self.bn = nn.BatchNorm1d(c)

        def forward(self, x):
            if s["norm"] == "batch" or x.shape[0] <= s["vbs"]:
                return self.bn(x)
            return torch.cat([self.bn(c) for c in x.split(s["vbs"], 0)], 0)

    class GLU(nn.Module):
        """A Linear (no bias; shared by every step's transformer for the shared layers) to 2 (n_d + n_a), its own
        GBN, GLU."""
        def __init__(self, fc):
            super().__init__()
            self.fc, self.bn = fc, GBN(2 * (nd + na))

        def forward(self, x):
            return F.glu(self.bn(self.fc(x)), -1)

    class FeatureTransformer(nn.Module):
        """The shared GLU layers, then the step's own; every layer but the first residual, scaled by sqrt(0.5)."""
        def __init__(self, shared):
            super().__init__()
            self.layers = nn.ModuleList([GLU(fc) for fc in shared]
                                        + [GLU(nn.Linear(nd + na, 2 * (nd + na), bias=False))
                                           for _ in range(s["independent"])])

        def forward(self, x):
            x = self.layers[0](x)
            for layer in self.layers[1:]:
                x = (x + layer(x)) * math.sqrt(0.5)
            return x

    class AttentiveTransformer(nn.Module):
        """The mask over the features: a Linear (no bias) of the last step's attention part, GBN, times the prior,
        sparsemax (entmax 1.5, softmax)."""
        def __init__(self):
            super().__init__()
            self.fc, self.bn = nn.Linear(na, nf, bias=False), GBN(nf)

        def forward(self, a, prior):
            return mask(self.bn(self.fc(a)) * prior)

    class TabNet(nn.Module):
        """[B, F] -> BN -> an initial feature transformer (its attention part starts the chain) -> `steps` decision
        steps: mask M = attentive(a, prior), prior *= gamma - M, the masked features M x through the step's feature
        transformer, split into a decision part (ReLU, summed over the steps) and the next attention part; a Linear
        of the sum to the classes."""
        def __init__(self):
            super().__init__()
            shared = [nn.Linear(nf if i == 0 else nd + na, 2 * (nd + na), bias=False) for i in range(s["shared"])]
            self.shared = nn.ModuleList(shared)
            self.bn = nn.BatchNorm1d(nf)
            self.initial = FeatureTransformer(shared)
            self.feat = nn.ModuleList([FeatureTransformer(shared) for _ in range(s["steps"])])
            self.att = nn.ModuleList([AttentiveTransformer() for _ in range(s["steps"])])
            self.head = nn.Linear(nd, s["classes"], bias=False)

        def forward(self, x):
            x = self.bn(x)
            a, prior, out = self.initial(x)[:, nd:], torch.ones_like(x), 0
            for att, feat in zip(self.att, self.feat):
                m = att(a, prior)
                prior = (s["gamma"] - m) * prior
                y = feat(m * x)
                out = out + F.relu(y[:, :nd])
                a = y[:, nd:]
            return self.head(out)

    return TabNet()


def roihead_fixed_boxes(s: dict, size: int):
    """A fixed-box roihead's R boxes (x1, y1, x2, y2, in pixels) at an image size, drawn from the seed: centres
    uniform over the image, sides 1/16-1/2 of it (log-uniform), aspect 1/2-2, clipped to the image."""
    g = np.random.default_rng([FAMILIES.index("roihead"), s["seed"], size])
    n = s["rois"]
    c = g.uniform(0, size, (n, 2))
    side = size * np.exp(g.uniform(np.log(1 / 16), np.log(1 / 2), n))
    ar = np.exp(g.uniform(np.log(0.5), np.log(2.0), n))
    wh = np.stack([side * np.sqrt(ar), side / np.sqrt(ar)], 1)
    return np.clip(np.concatenate([c - wh / 2, c + wh / 2], 1), 0, size).astype(np.float32)


def _build_roihead(s, size):
    import torch
    import torch.nn as nn
    from torchvision.ops import roi_align
    stride, R0, o = s["stride"], s["rois"], s["out"]

    class Basic(nn.Module):
        """Two 3x3 conv-BN (ReLU), a residual (a 1x1 conv-BN shortcut where the shape changes)."""
        def __init__(self, cin, cout, st):
            super().__init__()
            self.a, self.b = _conv_bn(cin, cout, 3, st), _conv_bn(cout, cout, 3, act=None)
            self.short = None if st == 1 and cin == cout else _conv_bn(cin, cout, 1, st, act=None)

        def forward(self, x):
            return torch.relu(self.b(self.a(x)) + (x if self.short is None else self.short(x)))

    class RoIHead(nn.Module):
        """Backbone -> one map at `stride` (neck_w channels) -> rois [B R, 5] (batch index, x1, y1, x2, y2) ->
        RoiAlign [B R, C, o, o] -> box head -> [B, R, classes + 4 (classes or 1)] (logits, box deltas)."""
        def __init__(self):
            super().__init__()
            self.stem = _conv_bn(3, s["stem_w"], 3, 2)
            stages, c = [], s["stem_w"]
            for w, d in zip(s["widths"], s["depths"]):
                stages.append(nn.Sequential(*[Basic(c if j == 0 else w, w, 2 if j == 0 else 1) for j in range(d)]))
                c = w
            self.stages = nn.ModuleList(stages)
            nw = s["neck_w"]
            self.lat = nn.Conv2d(s["widths"][-1], nw, 1)
            if s["fpn"]:   # the last map upsampled x2 onto a 1x1 lateral of the one before, then a 3x3 conv
                self.lat2, self.smooth = nn.Conv2d(s["widths"][-2], nw, 1), nn.Conv2d(nw, nw, 3, 1, 1)
            h = size // stride
            if s["boxes"] == "proposals":   # an RPN: a 3x3 conv, objectness and deltas for 3 anchors a pixel
                self.rpn = nn.Sequential(nn.Conv2d(nw, nw, 3, 1, 1), nn.ReLU())
                self.obj, self.reg = nn.Conv2d(nw, 3, 1), nn.Conv2d(nw, 12, 1)
                ys, xs = torch.meshgrid(torch.arange(h), torch.arange(h), indexing="ij")
                ctr = (torch.stack([xs, ys], -1).reshape(-1, 1, 2).float() + 0.5) * stride      # [h w, 1, 2]
                side = 4.0 * stride
                wh = torch.tensor([[side * r ** 0.5, side / r ** 0.5] for r in (0.5, 1.0, 2.0)])  # [3, 2]
                self.register_buffer("anchors", torch.cat([ctr - wh / 2, ctr + wh / 2], -1).reshape(-1, 4))
                self.R = min(R0, 3 * h * h)
            else:
                self.register_buffer("fixed", torch.from_numpy(roihead_fixed_boxes(s, size)))
                self.R = R0
            nc = s["classes"]
            if s["head"] == "fc":
                self.box_head = nn.Sequential(nn.Flatten(1), nn.Linear(nw * o * o, s["hidden"]), nn.ReLU(),
                                              nn.Linear(s["hidden"], s["hidden"]), nn.ReLU())
            else:
                convs = [_conv_bn(nw if i == 0 else s["head_w"], s["head_w"], 3) for i in range(s["head_convs"])]
                self.box_head = nn.Sequential(*convs, nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
                                              nn.Linear(s["head_w"], s["hidden"]), nn.ReLU())
            self.cls = nn.Linear(s["hidden"], nc)
            self.box = nn.Linear(s["hidden"], 4 * (nc if s["deltas"] == "class" else 1))

        def boxes(self, f):
            """[B, R, 4]: the fixed boxes, or the top-R anchors by objectness (TopK over h w 3, a TopK sorting the R
            indices, Gathers), moved by their deltas (centre + d w, size x exp(d), the exp clamped as torchvision's)
            and clipped."""
            b = f.shape[0]
            if s["boxes"] == "fixed":
                return self.fixed.expand(b, self.R, 4)
            t = self.rpn(f)
            score = self.obj(t).permute(0, 2, 3, 1).reshape(b, -1)
            delta = self.reg(t).permute(0, 2, 3, 1).reshape(b, -1, 4)
            # the top R anchors, then in anchor order (a sort of the R indices): near-equal scores among the R
            # would otherwise order the output's rows by float rounding
            idx = score.topk(self.R, dim=1).indices.sort(dim=1).values           # [B, R]
            d = delta.gather(1, idx[..., None].expand(b, self.R, 4))
            a = self.anchors[idx]                                                  # [B, R, 4]
            wa, ha = a[..., 2] - a[..., 0], a[..., 3] - a[..., 1]
            cx, cy = a[..., 0] + 0.5 * wa + d[..., 0] * wa, a[..., 1] + 0.5 * ha + d[..., 1] * ha
            w = wa * torch.exp(d[..., 2].clamp(max=math.log(1000.0 / 16)))
            hh = ha * torch.exp(d[..., 3].clamp(max=math.log(1000.0 / 16)))
            return torch.stack([cx - w / 2, cy - hh / 2, cx + w / 2, cy + hh / 2], -1).clamp(0, size)

        def forward(self, x):
            b = x.shape[0]
            y, maps = self.stem(x), []
            for st in self.stages:
                y = st(y)
                maps.append(y)
            f = self.lat(maps[-1])
            if s["fpn"]:
                f = self.smooth(self.lat2(maps[-2]) + nn.functional.interpolate(f, scale_factor=2.0, mode="nearest"))
            boxes = self.boxes(f)
            idx = torch.arange(b, dtype=x.dtype)[:, None, None].expand(b, self.R, 1)
            rois = torch.cat([idx, boxes], -1).reshape(-1, 5)
            pooled = roi_align(f, rois, output_size=o, spatial_scale=1.0 / stride, sampling_ratio=s["sampling"],
                               aligned=s["aligned"])                                # [B R, C, o, o]
            z = self.box_head(pooled)
            return torch.cat([self.cls(z), self.box(z)], -1).reshape(b, self.R, -1)

    return RoIHead()


def _build_sinkhorn(s, size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    D, N, T = s["dim"], size, s["iters"]

    class Propagation(nn.Module):
        """SuperGlue's attentional propagation: multi-head attention of a set's points to its own set (self) or to
        the other (cross: the two sets swapped by a flip), the message through an MLP of [x, message] (Linear,
        LayerNorm, act, Linear), a residual."""
        def __init__(self):
            super().__init__()
            self.h = s["heads"]
            self.q, self.kv, self.merge = nn.Linear(D, D), nn.Linear(D, 2 * D), nn.Linear(D, D)
            self.mlp = nn.Sequential(nn.Linear(2 * D, 2 * D), nn.LayerNorm(2 * D), _act(s["act"]),
                                     nn.Linear(2 * D, D))

        def forward(self, x, src):                              # [B, 2, N, D] each
            b, h, dh = x.shape[0], self.h, D // self.h
            q = self.q(x).reshape(b * 2, N, h, dh).transpose(1, 2)
            k, v = self.kv(src).reshape(b * 2, N, 2, h, dh).permute(2, 0, 3, 1, 4)
            if s["attn"] == "sdpa":
                m = F.scaled_dot_product_attention(q, k, v)
            else:
                m = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), -1) @ v
            m = self.merge(m.transpose(1, 2).reshape(b, 2, N, D))
            return x + self.mlp(torch.cat([x, m], -1))

    class Matcher(nn.Module):
        """[B, 2, N, 3 + desc] (x, y, score, descriptor of each keypoint of both images) -> descriptors [B, 2, N,
        D] (a Linear of the descriptor + an MLP of (x, y, score), or one Linear of all) -> layers alternating self
        and cross -> a final Linear -> scores d0 d1^T / sqrt(D) [B, N, N] (with a learned dustbin row and column:
        [B, N + 1, N + 1]) -> T log-domain Sinkhorn iterations (u = log mu - logsumexp_j(Z + v), v = log nu -
        logsumexp_i(Z + u): ReduceLogSumExp over rows, then columns) -> the log assignment Z + u + v - norm."""
        def __init__(self):
            super().__init__()
            if s["kenc"]:
                self.desc = nn.Linear(s["desc"], D)
                self.kenc = nn.Sequential(nn.Linear(3, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 64),
                                          nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, D))
            else:
                self.desc = nn.Linear(s["f_in"], D)
            self.layers = nn.ModuleList([Propagation() for _ in range(s["layers"])])
            self.final = nn.Linear(D, D)
            if s["dustbin"]:
                self.bin = nn.Parameter(torch.tensor(1.0))
                norm = -math.log(2 * N)
                self.norm = norm
                mu = torch.full((N + 1,), norm)
                mu[-1] = math.log(N) + norm
                self.register_buffer("log_mu", mu)
            else:
                self.norm = -math.log(N)
                self.register_buffer("log_mu", torch.full((N,), self.norm))

        def forward(self, x):
            b = x.shape[0]
            if s["kenc"]:
                d = self.desc(x[..., 3:]) + self.kenc(x[..., :3])
            else:
                d = self.desc(x)
            for i, layer in enumerate(self.layers):
                d = layer(d, d if i % 2 == 0 else d.flip(1))
            d = self.final(d)
            z = d[:, 0] @ d[:, 1].transpose(-1, -2) / math.sqrt(D)                 # [B, N, N]
            if s["dustbin"]:
                z = torch.cat([torch.cat([z, self.bin.expand(b, N, 1)], -1), self.bin.expand(b, 1, N + 1)], 1)
            u = torch.zeros_like(z[:, :, 0])
            v = torch.zeros_like(z[:, 0, :])
            for _ in range(T):
                u = self.log_mu - torch.logsumexp(z + v[:, None, :], 2)
                v = self.log_mu - torch.logsumexp(z + u[:, :, None], 1)
            return z + u[:, :, None] + v[:, None, :] - self.norm

    return Matcher()


def nmsdet_points(s: dict, size: int) -> int:
    """Anchor points an image: the last `levels` maps' pixels (the stem and every stage stride 2)."""
    n = len(s["widths"])
    return sum((size // 2 ** (n + 1 - i)) ** 2 for i in range(s["levels"]))


def _build_nmsdet(s, size):
    import torch
    import torch.nn as nn
    from torchvision.ops import nms
    nc = s["classes"]

    class Basic(nn.Module):
        """Two 3x3 conv-BN (ReLU), a residual (a 1x1 conv-BN shortcut where the shape changes)."""
        def __init__(self, cin, cout, st):
            super().__init__()
            self.a, self.b = _conv_bn(cin, cout, 3, st), _conv_bn(cout, cout, 3, act=None)
            self.short = None if st == 1 and cin == cout else _conv_bn(cin, cout, 1, st, act=None)

        def forward(self, x):
            return torch.relu(self.b(self.a(x)) + (x if self.short is None else self.short(x)))

    class NMSDet(nn.Module):
        """Backbone -> the last `levels` maps, each a 1x1 lateral to neck_w -> a head shared by the levels (3x3
        conv-ReLUs, then class logits and 4 box distances by 1x1 convs) -> points [B, A] -> the top K an image by
        their best class score (ReduceMax, ArgMax, TopK, Gathers) -> (score > threshold: NonZero) -> boxes decoded
        (point -/+ exp(distance) x stride) -> one NonMaxSuppression over all images' boxes (each offset by its image
        and, class-aware, its class) -> the first B max_det kept -> [M, 7] (image, x1, y1, x2, y2, score, class)."""
        def __init__(self):
            super().__init__()
            self.stem = _conv_bn(3, s["stem_w"], 3, 2)
            stages, c = [], s["stem_w"]
            for w, d in zip(s["widths"], s["depths"]):
                stages.append(nn.Sequential(*[Basic(c if j == 0 else w, w, 2 if j == 0 else 1) for j in range(d)]))
                c = w
            self.stages = nn.ModuleList(stages)
            nw, L = s["neck_w"], s["levels"]
            self.lat = nn.ModuleList(nn.Conv2d(w, nw, 1) for w in s["widths"][-L:])
            self.tower = nn.Sequential(*[m for _ in range(s["head_convs"])
                                         for m in (nn.Conv2d(nw, nw, 3, 1, 1), nn.ReLU())])
            self.cls, self.reg = nn.Conv2d(nw, nc, 1), nn.Conv2d(nw, 4, 1)
            n, pts, strides = len(s["widths"]), [], []
            for i in range(L):   # level i: stride 2^(n + 1 - (L - 1 - i))
                st = 2 ** (n + 1 - (L - 1 - i))
                h = size // st
                ys, xs = torch.meshgrid(torch.arange(h), torch.arange(h), indexing="ij")
                pts.append((torch.stack([xs, ys], -1).reshape(-1, 2).float() + 0.5) * st)
                strides.append(torch.full((h * h, 1), float(st)))
            self.register_buffer("points", torch.cat(pts))          # [A, 2]
            self.register_buffer("strides", torch.cat(strides))     # [A, 1]
            self.K = min(s["topk"], self.points.shape[0])

        def forward(self, x):
            b = x.shape[0]
            y, maps = self.stem(x), []
            for st in self.stages:
                y = st(y)
                maps.append(y)
            logits, dists = [], []
            for lat, m in zip(self.lat, maps[-len(self.lat):]):
                t = self.tower(lat(m))
                logits.append(self.cls(t).flatten(2))
                dists.append(self.reg(t).flatten(2))
            logits = torch.cat(logits, 2).transpose(1, 2)            # [B, A, classes]
            dists = torch.cat(dists, 2).transpose(1, 2)              # [B, A, 4]
            score, label = torch.sigmoid(logits).max(-1)             # [B, A]
            # the top K points, then in point order (a TopK sorting the K indices), as roihead's proposals
            idx = score.topk(self.K, dim=1).indices.sort(dim=1).values  # [B, K]
            top, lab = score.gather(1, idx), label.gather(1, idx)
            d = torch.exp(dists.gather(1, idx[..., None].expand(b, self.K, 4)).clamp(max=6.0)) * self.strides[idx]
            p = self.points[idx]                                     # [B, K, 2]
            boxes = torch.cat([p - d[..., :2], p + d[..., 2:]], -1).clamp(0, size)  # [B, K, 4]
            img = torch.arange(b, dtype=x.dtype)[:, None].expand(b, self.K)
            boxes, top, lab, img = boxes.reshape(-1, 4), top.reshape(-1), lab.reshape(-1), img.reshape(-1)
            if s["threshold"] > 0:                                   # a data-dependent count: NonZero
                keep = (top > s["threshold"]).nonzero()[:, 0]
                boxes, top, lab, img = boxes[keep], top[keep], lab[keep], img[keep]
            group = img * nc + lab.to(x.dtype) if s["nms"] == "class" else img
            off = group[:, None] * (size + 1.0)                     # boxes of other groups never overlap
            # the best B max_det kept, then in box order (a TopK sorting them): near-equal scores of two images
            # would otherwise order the output's rows by float rounding
            kept = nms(boxes + off, top, s["iou"])[: b * s["max_det"]].sort().values
            return torch.cat([img[kept, None], boxes[kept], top[kept, None], lab[kept, None].to(x.dtype)], 1)

    return NMSDet()


def input_shape(spec: dict, batch: int, size: int) -> tuple:
    if spec["family"] == "implicit":  # N points of 3 coordinates, points first: [B, N, 3]
        return (batch, size, 3)
    if spec["family"] in SEQUENCE:  # [B, S, F]: F is a conformer's or vocoder's mel bins, a tcn's, rnn's or ssm's
        # C_in, else D
        f = {"conformer": "mels", "vocoder": "mels", "tcn": "c_in", "rnn": "c_in", "ssm": "c_in"}
        f = f.get(spec["family"], "dim")
        return (batch, size, spec[f])
    if spec["family"] in ("gan", "diffusion"):  # a latent grid [B, z, s, s] or an image (diffusion: 3 or 4 channels)
        return (batch, spec["in_ch"], size, size)
    if spec["family"] in ("pointnet", "dgcnn"):  # N points of 3 coordinates
        return (batch, 3, size)
    if spec["family"] in ("wav2vec", "tasnet"):  # a mono waveform of T samples
        return (batch, 1, size)
    if spec["family"] == "wavenet":  # C_in channels (1: a waveform; 16-80: features) of T steps, channels first
        return (batch, spec["c_in"], size)
    if spec["family"] == "video3d":  # a clip of T frames of size x size
        return (batch, 3, spec["frames"], size, size)
    if spec["family"] == "dlrm":  # dense features then `size` lookups per table, packed in one float tensor
        return (batch, 1, spec["n_dense"] + spec["tables"] * size)
    if spec["family"] == "gnn":  # N nodes: F_in features then the N adjacency columns, packed in one float tensor
        return (batch, size, spec["f_in"] + size)
    if spec["family"] == "raft":  # two RGB frames stacked on the channels
        return (batch, 6, size, size)
    if spec["family"] in ("fttransformer", "kan", "neuralode", "tabnet"):  # a table's rows: F numeric features each
        return (batch, size)
    if spec["family"] == "sinkhorn":  # both images' N keypoints: x, y, score and a descriptor each
        return (batch, 2, size, spec["f_in"])
    if spec["family"] == "capsnet":  # grey or RGB
        return (batch, spec["in_ch"], size, size)
    return (batch, 3, size, size)


def file_stem(spec: dict, batch: int, size: int) -> str:
    """<arch>_bs<B>_<H>x<W>; an encoder's or decoder's 'H x W' is sequence x width, a conformer's frames x mel
    bins, a tcn's, an rnn's or an ssm's time steps x input channels, a pointnet's 3 x points, a wav2vec's 1 x
    samples, a video3d's H x W (its frames are fixed per architecture), a dlrm's 1 x (dense features + tables x
    lookups per table), a vocoder's frames x 80 mel bins, a superres's H x W, a gnn's N x (F_in + N), a diffusion's
    H x W, an implicit model's points x 3, a tasnet's 1 x samples, an hrnet's or a raft's H x W, an fttransformer's
    or a tabnet's 1 x features (its input [B, F] has no H), a wavenet's C_in x time steps, a t5enc's sequence x
    width, a dgcnn's 3 x points, a sinkhorn's keypoints x (3 + descriptor)."""
    shape = input_shape(spec, batch, size)
    h = shape[-2] if len(shape) > 2 else 1
    return Path(paths.model_file(spec["arch"], batch, h, shape[-1])).stem


def forward_gflop(model, shape) -> float:
    """FLOPs of one forward pass (torch's counter: 2 per multiply-add), in GFLOP."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    # an LSTM on the CPU runs as one oneDNN kernel the counter does not see: count it on the native path, as a GRU
    # (not torch.backends.mkldnn.flags(), which warns about Intel GPUs' TF32 on every entry and exit)
    rnn, was = any(isinstance(m, torch.nn.RNNBase) for m in model.modules()), torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(was and not rnn)
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            model(torch.zeros(shape))
    finally:
        torch._C._set_mkldnn_enabled(was)
    return fc.get_total_flops() / 1e9
