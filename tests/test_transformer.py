"""The transformer shape model: parameters, FLOPs and activation memory against hand counts and torch."""

from __future__ import annotations

import pytest

from features.transformer import TransformerShape, memory_per_gpu

GPT3 = TransformerShape("gpt", 96, 12288, 49152, 96, 96, 50257, 2048)
LLAMA2_70B = TransformerShape("llama", 80, 8192, 28672, 64, 8, 32000, 4096)
TINY_GPT = TransformerShape("gpt", 2, 8, 32, 2, 2, 16, 4)


def test_gpt3_175b_parameter_count_from_its_shape():
    # 96 x (12 h^2 + 13 h) + V h + s h + 2 h with h = 12288, V = 50257, s = 2048.
    assert GPT3.param_count() == 174_604_259_328
    assert round(GPT3.param_count() / 1e9, 1) == 174.6


def test_llama2_70b_parameter_count_from_its_shape():
    # Meta's Llama 2 70B: 68.98B parameters (80 layers, GQA with 8 KV heads, untied output).
    layer = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert LLAMA2_70B.param_count() == 80 * layer + 2 * 32000 * 8192 + 8192
    assert round(LLAMA2_70B.param_count() / 1e9, 2) == 68.98


def test_tiny_gpt_flops_by_hand():
    # h=8, f=32, 2 heads, V=16, s=4: QKV 8x24, out 8x8, MLP 2 x 8x32 -> 2 x 768 = 1536 per layer.
    assert TINY_GPT.layer_matmul_flops_per_token() == 1536
    assert TINY_GPT.layer_attention_flops_per_token() == 4 * 4 * 8  # QK^T and PV: 2 x 2 s h
    assert TINY_GPT.logits_flops_per_token() == 256
    assert TINY_GPT.forward_flops_per_token() == 2 * (1536 + 128) + 256
    assert TINY_GPT.model_flops_per_token() == 3 * 3584
    assert TINY_GPT.recompute_flops_per_token("none") == 0
    assert TINY_GPT.recompute_flops_per_token("selective") == 2 * 128
    assert TINY_GPT.recompute_flops_per_token("full") == 2 * 1664
    assert TINY_GPT.param_count() == 2 * 872 + 176


def test_gpt3_flops_match_narayanan_formula():
    # Narayanan et al. 2021, eq. 3: with full recomputation 96 B s l h^2 (1 + s / 6h + V / (16 l h)) per batch;
    # without it the blocks take 3 passes instead of 4 and the logits (never recomputed) stay 6 h V per token.
    h, s, layers, vocab = 12288, 2048, 96, 50257
    full = 96 * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))
    assert GPT3.hardware_flops_per_token("full") == pytest.approx(full, rel=1e-12)
    assert GPT3.model_flops_per_token() == pytest.approx(72 * layers * h**2 * (1 + s / (6 * h)) + 6 * h * vocab, rel=1e-12)


def test_activation_bytes_match_korthikanti_table_2():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert GPT3.layer_activation_bytes(b, t, True, "none") == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert GPT3.layer_activation_bytes(b, t, False, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert GPT3.layer_activation_bytes(b, t, True, "selective") == pytest.approx(sbh * 34 / t)
    assert GPT3.layer_activation_bytes(b, t, False, "selective") == pytest.approx(sbh * (10 + 24 / t))
    assert GPT3.layer_activation_bytes(b, t, True, "full") == pytest.approx(2 * sbh / t)
    # Context parallelism halves the local sequence: the linear terms halve, the attention term quarters.
    half = GPT3.layer_activation_bytes(b, t, True, "none", context_parallel=2)
    assert half == pytest.approx(sbh / 2 * (34 / t + 5 * a * (s / 2) / (h * t)))


def test_model_state_memory_under_each_sharding():
    # One stage, TP 1, DP 4: 16 bytes per parameter unsharded, then ZeRO-1/2/3 divide 12, 14 and 16 of them.
    kwargs = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=4, context_parallel=1, micro_batch_size=1,
                  micro_batches=1, schedule="1f1b", virtual_stages=1, sequence_parallel=False, recompute="full")
    n = TINY_GPT.param_count()
    states = {}
    for sharding in ("none", "optimizer", "gradients", "full"):
        m = memory_per_gpu(TINY_GPT, sharding=sharding, **kwargs)
        states[sharding] = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
    assert states["none"] == pytest.approx(16 * n)
    assert states["optimizer"] == pytest.approx((2 + 2 + 12 / 4) * n)
    assert states["gradients"] == pytest.approx((2 + 14 / 4) * n)
    assert states["full"] == pytest.approx(16 * n / 4)


