"""The shipped workload catalogue: completeness, provenance and golden figures.

These tests read only ``features/catalog/workloads.json`` through
``features.workloads`` (no torch). The figures were counted by
``python -m features.workload_counting``; here they are checked against
published numbers and hand counts, each with its citation and tolerance.
"""

from __future__ import annotations

import math

import numpy as np

import pytest

from features.catalog_base import PROVENANCE_KINDS
from features.errors import UnknownNameError
from features.workloads import FIGURES, WorkloadSpec, workload_catalog

REQUIRED = (
    "googlenet", "resnet50", "resnet152", "densenet121", "vgg16", "inception-v3", "ssd300-vgg16",
    "ssd300-resnet50", "faster-rcnn", "mask-rcnn", "retinanet", "crnn", "gnmt", "bert-base", "bert-large",
    "bert-base-squad", "bert-large-squad", "transformer", "transformer-xl-base", "transformer-xl-large",
    "tacotron2", "waveglow", "din", "dien", "ncf", "wide-deep", "gcn", "unet3d", "dlrm-dcnv2", "rnnt",
    "llama2-70b-lora", "gpt3-175b", "stable-diffusion", "rgat",
    "testbed-recsys", "testbed-resnet", "testbed-transformer",
)  # fmt: skip


def spec(name: str) -> WorkloadSpec:
    return workload_catalog().get(name)


def test_every_catalogue_name_is_present():
    names = set(workload_catalog().workloads.names())
    assert set(REQUIRED) <= names


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("nmt", "gnmt"),
        ("gnn", "rgat"),
        ("bert_base", "bert-base"),
        ("mask_rcnn", "mask-rcnn"),
        ("inception_v3", "inception-v3"),
        ("wide_and_deep", "wide-deep"),
        ("dlrm", "dlrm-dcnv2"),
        ("gpt3", "gpt3-175b"),
        ("llama2_70b_lora", "llama2-70b-lora"),
        ("stable_diffusion", "stable-diffusion"),
        ("unet3d", "unet3d"),
        ("retinanet", "retinanet"),
        ("mlperf-retinanet", "retinanet-fused-loss"),
        ("transformerxlbase", "transformer-xl-base"),
        ("bert_large_squad", "bert-large-squad"),
        ("ResNet-50", "resnet50"),
    ],
)
def test_aliases_resolve(alias, name):
    assert spec(alias).name == name


@pytest.mark.parametrize("ambiguous", ["ssd", "bert", "transformer-xl", "resnet", "llama2-70b"])
def test_ambiguous_names_do_not_resolve(ambiguous):
    with pytest.raises(UnknownNameError):
        spec(ambiguous)


@pytest.mark.parametrize("name", REQUIRED)
def test_every_figure_has_provenance_and_source(name):
    w = spec(name)
    for figure in FIGURES:
        assert w.provenance[figure] in PROVENANCE_KINDS
        assert len(w.source[figure]) > 10
    assert w.flops_per_sample > 0
    assert w.memory_bytes_per_sample_fp32 > 0
    assert w.input_bytes_per_sample > 0
    assert 0 < w.dense_param_count <= w.param_count
    assert w.default_batch_size_per_gpu >= 1
    assert w.source.get("default_batch_size_per_gpu")


@pytest.mark.parametrize("name", REQUIRED)
def test_counted_sources_record_library_versions(name):
    w = spec(name)
    if w.provenance["flops_per_sample"] == "counted":
        assert "torch 2.14.1" in w.source["flops_per_sample"]
        assert "torchvision 0.29.1" in w.source["flops_per_sample"]


# Published forward multiply-adds at the default resolution (torchvision model
# documentation, "GFLOPS" column, which counts multiply-adds). Training is
# forward + backward = 3 x forward, a multiply-add being 2 FLOPs: 6 x GMACs.
# Tolerance 5%: the first convolution needs no input gradient, and
# torchvision's GoogLeNet differs slightly from the paper's.
@pytest.mark.parametrize(
    ("name", "forward_gmacs"),
    [
        ("resnet50", 4.09),  # He et al. 2016 quote 3.8 G for v1; v1.5 is 4.1 G
        ("resnet152", 11.51),
        ("vgg16", 15.47),
        ("densenet121", 2.83),
        ("inception-v3", 5.71),
        ("googlenet", 1.50),
    ],
)
def test_imagenet_flops_match_published_multiply_adds(name, forward_gmacs):
    assert spec(name).flops_per_sample == pytest.approx(6 * forward_gmacs * 1e9, rel=0.05)


