"""The MLPerf generative workloads: GPT-3 175B, Llama-2-70B LoRA fine-tuning, Stable Diffusion v2.

All three are built from configs (transformers, diffusers) on the meta
device: no weights exist, shapes propagate through every operator, so a
forward and backward pass is counted exactly without memory or time.
Attention is counted as the fused (flash) kernel the MLPerf implementations
run. Activation recomputation is not counted: these are model FLOPs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import FLOAT32_BYTES, INT64_BYTES, Probe, Recipe, configured


def _gpt3_probe() -> Probe:
    """GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, 2048 tokens."""
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415 - optional dependency

    config = GPT2Config(vocab_size=50257, n_positions=2048, n_embd=12288, n_layer=96, n_head=96)
    config._attn_implementation = "sdpa"
    model = GPT2LMHeadModel(config)

    def make_batch(b: int):
        return torch.zeros(b, 2048, dtype=torch.long)

    def loss(m: nn.Module, tokens):
        return m(input_ids=tokens, labels=tokens).loss

    return Probe(model, make_batch, loss)


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update ``B(A(dropout(x))) * alpha / r``.

    ``lora_a`` may be shared by several layers that read the same input
    (the fused QKV projection of the MLPerf Llama-2 checkpoint is three HF
    projections sharing one A; their B matrices together are the fused B).
    """

    def __init__(self, base: nn.Linear, lora_a: nn.Linear, rank: int, alpha: float, dropout: float) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = lora_a
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)
        nn.init.zeros_(self.lora_b.weight)
        self.dropout = nn.Dropout(dropout)
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_b(self.lora_a(self.dropout(x))) * self.scale


LORA_RANK = 16
LORA_ALPHA = 32
LORA_DROPOUT = 0.1
LLAMA_SEQ = 8192


def _llama_lora_probe() -> Probe:
    """Llama-2-70B with rank-16 LoRA on the fused QKV and output projections (MLPerf Training)."""
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        max_position_embeddings=LLAMA_SEQ,
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).requires_grad_(False)
    for layer in model.model.layers:
        attn = layer.self_attn
        shared_a = nn.Linear(config.hidden_size, LORA_RANK, bias=False)
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(attn, name, LoRALinear(getattr(attn, name), shared_a, LORA_RANK, LORA_ALPHA, LORA_DROPOUT))
        o_a = nn.Linear(config.hidden_size, LORA_RANK, bias=False)
        attn.o_proj = LoRALinear(attn.o_proj, o_a, LORA_RANK, LORA_ALPHA, LORA_DROPOUT)

    def make_batch(b: int):
        return torch.zeros(b, LLAMA_SEQ, dtype=torch.long)

    def loss(m: nn.Module, tokens):
        return m(input_ids=tokens, labels=tokens).loss

    return Probe(model, make_batch, loss)


class StableDiffusionStep(nn.Module):
    """One Stable Diffusion v2 training step on pre-encoded latents (MLPerf Training).

    The frozen OpenCLIP ViT-H text tower (HF CLIPTextModel, 23 layers of
    width 1024, as SD 2 uses the penultimate layer) encodes the 77-token
    caption; the trainable UNet (SD 2 base config: 320/640/1280/1280
    channels, linear-projection transformers, cross-attention width 1024)
    predicts the noise added to the 4 x 64 x 64 latent; MSE loss. MLPerf
    feeds latent moments precomputed by the VAE, so the VAE does not run.
    """

    def __init__(self) -> None:
        super().__init__()
        from diffusers import UNet2DConditionModel  # noqa: PLC0415 - optional dependency
        from transformers import CLIPTextConfig, CLIPTextModel  # noqa: PLC0415

        text_config = CLIPTextConfig(
            vocab_size=49408,
            hidden_size=1024,
            intermediate_size=4096,
            num_hidden_layers=23,
            num_attention_heads=16,
            max_position_embeddings=77,
            hidden_act="gelu",
            projection_dim=512,
        )
        text_config._attn_implementation = "sdpa"
        self.text_encoder = CLIPTextModel(text_config).requires_grad_(False)
        self.unet = UNet2DConditionModel(
            sample_size=64,
            in_channels=4,
            out_channels=4,
            down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
            block_out_channels=(320, 640, 1280, 1280),
            layers_per_block=2,
            attention_head_dim=(5, 10, 20, 20),
            cross_attention_dim=1024,
            use_linear_projection=True,
        )

    def forward(self, latents, noise, timesteps, caption_ids) -> torch.Tensor:
        with torch.no_grad():
            context = self.text_encoder(input_ids=caption_ids).last_hidden_state
        noisy = latents + noise  # the scheduler's scaling is element-wise and negligible
        prediction = self.unet(noisy, timesteps, encoder_hidden_states=context).sample
        return F.mse_loss(prediction, noise)


def _sd_probe() -> Probe:
    def make_batch(b: int):
        return (
            torch.randn(b, 4, 64, 64),
            torch.randn(b, 4, 64, 64),
            torch.zeros(b, dtype=torch.long),
            torch.zeros(b, 77, dtype=torch.long),
        )

    def loss(m: nn.Module, batch):
        return m(*batch)

    return Probe(StableDiffusionStep(), make_batch, loss)


