"""A decoder transformer from its shape: parameters, FLOPs per token and memory per GPU.

Two families:

* ``gpt``: pre-norm blocks with LayerNorm, biases, a GELU MLP of two matrices
  (``ffn_hidden_size``, default 4h) and learned position embeddings; the
  output projection shares the token embedding (GPT-2/GPT-3, Megatron).
* ``llama``: RMSNorm without biases, a SwiGLU MLP of three matrices,
  grouped-query attention with ``kv_heads`` key/value heads, rotary positions
  (no parameters) and an untied output projection.

FLOPs count a multiply-add as 2 and cover every matrix multiplication: the
QKV, output and MLP projections, the attention scores (QK^T) and their
product with V over the full sequence (no causal halving, as FlopCounterMode
and Megatron count them), and the logits. Norms, softmax and activations are
left out (a fraction of a percent). Backward costs twice the forward (input
and weight gradients); a frozen matrix (LoRA's base) costs once (input
gradient only).

Memory follows mixed-precision Adam (Rajbhandari et al. 2020, ZeRO): 2 bytes
of BF16 weights, 2 of gradients and 12 of FP32 master weights, momentum and
variance per trained parameter, divided over the data-parallel group as the
sharding says; activations per layer follow Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models", Table 2),
generalised from the GPT block to the shape's FFN width and KV heads.
"""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("gpt", "llama")
RECOMPUTE_MODES = ("none", "selective", "full")
SHARDING_MODES = ("none", "optimizer", "gradients", "full")

#: Mixed-precision Adam per trained parameter (ZeRO paper, section 3.1).
WEIGHT_BYTES_PER_PARAM = 2.0
GRADIENT_BYTES_PER_PARAM = 2.0
OPTIMIZER_BYTES_PER_PARAM = 12.0
#: Activations are stored in BF16/FP16 (2 bytes); logits in FP32 for the loss.
ACTIVATION_BYTES_PER_ELEMENT = 2.0
LOGIT_BYTES_PER_ELEMENT = 4.0