def test_resnet50_parameters_match_torchvision():
    # torchvision ResNet50_Weights.IMAGENET1K_V1 meta: num_params 25,557,032.
    w = spec("resnet50")
    assert w.param_count == 25_557_032
    assert w.dense_param_count == w.param_count
    # The ~24.6 GFLOPs of 4.1 GMACs x 6, within 2%.
    assert w.flops_per_sample == pytest.approx(24.6e9, rel=0.02)


def transformer_training_flops(non_embedding_params: float, tokens: int, layers: int, width: int) -> float:
    """6 N T for the weights (Kaplan et al. 2020, arXiv:2001.08361, sec. 2.1) plus 12 L T^2 d for attention
    scores and values (forward 4 L T^2 d, backward twice that)."""
    return 6 * non_embedding_params * tokens + 12 * layers * tokens**2 * width


def test_bert_base_squad_flops_match_the_transformer_formula():
    # BERT-base (Devlin et al. 2019): 12 layers, d 768, FFN 3072: 12 * (4 d^2 + 2 * d * 3072) weights.
    n = 12 * (4 * 768**2 + 2 * 768 * 3072)
    expected = transformer_training_flops(n, 384, 12, 768)
    assert spec("bert-base-squad").flops_per_sample == pytest.approx(expected, rel=0.03)


def test_bert_large_pretraining_flops():
    # BERT-large: 24 layers, d 1024, FFN 4096; sequence 512; plus the MLM head on 76 positions
    # (1024^2 transform + 1024 x 30522 decoder), 6 FLOPs per weight per position.
    n = 24 * (4 * 1024**2 + 2 * 1024 * 4096)
    expected = transformer_training_flops(n, 512, 24, 1024) + 6 * 76 * (1024**2 + 1024 * 30522)
    w = spec("bert-large")
    assert w.flops_per_sample == pytest.approx(expected, rel=0.03)
    # Devlin et al. 2019: BERT-large has 340 M parameters.
    assert w.param_count == pytest.approx(340e6, rel=0.02)


def test_gpt3_flops_follow_six_n_t():
    # Brown et al. 2020 (arXiv:2005.14165) Table 2.1: 175.0 B parameters, 96 layers, d 12288, 2048 tokens.
    w = spec("gpt3-175b")
    assert w.param_count == pytest.approx(175.0e9, rel=0.01)
    expected = transformer_training_flops(w.param_count, 2048, 96, 12288)
    assert w.flops_per_sample == pytest.approx(expected, rel=0.02)
    assert w.tokens_per_sample == 2048


def test_llama2_lora_counts_adapters_as_dense_and_the_base_as_parameters():
    w = spec("llama2-70b-lora")
    # Rank 16 on the fused QKV (8192 -> 8192 + 2 * 1024) and output (8192 -> 8192) projections of 80 layers.
    assert w.dense_param_count == 80 * 16 * ((8192 + 10240) + (8192 + 8192))
    # Touvron et al. 2023 (arXiv:2307.09288): "70B" (68.98 B counted by the HF checkpoint).
    assert w.param_count == pytest.approx(69.0e9, rel=0.01)
    # Frozen weights get no weight gradient: 2 N T forward + 2 N T input gradients; flash attention
    # costs 2 matmuls of 2 L T^2 d forward and 5 backward: 7 * 2 * 80 * 8192^2 * 8192.
    t = 8192
    expected = 4 * w.param_count * t + 7 * 2 * 80 * t**2 * 8192
    assert w.flops_per_sample == pytest.approx(expected, rel=0.02)
    # Adapter gradients only: 89 MB in fp16 instead of 138 GB.
    assert w.gradient_bytes("fp16") == 2 * w.dense_param_count