MLPERF_V31 = "MLPerf Training v3.1 results (mlcommons/training_results_v3.1)"
VERSIONS = "transformers 5.24.0"

RECIPES = [
    Recipe(
        name="gpt3-175b",
        aliases=("gpt3", "gpt-3", "gpt3_175b", "gpt-3-175b"),
        domain="generative",
        description="GPT-3 175B pre-training, 2048-token sequences (MLPerf Training gpt3)",
        architecture=f"{VERSIONS} GPT2LMHeadModel from GPT2Config(n_layer=96, n_embd=12288, n_head=96, "
        "n_positions=2048, vocab 50257) (Brown et al. 2020, arXiv:2005.14165, Table 2.1)",
        build=_gpt3_probe,
        input_bytes_per_sample=2048 * INT64_BYTES,
        input_bytes_source="2048 int64 token ids: 16,384 B (labels are the shifted inputs)",
        default_batch_size_per_gpu=1,
        sequence_length=2048,
        sample_unit="sequences",
        tokens_per_sample=2048,
        extra_sources={
            "sequence_length": configured("GPT-3 context length 2048 (Brown et al. 2020), as in MLPerf"),
            "tokens_per_sample": configured("one sequence of 2048 tokens"),
            "default_batch_size_per_gpu": configured("micro-batch 1 per GPU (Megatron-style tensor and pipeline "
                                                      "parallelism; the data-parallel batch is spread over many GPUs)"),
        },
        notes="Trained with tensor and pipeline parallelism: only 1/(TP*PP) of the gradient is all-reduced per "
        "data-parallel rank. Sanity check: 6 * N * tokens = 6 * 174.6e9 * 2048 = 2.15e15 FLOPs, plus attention.",
    ),
    Recipe(
        name="llama2-70b-lora",
        aliases=("llama2_70b_lora", "llama-2-70b-lora", "llama2-lora"),
        domain="generative",
        description="Llama-2-70B LoRA fine-tuning (rank 16 on fused QKV and output projections), 8192-token "
        "GovReport sequences (MLPerf Training llama2_70b_lora)",
        architecture=f"{VERSIONS} LlamaForCausalLM from LlamaConfig(80 layers, hidden 8192, 64 heads, 8 KV heads, "
        "intermediate 28672, vocab 32000) with LoRA r=16, alpha=32, dropout 0.1 on qkv_proj and o_proj "
        "(mlcommons/training llama2_70b_lora README and scripts/train.py)",
        build=_llama_lora_probe,
        input_bytes_per_sample=2 * LLAMA_SEQ * INT64_BYTES,
        input_bytes_source="8192 int64 input ids + 8192 int64 labels: 131,072 B",
        default_batch_size_per_gpu=1,
        sequence_length=LLAMA_SEQ,
        sample_unit="sequences",
        tokens_per_sample=LLAMA_SEQ,
        extra_sources={
            "sequence_length": configured("mlcommons/training llama2_70b_lora README: --max_seq_len 8192"),
            "tokens_per_sample": configured("one sequence of 8192 tokens"),
            "default_batch_size_per_gpu": configured(
                "mlcommons/training llama2_70b_lora README: --per_device_train_batch_size 1"
            ),
        },
        notes="dense_param_count is the LoRA adapter (what data-parallel ranks all-reduce); param_count includes the "
        "frozen 69B base. Frozen weights get no weight gradient, so backward costs about one forward: "
        "FLOPs ~ 4 * N * tokens + attention, not 6 * N * tokens. The reference recomputes activations "
        "(gradient checkpointing), which these model FLOPs do not include.",
    ),
    Recipe(
        name="stable-diffusion",
        aliases=("stable_diffusion", "stable-diffusion-v2", "sd-v2", "stablediffusion"),
        domain="generative",
        description="Stable Diffusion v2 UNet training at 512x512 (4x64x64 latents), OpenCLIP ViT-H text encoder "
        "frozen (MLPerf Training stable_diffusion)",
        architecture="diffusers 0.42.1 UNet2DConditionModel with the SD 2 base config and "
        f"{VERSIONS} CLIPTextModel (OpenCLIP ViT-H/14 text tower, 23 layers) (Rombach et al. 2022, arXiv:2112.10752), "
        "features.model_defs.generative.StableDiffusionStep",
        build=_sd_probe,
        input_bytes_per_sample=8 * 64 * 64 * FLOAT32_BYTES + 77 * INT64_BYTES,
        input_bytes_source="precomputed VAE latent moments 8x64x64 float32 (131,072 B) + 77 int64 caption ids (616 B)",
        default_batch_size_per_gpu=32,
        input_shape=(4, 64, 64),
        sample_unit="images",
        extra_sources={
            "default_batch_size_per_gpu": configured(f"{MLPERF_V31}: global batch 2048 over 64 accelerators"),
        },
        notes="param_count includes the frozen text encoder; dense_param_count is the UNet.",
    ),
]