@dataclass(frozen=True)
class TransformerShape:
    """The shape of a decoder transformer; ``lora_rank`` set means a LoRA fine-tune of it."""

    family: str
    layers: int
    hidden_size: int
    ffn_hidden_size: int
    attention_heads: int
    kv_heads: int
    vocab_size: int
    sequence_length: int
    lora_rank: int | None = None

    @property
    def head_dim(self) -> float:
        return self.hidden_size / self.attention_heads

    @property
    def kv_hidden_size(self) -> float:
        """Width of K (and of V): kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.family == "llama" else 2

    # -- parameters ---------------------------------------------------------

    def layer_param_count(self) -> float:
        """Parameters of one block (weights, biases and norms)."""
        h, f, kv = self.hidden_size, self.ffn_hidden_size, self.kv_hidden_size
        attention = h * (h + 2 * kv) + h * h
        mlp = self.mlp_matrices * h * f
        if self.family == "llama":
            return attention + mlp + 2 * h  # two RMSNorm gains
        biases = (h + 2 * kv) + h + f + h
        return attention + mlp + biases + 4 * h  # two LayerNorms (gain and bias)

    def embedding_param_count(self) -> float:
        """Token (and position) embeddings, the final norm and an untied output projection."""
        h, v = self.hidden_size, self.vocab_size
        if self.family == "llama":
            return 2 * v * h + h
        return v * h + self.sequence_length * h + 2 * h

    def param_count(self) -> float:
        """All parameters of the model (frozen base included for a LoRA fine-tune)."""
        return self.layers * self.layer_param_count() + self.embedding_param_count()

    def adapter_param_count(self) -> float:
        """LoRA adapter parameters: rank-r A and B on the QKV and output projections of every layer.

        As the MLPerf llama2_70b_lora reference adapts them: r x (d_in + d_out) per matrix.
        """
        if self.lora_rank is None:
            return 0.0
        h, kv, r = self.hidden_size, self.kv_hidden_size, self.lora_rank
        return self.layers * r * ((h + h + 2 * kv) + (h + h))

    def trained_param_count(self) -> float:
        return self.adapter_param_count() if self.lora_rank is not None else self.param_count()

    # -- FLOPs per token ----------------------------------------------------

    def layer_matmul_flops_per_token(self) -> float:
        """Forward FLOPs of one block's weight matrices per token."""
        h, f, kv = self.hidden_size, self.ffn_hidden_size, self.kv_hidden_size
        return 2.0 * (h * (h + 2 * kv) + h * h + self.mlp_matrices * h * f)

    def layer_attention_flops_per_token(self, sequence_length: float | None = None) -> float:
        """Forward FLOPs of QK^T and of the scores times V per token (full sequence)."""
        s = self.sequence_length if sequence_length is None else sequence_length
        return 2.0 * 2.0 * s * self.attention_heads * self.head_dim

    def logits_flops_per_token(self) -> float:
        return 2.0 * self.hidden_size * self.vocab_size

    def adapter_flops_per_token(self) -> float:
        """Forward FLOPs of the LoRA adapters per token (2 per multiply-add)."""
        return 2.0 * self.adapter_param_count()

    def forward_flops_per_token(self) -> float:
        layer = self.layer_matmul_flops_per_token() + self.layer_attention_flops_per_token()
        return self.layers * layer + self.logits_flops_per_token() + self.adapter_flops_per_token()

    def backward_flops_per_token(self) -> float:
        """Twice the forward; frozen base matrices of a LoRA fine-tune need the input gradient only."""
        if self.lora_rank is None:
            return 2.0 * self.forward_flops_per_token()
        frozen = self.layers * self.layer_matmul_flops_per_token() + self.logits_flops_per_token()
        attention = self.layers * self.layer_attention_flops_per_token()
        return frozen + 2.0 * attention + 2.0 * self.adapter_flops_per_token()

    def model_flops_per_token(self) -> float:
        """Training FLOPs per token without recomputation (the MFU numerator)."""
        return self.forward_flops_per_token() + self.backward_flops_per_token()

    def recompute_flops_per_token(self, recompute: str) -> float:
        """Extra forward FLOPs per token that activation recomputation runs again.

        ``selective`` recomputes the attention core (scores and scores x V);
        ``full`` the whole forward of every block (not the logits).
        """
        if recompute == "none":
            return 0.0
        if recompute == "selective":
            return self.layers * self.layer_attention_flops_per_token()
        if recompute == "full":
            blocks = self.layer_matmul_flops_per_token() + self.layer_attention_flops_per_token()
            return self.layers * blocks + self.adapter_flops_per_token()
        raise ValueError(f"recompute {recompute!r}; allowed: {', '.join(RECOMPUTE_MODES)}")

    def hardware_flops_per_token(self, recompute: str) -> float:
        """Training FLOPs per token the GPUs execute, recomputation included (the HFU numerator)."""
        return self.model_flops_per_token() + self.recompute_flops_per_token(recompute)

    # -- activations --------------------------------------------------------

    def layer_activation_bytes(
        self, micro_batch_size: float, tensor_parallel: int, sequence_parallel: bool, recompute: str, context_parallel: int = 1
    ) -> float:
        """Bytes one block keeps for backward per micro-batch (Korthikanti et al. 2022, Table 2).

        For the GPT block with FFN 4h this is s b h (34/t + 5 a s / (h t)) with
        sequence parallelism and s b h (10 + 24/t + 5 a s / (h t)) without;
        selective recomputation drops the attention-core term; full recomputation
        keeps only the block input (2 s b h, divided by t with sequence parallelism).
        Context parallelism splits the sequence: s is the local s / cp.
        """
        s = self.sequence_length / context_parallel
        b, h, a, t = micro_batch_size, self.hidden_size, self.attention_heads, tensor_parallel
        sbh = s * b * h
        if recompute == "full":
            return 2.0 * sbh / (t if sequence_parallel else 1)
        kv_share = self.kv_hidden_size / h
        ffn_share = self.ffn_hidden_size / h
        if self.family == "llama":
            replicated = 8.0  # two norm inputs, attention and MLP inputs, 2 bytes each; no dropout
            split = 2.0 + 4.0 * kv_share + 2.0 + 6.0 * ffn_share  # Q, K and V, out-proj input, gate/up/down inputs
            attention_core = 2.0 * a * s / h  # softmax output
        else:
            replicated = 10.0  # two LayerNorm inputs (4), attention and MLP inputs (4), two dropout masks (2)
            split = 2.0 + 4.0 * kv_share + 2.0 + 4.0 * ffn_share  # Q, K, V, out-proj input, GELU and fc2 inputs
            attention_core = 5.0 * a * s / h  # softmax output (2), dropout mask (1), dropout output (2)
        if recompute == "selective":
            attention_core = 0.0
        elif recompute != "none":
            raise ValueError(f"recompute {recompute!r}; allowed: {', '.join(RECOMPUTE_MODES)}")
        per_sbh = (replicated / t if sequence_parallel else replicated) + split / t + attention_core / t
        return sbh * per_sbh

    def logits_activation_bytes(self, micro_batch_size: float, tensor_parallel: int, context_parallel: int = 1) -> float:
        """FP32 logits of one micro-batch on the last pipeline stage, split over the tensor-parallel group."""
        tokens = self.sequence_length / context_parallel * micro_batch_size
        return LOGIT_BYTES_PER_ELEMENT * tokens * self.vocab_size / tensor_parallel