def test_transformer_xl_base_parameters_by_hand():
    # DeepLearningExamples wt103_base.yaml: 16 layers, d 512, 8 heads of 64, FFN 2048, vocabulary 267,735
    # with tied adaptive softmax (div_val 1). Per layer: qkv 3 d^2, r_net d^2, o_net d^2, FFN with biases,
    # two layer norms.
    d, inner = 512, 2048
    layer = 5 * d * d + 2 * d * inner + inner + d + 4 * d
    expected = 267_735 * d + 16 * layer + 267_735 + 3 * d + 3 + 2 * 8 * 64
    assert spec("transformer-xl-base").param_count == expected


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        ("transformer-xl-base", 192),  # DLE wt103_base.yaml tgt_len 192
        ("transformer-xl-large", 384),  # DLE wt103_large.yaml tgt_len 384
        ("transformer-xl-large-256", 256),  # Lambda's config_v1 files: --tgt_len 256
        ("tacotron2", 566),  # LJSpeech mean clip 6.57 s * 22050 / 256 hop
        ("waveglow", 8000),  # --segment-length 8000
        ("gnmt", 56),  # source + target tokens of a 28-token sentence pair
        ("llama2-70b-lora", 8192),
    ],
)
def test_tokens_per_sample_of_token_throughput_models(name, tokens):
    w = spec(name)
    assert w.tokens_per_sample == tokens
    assert w.source["tokens_per_sample"]


def test_tacotron2_is_counted_on_its_padded_batch():
    # A batch pads to its longest clip (LJSpeech's run to 10 s): 10 s * 22050 Hz / 256 hop = 861 frames
    # that the decoder steps through, while the throughput counts the 566 real frames of a mean clip.
    w = spec("tacotron2")
    assert (w.sequence_length, w.tokens_per_sample) == (861, 566)
    assert w.provenance["sequence_length"] == "estimated"
    # A decoder step per padded frame, each some 40-odd kernels (27,823 forward kernels over 566 steps
    # before the padding was counted): the count follows the padded length.
    assert w.op_classes["kernels_forward"] > 861 * 40


def test_recommendation_tables_are_not_dense():
    for name in ("din", "dien", "ncf", "wide-deep", "dlrm-dcnv2"):
        w = spec(name)
        assert w.dense_param_count < 0.5 * w.param_count, name
    # NCF (DLE): MLP 256-256-128-64 plus the final 128 -> 1 layer, by hand.
    assert spec("ncf").dense_param_count == (256 * 256 + 256) + (256 * 128 + 128) + (128 * 64 + 64) + (128 + 1)
    # DLRM-DCNv2 (MLPerf): bottom 13-512-256-128, 3 cross layers of rank 512 on 27 * 128 = 3456 features,
    # top 3456-1024-1024-512-256-1.
    width = 27 * 128
    bottom = (13 * 512 + 512) + (512 * 256 + 256) + (256 * 128 + 128)
    cross = 3 * (width * 512 + 512 * width + width)
    top = (width * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 512 + 512) + (512 * 256 + 256) + (256 + 1)
    w = spec("dlrm-dcnv2")
    assert w.dense_param_count == bottom + cross + top
    assert w.param_count == pytest.approx(26.1e9, rel=0.01)


def test_original_dlrm_by_hand():
    # Bottom 13-512-256-128; the dot interaction of 27 vectors of 128: 351 products below the diagonal
    # plus the bottom output, 479 features; top 479-1024-1024-512-256-1.
    bottom = [(13, 512), (512, 256), (256, 128)]
    top = [(479, 1024), (1024, 1024), (1024, 512), (512, 256), (256, 1)]
    w = spec("dlrm-dot")
    assert w.dense_param_count == sum(a * b + b for a, b in bottom + top)
    # MLPerf's 26 tables capped at 40 M rows: 187,767,399 rows of 128.
    assert w.param_count == 187_767_399 * 128 + w.dense_param_count
    # Multiply-adds: the forward's layers and the 27 x 27 x 128 batched product; the backward doubles
    # each layer but the first (the dense input needs no gradient) and computes two products.
    forward = sum(a * b for a, b in bottom + top) + 27 * 27 * 128
    backward = 2 * sum(a * b for a, b in bottom + top) - 13 * 512 + 2 * 27 * 27 * 128
    assert w.flops_per_sample == 2 * (forward + backward) == 14_737_664
    # Its DeepLearningExamples sizes: the same network, the tables their frequency threshold leaves.
    sizes = [spec(f"dlrm-dot-fl{t}") for t in (15, 3, 2, 0)]
    assert [s.param_count for s in sizes] == sorted(s.param_count for s in sizes)
    assert {(s.flops_per_sample, s.dense_param_count, s.network_of) for s in sizes} == {(w.flops_per_sample, w.dense_param_count, "dlrm-dot")}
    assert spec("dlrm-dot-fl2").provenance["param_count"] == "estimated"
    assert spec("dlrm-dot-fl15").provenance["param_count"] == "published"