def test_lora_keeps_only_adapter_state():
    lora = TransformerShape("llama", 80, 8192, 28672, 64, 8, 32000, 8192, lora_rank=16)
    # r (d_in + d_out) on QKV (8192 -> 10240) and out (8192 -> 8192), 80 layers: 44,564,480 (the catalogue's count).
    assert lora.adapter_param_count() == 44_564_480
    m = memory_per_gpu(lora, tensor_parallel=8, pipeline_parallel=1, data_parallel=1, context_parallel=1, micro_batch_size=1,
                       micro_batches=1, schedule="1f1b", virtual_stages=1, sequence_parallel=True, recompute="full", sharding="none")
    assert m.optimizer_bytes == pytest.approx(12 * 44_564_480 / 8)
    assert m.gradients_bytes == pytest.approx(2 * 44_564_480 / 8)
    # Frozen base weights stay, in BF16: about 2 x 69e9 / 8 bytes.
    assert m.weights_bytes == pytest.approx(2 * (lora.param_count() + 44_564_480) / 8, rel=1e-9)
    # Frozen matrices cost one forward in backward, not two.
    assert lora.model_flops_per_token() < 2.5 * lora.forward_flops_per_token()


torch = pytest.importorskip("torch", reason="torch is in the testbed extra")


def _torch_model(shape: TransformerShape):
    nn = torch.nn
    h, f, heads, kv = shape.hidden_size, shape.ffn_hidden_size, shape.attention_heads, shape.kv_heads
    d = h // heads
    bias = shape.family == "gpt"

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(h) if bias else nn.RMSNorm(h)
            self.norm2 = nn.LayerNorm(h) if bias else nn.RMSNorm(h)
            self.qkv = nn.Linear(h, h + 2 * kv * d, bias=bias)
            self.out = nn.Linear(h, h, bias=bias)
            if bias:
                self.fc1, self.fc2 = nn.Linear(h, f), nn.Linear(f, h)
            else:
                self.gate, self.up, self.down = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split([h, kv * d, kv * d], dim=-1)
            q = q.view(b, s, heads, d).transpose(1, 2)
            k = k.view(b, s, kv, d).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
            v = v.view(b, s, kv, d).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
            scores = torch.softmax(q @ k.transpose(-1, -2) / d**0.5, dim=-1)
            x = x + self.out((scores @ v).transpose(1, 2).reshape(b, s, h))
            y = self.norm2(x)
            if bias:
                return x + self.fc2(torch.nn.functional.gelu(self.fc1(y)))
            return x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(shape.vocab_size, h)
            self.pos = nn.Embedding(shape.sequence_length, h) if bias else None
            self.blocks = nn.ModuleList(Block() for _ in range(shape.layers))
            self.norm = nn.LayerNorm(h) if bias else nn.RMSNorm(h)
            self.head = nn.Linear(h, shape.vocab_size, bias=False)
            if bias:
                self.head.weight = self.embed.weight

        def forward(self, tokens):
            x = self.embed(tokens)
            if self.pos is not None:
                x = x + self.pos(torch.arange(tokens.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    return Model()


@pytest.mark.parametrize(
    "shape",
    [TransformerShape("gpt", 2, 64, 256, 4, 4, 100, 32), TransformerShape("llama", 2, 64, 176, 8, 2, 100, 32)],
    ids=["gpt", "llama"],
)
def test_flops_and_params_match_torch_flop_counter(shape):
    from torch.utils.flop_counter import FlopCounterMode

    model = _torch_model(shape)
    assert sum(p.numel() for p in model.parameters()) == shape.param_count()
    batch = 3
    tokens = torch.randint(0, shape.vocab_size, (batch, shape.sequence_length))
    with FlopCounterMode(display=False) as forward_counter:
        logits = model(tokens)
    assert forward_counter.get_total_flops() == pytest.approx(batch * shape.sequence_length * shape.forward_flops_per_token(), rel=1e-12)
    with FlopCounterMode(display=False) as backward_counter:
        logits.sum().backward()
    assert backward_counter.get_total_flops() == pytest.approx(batch * shape.sequence_length * shape.backward_flops_per_token(), rel=1e-12)