@dataclass(frozen=True)
class MemoryPerGpu:
    """Bytes one GPU holds at the peak of a step (the heaviest pipeline stage)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes

    def to_dict(self) -> dict[str, float]:
        return {
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "total_bytes": self.total_bytes,
        }


def stage_param_count(shape: TransformerShape, tensor_parallel: int, pipeline_parallel: int) -> float:
    """Parameters on one GPU of the heaviest stage: its blocks and, for one stage, the embeddings.

    Blocks split over tensor parallelism (norms and biases are small and
    counted as split too); the first stage holds the input embedding and the
    last the output projection, so the heaviest stage carries one vocabulary
    matrix (both when there is one stage).
    """
    blocks = shape.layers / pipeline_parallel * shape.layer_param_count() / tensor_parallel
    vocab_matrix = shape.vocab_size * shape.hidden_size / tensor_parallel
    if pipeline_parallel == 1:
        return blocks + shape.embedding_param_count() / tensor_parallel
    return blocks + vocab_matrix


def in_flight_micro_batches(schedule: str, pipeline_parallel: int, micro_batches: int, virtual_stages: int) -> float:
    """Micro-batches whose activations the first stage holds at once.

    GPipe holds all m; 1F1B at most p (Narayanan et al. 2021); the interleaved
    schedule holds p (1 + (p - 1) / (p v)) micro-batches' worth of its
    layers (Korthikanti et al. 2022, section 4.2.3).
    """
    p, m, v = pipeline_parallel, micro_batches, virtual_stages
    if schedule == "gpipe":
        return float(m)
    if schedule == "1f1b":
        return float(min(p, m))
    return float(min(p, m)) * (1.0 + (p - 1.0) / (p * v))


def memory_per_gpu(
    shape: TransformerShape,
    *,
    tensor_parallel: int,
    pipeline_parallel: int,
    data_parallel: int,
    context_parallel: int,
    micro_batch_size: int,
    micro_batches: int,
    schedule: str,
    virtual_stages: int,
    sequence_parallel: bool,
    recompute: str,
    sharding: str,
) -> MemoryPerGpu:
    """Weights, gradients, optimizer state and activations one GPU of the heaviest stage holds.

    Sharding divides over the data-parallel group (data x context parallel, as
    Megatron's distributed optimizer does): ``optimizer`` (ZeRO-1) the Adam
    state, ``gradients`` (ZeRO-2) also the gradients, ``full`` (ZeRO-3, FSDP
    full shard) also the weights. A LoRA fine-tune keeps BF16 base weights
    and trains only the adapters.
    """
    if sharding not in SHARDING_MODES:
        raise ValueError(f"sharding {sharding!r}; allowed: {', '.join(SHARDING_MODES)}")
    group = data_parallel * context_parallel
    stage_params = stage_param_count(shape, tensor_parallel, pipeline_parallel)
    if shape.lora_rank is not None:
        trained = shape.adapter_param_count() / pipeline_parallel / tensor_parallel
        base = stage_params
    else:
        trained = stage_params
        base = 0.0
    shard = {"none": (1, 1, 1), "optimizer": (1, 1, group), "gradients": (1, group, group), "full": (group, group, group)}
    weights_div, grads_div, optimizer_div = shard[sharding]
    layers_per_stage = shape.layers / pipeline_parallel
    per_layer = shape.layer_activation_bytes(micro_batch_size, tensor_parallel, sequence_parallel, recompute, context_parallel)
    stored = layers_per_stage * per_layer * in_flight_micro_batches(schedule, pipeline_parallel, micro_batches, virtual_stages)
    stored += shape.logits_activation_bytes(micro_batch_size, tensor_parallel, context_parallel)
    return MemoryPerGpu(
        weights_bytes=(base + trained) * WEIGHT_BYTES_PER_PARAM / weights_div,
        gradients_bytes=trained * GRADIENT_BYTES_PER_PARAM / grads_div,
        optimizer_bytes=trained * OPTIMIZER_BYTES_PER_PARAM / optimizer_div,
        activations_bytes=stored,
    )