def test_testbed_recsys_exchanges_its_whole_table():
    w = spec("testbed-recsys")
    assert w.dense_param_count == w.param_count
    assert w.domain == "testbed"


def test_input_bytes_by_hand():
    assert spec("resnet50").input_bytes_per_sample == 3 * 224 * 224 + 8
    assert spec("unet3d").input_bytes_per_sample == 128**3 * (4 + 1)
    assert spec("gpt3-175b").input_bytes_per_sample == 2048 * 8


def test_arithmetic_intensity_is_flops_over_bytes_and_orders_the_workloads():
    for w in workload_catalog().workloads:
        ai = w.arithmetic_intensity_flops_per_byte
        assert math.isfinite(ai) and ai > 0
        assert ai == pytest.approx(w.flops_per_sample / w.memory_bytes_per_sample_fp32)
    # Large-matmul models sit far to the right of the roofline, embedding models far to the left.
    assert spec("gpt3-175b").arithmetic_intensity_flops_per_byte > spec("resnet50").arithmetic_intensity_flops_per_byte
    assert spec("resnet50").arithmetic_intensity_flops_per_byte > spec("din").arithmetic_intensity_flops_per_byte
    assert spec("vgg16").arithmetic_intensity_flops_per_byte > spec("densenet121").arithmetic_intensity_flops_per_byte


# FP8 training keeps and all-reduces its gradients in 16 bits (features.units.GRADIENT_BYTES_PER_ELEMENT).
@pytest.mark.parametrize(("precision", "element_bytes"), [("fp32", 4), ("tf32", 4), ("fp16", 2), ("bf16", 2), ("fp8", 2)])
def test_gradient_bytes_per_precision(precision, element_bytes):
    w = spec("resnet50")
    assert w.gradient_bytes(precision) == 25_557_032 * element_bytes


def test_ai_matrix_flags():
    ai_matrix = {w.name for w in workload_catalog().workloads if w.ai_matrix}
    # alibaba/ai-matrix macro_benchmark: CNN_Tensorflow (googlenet, resnet50, resnet152, densenet121, vgg16),
    # SSD (VGG), Faster_RCNN, Mask_RCNN, CRNN, NMT, BERT, DeepInterest (DIN, Wide & Deep), DIEN, NCF.
    assert {"googlenet", "resnet50", "vgg16", "din", "dien", "gnmt", "bert-base", "mask-rcnn"} <= ai_matrix
    assert not ({"gpt3-175b", "llama2-70b-lora", "rgat", "testbed-resnet"} & ai_matrix)


def test_layouts_of_one_network_name_it_and_nothing_else():
    from features.catalog_base import CATALOG_DIR, read_json
    from features.workloads import WorkloadCatalog

    cat = workload_catalog()
    variants = {w.name: w.network_of for w in cat.workloads if w.network_of is not None}
    assert variants == {
        "bert-large-unpadded": "bert-large", "bert-large-binned": "bert-large", "bert-large-seq128": "bert-large",
        "retinanet-fused-loss": "retinanet",
        **{f"dlrm-dot-fl{t}": "dlrm-dot" for t in (15, 3, 2, 0)},
        "transformer-xl-large-256": "transformer-xl-large",
        "transformer-xl-base-full-softmax": "transformer-xl-base", "transformer-xl-large-256-full-softmax": "transformer-xl-large",
    }
    # Same network, less work per sequence: the unpadded run computes on fewer tokens than the binned one,
    # and phase 1's 128 tokens on fewer still.
    names = ("bert-large", "bert-large-binned", "bert-large-unpadded", "bert-large-seq128")
    flops = {n: cat.get(n).flops_per_sample for n in names}
    assert flops["bert-large"] > flops["bert-large-binned"] > flops["bert-large-unpadded"] > flops["bert-large-seq128"]
    # One network: the same parameters (the position table keeps its 512 rows whatever the sequence).
    assert all(cat.get(n).param_count == cat.get("bert-large").param_count for n in names)
    # Lambda's Transformer-XL large: the same network on 256-token segments, under two thirds of the
    # 384-token work (its attention spans 512 positions instead of 768).
    large, short = cat.get("transformer-xl-large"), cat.get("transformer-xl-large-256")
    assert short.param_count == large.param_count
    assert short.flops_per_sample < large.flops_per_sample * 256 / 384
    # Without --adaptive, one 267,735-word softmax tied to a full-width embedding. Base (div_val 1): the same
    # parameters less the three cluster logits. Every token's logits span the vocabulary (forward and two backward
    # matmuls, 3 x 2 x 512 FLOPs a word) where the adaptive one computes the 20,000-wide head and, for a token in
    # a tail cluster, that cluster's words; under the probe's Zipf(1) tokens a tail holds sum_i p_i x width_i words.
    base, full = cat.get("transformer-xl-base"), cat.get("transformer-xl-base-full-softmax")
    assert full.param_count == base.param_count - 3 * (512 + 1)  # no cluster logits: 3 x (weight row + bias)
    harmonic = np.cumsum(1.0 / np.arange(1, 267735 + 1))
    ends = [0, 19997, 39997, 199997, 267735]
    share = [(harmonic[hi - 1] - (harmonic[lo - 1] if lo else 0.0)) / harmonic[-1] for lo, hi in zip(ends[:-1], ends[1:])]
    tail_words = sum(p * (hi - lo) for p, lo, hi in zip(share[1:], ends[1:-1], ends[2:]))
    extra = 192 * 3 * 2 * 512 * (267735 - (19997 + 3) - tail_words)
    assert full.flops_per_sample - base.flops_per_sample == pytest.approx(extra, rel=0.03)
    # Large (div_val 4): the four narrowing tables become one 267,735 x 1024 table plus its two 1024 x 1024 projections.
    full_large = cat.get("transformer-xl-large-256-full-softmax")
    adaptive_tables = 19997 * 1024 + 20000 * 256 + 160000 * 64 + 67738 * 16 + 3 * (1024 + 1)  # clusters and their logits
    adaptive_projs = 1024 * (1024 + 1024 + 256 + 64 + 16)  # the head's output projection and the four input ones
    full_tables = 267735 * 1024 + 2 * 1024 * 1024
    assert full_large.param_count == short.param_count - adaptive_tables - adaptive_projs + full_tables
    data = read_json(CATALOG_DIR / "workloads.json")
    for bad in ("no-such-workload", "bert-large-unpadded"):
        entries = [dict(e, network_of=bad) if e["name"] == "bert-large-unpadded" else e for e in data["workloads"]]
        with pytest.raises(ValueError, match="network_of"):
            WorkloadCatalog.from_dict({"workloads": entries})


def test_the_default_split_is_the_medians_of_the_counted_networks():
    from features import workloads
    from features.catalog_base import CATALOG_DIR, read_json

    m = workloads.counted_split_medians(read_json(CATALOG_DIR / "workloads.json")["workloads"])
    assert m["networks"] >= 40
    assert workloads.DEFAULT_MEMORY_BOUND_BYTE_SHARE == pytest.approx(m["memory_bound_byte_share"], abs=0.005)
    assert workloads.DEFAULT_BYTES_PER_OTHER_FLOP == pytest.approx(m["bytes_per_other_flop"], abs=0.05)
    for name in ("kernels_forward", "kernels_backward", "matrix_kernels", "kernels_optimizer_foreach"):
        assert abs(getattr(workloads, f"DEFAULT_{name.upper()}") - m[name]) <= 0.5, name


def test_the_fused_focal_loss_moves_less_and_computes_the_same():
    # apex's focal loss reads the logits once and writes the gradient once; torchvision's unfused
    # loss runs its element-wise chain over the logits and a dense one-hot target of the same size.
    cat = workload_catalog()
    plain, fused = cat.get("retinanet"), cat.get("retinanet-fused-loss")
    assert fused.flops_per_sample == plain.flops_per_sample and fused.param_count == plain.param_count
    assert fused.op_classes["matrix_flops_per_sample"] == plain.op_classes["matrix_flops_per_sample"]
    assert fused.op_classes["memory_bound_bytes_per_sample_fp32"] < 0.5 * plain.op_classes["memory_bound_bytes_per_sample_fp32"]
    assert fused.op_classes["kernels_forward"] < plain.op_classes["kernels_forward"]
