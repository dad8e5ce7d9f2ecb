"""Transformer-XL base and large on WikiText-103, as NVIDIA DeepLearningExamples trains them.

A plain torch definition after PyTorch/LanguageModeling/Transformer-XL/pytorch
(mem_transformer.py, utils/proj_adaptive_softmax.py; Dai et al. 2019,
arXiv:1901.02860): relative-position multi-head attention with learnable
biases over the current segment and a memory of the previous one, post-norm
layers, an adaptive input embedding and an adaptive softmax with cutoffs
19,997 / 39,997 / 199,997 over the 267,735-word vocabulary, output weights
tied to the embedding. Without ``--adaptive`` (``TxlConfig.cutoffs`` empty)
train.py builds one cluster: a full softmax over the whole vocabulary, its
embedding as wide as the model.

The adaptive embedding and softmax route each token to its frequency
cluster. Which tokens fall in which cluster is data, so the batch carries
the cluster index sets, computed on the CPU from the tokens; the model then
has static shapes and counts on the meta device. Tokens are drawn from a
Zipf(1) law over the frequency-ranked vocabulary.
"""

from __future__ import annotations

import dataclasses

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import INT64_BYTES, Probe, Recipe, on_default_device, repeat_to, seeded

N_TOKEN = 267735
CUTOFFS = (19997, 39997, 199997)


@dataclass(frozen=True)
class TxlConfig:
    n_layer: int
    d_model: int
    n_head: int
    d_head: int
    d_inner: int
    tgt_len: int
    mem_len: int
    div_val: int
    dropout: float
    dropatt: float
    #: The adaptive softmax's cluster boundaries (train.py --adaptive on WikiText-103); empty: a full softmax.
    cutoffs: tuple[int, ...] = CUTOFFS


BASE = TxlConfig(16, 512, 8, 64, 2048, 192, 192, 1, 0.1, 0.0)
LARGE = TxlConfig(18, 1024, 16, 64, 4096, 384, 384, 4, 0.2, 0.2)
#: The large model as lambdal/deeplearning-benchmark trains it: 256-token segments with a 256-token memory.
LARGE_256 = dataclasses.replace(LARGE, tgt_len=256, mem_len=256)
#: Both as the suite's train.py command builds them: without --adaptive, a full softmax over the vocabulary.
BASE_FULL_SOFTMAX = dataclasses.replace(BASE, cutoffs=())
LARGE_256_FULL_SOFTMAX = dataclasses.replace(LARGE_256, cutoffs=())


class RelPartialLearnableAttention(nn.Module):
    """Relative multi-head attention with memory (mem_transformer.RelPartialLearnableMultiHeadAttn), post-norm."""

    def __init__(self, c: TxlConfig) -> None:
        super().__init__()
        self.n_head, self.d_head = c.n_head, c.d_head
        self.qkv_net = nn.Linear(c.d_model, 3 * c.n_head * c.d_head, bias=False)
        self.r_net = nn.Linear(c.d_model, c.n_head * c.d_head, bias=False)
        self.o_net = nn.Linear(c.n_head * c.d_head, c.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.dropatt = nn.Dropout(c.dropatt)
        self.scale = 1 / math.sqrt(c.d_head)

    @staticmethod
    def _rel_shift(x: torch.Tensor) -> torch.Tensor:
        b, n, i, j = x.shape
        padded = torch.cat([x.new_zeros(b, n, i, 1), x], dim=3).view(b, n, j + 1, i)
        return padded[:, :, 1:].reshape(b, n, i, j)

    def forward(self, w, r, r_w_bias, r_r_bias, attn_mask, mem):
        qlen, bsz = w.shape[:2]
        heads = self.qkv_net(torch.cat([mem, w], 0))
        r_head_k = self.r_net(r).view(r.shape[0], self.n_head, self.d_head)
        q, k, v = heads.chunk(3, dim=-1)
        q = q[-qlen:].view(qlen, bsz, self.n_head, self.d_head)
        klen = k.shape[0]
        k = k.view(klen, bsz, self.n_head, self.d_head)
        v = v.view(klen, bsz, self.n_head, self.d_head)
        ac = torch.einsum("ibnd,jbnd->bnij", q + r_w_bias, k)
        bd = self._rel_shift(torch.einsum("ibnd,jnd->bnij", q + r_r_bias, r_head_k))
        score = ((ac + bd) * self.scale).masked_fill(attn_mask, float("-inf"))
        prob = self.dropatt(score.softmax(dim=3))
        vec = torch.einsum("bnij,jbnd->ibnd", prob, v).reshape(qlen, bsz, self.n_head * self.d_head)
        return self.layer_norm(w + self.drop(self.o_net(vec)))


class TxlLayer(nn.Module):
    def __init__(self, c: TxlConfig) -> None:
        super().__init__()
        self.attn = RelPartialLearnableAttention(c)
        self.ff = nn.Sequential(
            nn.Linear(c.d_model, c.d_inner), nn.ReLU(inplace=True), nn.Dropout(c.dropout),
            nn.Linear(c.d_inner, c.d_model), nn.Dropout(c.dropout),
        )  # fmt: skip
        self.ff_norm = nn.LayerNorm(c.d_model)

    def forward(self, w, r, r_w_bias, r_r_bias, attn_mask, mem):
        x = self.attn(w, r, r_w_bias, r_r_bias, attn_mask, mem)
        return self.ff_norm(x + self.ff(x))


def _cluster_bounds(cutoffs: tuple[int, ...]) -> list[tuple[int, int]]:
    ends = [0, *cutoffs, N_TOKEN]
    return list(zip(ends[:-1], ends[1:]))


class TransformerXL(nn.Module):
    """Transformer-XL language model: adaptive embedding, layers with memory, adaptive softmax loss.

    ``forward(tokens, target, memory, clusters)`` takes time-major token
    ids (tgt_len, B), their next-token targets, the previous segment's
    hidden states (n_layer tensors of mem_len x B x d_model, no gradient)
    and, for each vocabulary cluster, the flat positions of the inputs and
    of the targets in it; it returns the mean negative log-likelihood.
    """

    def __init__(self, c: TxlConfig) -> None:
        super().__init__()
        self.c = c
        d = c.d_model
        dims = [d // c.div_val**i for i in range(len(c.cutoffs) + 1)]
        bounds = _cluster_bounds(c.cutoffs)
        if c.div_val == 1:
            self.emb_layers = nn.ModuleList([nn.Embedding(N_TOKEN, d)])
            self.emb_projs = nn.ParameterList()
            self.out_bias = nn.Parameter(torch.zeros(N_TOKEN))
            self.out_projs = nn.ParameterList()
        else:
            self.emb_layers = nn.ModuleList(nn.Embedding(hi - lo, di) for (lo, hi), di in zip(bounds, dims))
            self.emb_projs = nn.ParameterList(nn.Parameter(torch.randn(d, di) * 0.01) for di in dims)
            self.out_bias = nn.Parameter(torch.zeros(N_TOKEN))
            # tie_projs = [False, True, True, True]: the head's output projection is its own.
            self.out_projs = nn.ParameterList([nn.Parameter(torch.randn(d, dims[0]) * 0.01)])
        # proj_adaptive_softmax.py: the head's cluster logits exist only where there are tail clusters.
        self.cluster_weight = nn.Parameter(torch.zeros(len(c.cutoffs), dims[0])) if c.cutoffs else None
        self.cluster_bias = nn.Parameter(torch.zeros(len(c.cutoffs))) if c.cutoffs else None
        self.r_w_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))
        self.layers = nn.ModuleList(TxlLayer(c) for _ in range(c.n_layer))
        self.drop = nn.Dropout(c.dropout)

    def _embed(self, tokens: torch.Tensor, clusters) -> torch.Tensor:
        scale = math.sqrt(self.c.d_model)
        if self.c.div_val == 1:
            return self.emb_layers[0](tokens) * scale
        flat = tokens.reshape(-1)
        out = torch.zeros(flat.shape[0], self.c.d_model)
        for (lo, _), emb, proj, (positions, _) in zip(_cluster_bounds(self.c.cutoffs), self.emb_layers, self.emb_projs, clusters):
            vec = F.linear(emb(flat.index_select(0, positions) - lo), proj)
            out = out.index_copy(0, positions, vec)
        return (out * scale).view(*tokens.shape, self.c.d_model)

    def _tail(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        lo, hi = _cluster_bounds(self.c.cutoffs)[i]
        if self.c.div_val == 1:
            return self.emb_layers[0].weight[lo:hi], self.out_bias[lo:hi], None
        proj = self.out_projs[0] if i == 0 else self.emb_projs[i]
        return self.emb_layers[i].weight, self.out_bias[lo:hi], proj

    @staticmethod
    def _logit(hidden, weight, bias, proj):
        if proj is not None:
            hidden = F.linear(hidden, proj.t())
        return F.linear(hidden, weight, bias)

    def _nll(self, hidden: torch.Tensor, target: torch.Tensor, clusters) -> torch.Tensor:
        w0, b0, p0 = self._tail(0)
        if self.cluster_weight is None:  # one cluster: the full softmax
            logprob = self._logit(hidden, w0, b0, p0).log_softmax(dim=1).gather(1, target[:, None]).squeeze(1)
            return -logprob.sum() / target.shape[0]
        head_logprob = self._logit(
            hidden, torch.cat([w0, self.cluster_weight]), torch.cat([b0, self.cluster_bias]), p0
        ).log_softmax(dim=1)
        total = hidden.new_zeros(())
        for i, ((lo, _), (_, positions)) in enumerate(zip(_cluster_bounds(self.c.cutoffs), clusters)):
            target_i = target.index_select(0, positions) - lo
            head_i = head_logprob.index_select(0, positions)
            if i == 0:
                logprob = head_i.gather(1, target_i[:, None]).squeeze(1)
            else:
                w, b, p = self._tail(i)
                tail = self._logit(hidden.index_select(0, positions), w, b, p).log_softmax(dim=1)
                logprob = head_i[:, -i] + tail.gather(1, target_i[:, None]).squeeze(1)
            total = total - logprob.sum()
        return total / target.shape[0]

    def forward(self, tokens, target, memory, clusters) -> torch.Tensor:
        c = self.c
        qlen, _ = tokens.shape
        klen = qlen + c.mem_len
        x = self.drop(self._embed(tokens, clusters))
        attn_mask = torch.triu(torch.ones(qlen, klen, dtype=torch.bool), diagonal=1 + c.mem_len)[None, None]
        pos_seq = torch.arange(klen - 1, -1, -1.0)
        inv_freq = 1 / (10000 ** (torch.arange(0.0, c.d_model, 2.0) / c.d_model))
        sinusoid = torch.outer(pos_seq, inv_freq)
        r = self.drop(torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1))
        for layer, mem in zip(self.layers, memory):
            x = layer(x, r, self.r_w_bias, self.r_r_bias, attn_mask, mem)
        x = self.drop(x)
        return self._nll(x.reshape(-1, c.d_model), target.reshape(-1), clusters)


def _zipf_tokens(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Token ids drawn from a Zipf(1) law over the frequency-ranked vocabulary (CPU)."""
    weights = 1.0 / torch.arange(1, N_TOKEN + 1, dtype=torch.float64, device="cpu")
    return torch.multinomial(weights, math.prod(shape), replacement=True, generator=generator).view(shape)


def _clusters(tokens: torch.Tensor, target: torch.Tensor, cutoffs: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each cluster, the flat positions of the input tokens and of the targets in it (CPU)."""
    out = []
    for lo, hi in _cluster_bounds(cutoffs):
        inputs = ((tokens.reshape(-1) >= lo) & (tokens.reshape(-1) < hi)).nonzero().squeeze(1)
        targets = ((target.reshape(-1) >= lo) & (target.reshape(-1) < hi)).nonzero().squeeze(1)
        out.append((inputs, targets))
    return out


def _txl_probe(c: TxlConfig) -> Probe:
    g = seeded()
    stream = _zipf_tokens((c.tgt_len + 1, 2), g)

    def make_batch(b: int):
        stream_b = repeat_to(stream, b, 1)
        tokens, target = stream_b[:-1], stream_b[1:]
        clusters = [(on_default_device(i), on_default_device(t)) for i, t in _clusters(tokens, target, c.cutoffs)]
        memory = [torch.randn(c.mem_len, b, c.d_model) for _ in range(c.n_layer)]
        return on_default_device(tokens), on_default_device(target), memory, clusters

    def loss(m: nn.Module, batch):
        return m(*batch)

    return Probe(TransformerXL(c), make_batch, loss)


DLE_TXL = "NVIDIA DeepLearningExamples PyTorch/LanguageModeling/Transformer-XL/pytorch"


def _recipe(name: str, c: TxlConfig, global_batch: int, aliases: tuple[str, ...]) -> Recipe:
    size = "base" if c.d_model == BASE.d_model else "large"
    n_bytes = 2 * c.tgt_len * INT64_BYTES
    return Recipe(
        name=name,
        aliases=aliases,
        domain="language",
        description=(
            f"Transformer-XL {size} ({c.n_layer} layers, d={c.d_model}), WikiText-103, segments of "
            f"{c.tgt_len} tokens with a {c.mem_len}-token memory"
        ),
        architecture=f"{DLE_TXL} wt103_{size}.yaml (Dai et al. 2019, arXiv:1901.02860), plain torch definition "
        "features.model_defs.transformer_xl.TransformerXL",
        build=lambda: _txl_probe(c),
        input_bytes_per_sample=n_bytes,
        input_bytes_source=f"int64 input and target token ids, {c.tgt_len} each: {n_bytes} B",
        default_batch_size_per_gpu=global_batch // 8,
        sequence_length=c.tgt_len,
        sample_unit="segments",
        tokens_per_sample=c.tgt_len,
        extra_sources={
            "sequence_length": ("configured", f"{DLE_TXL}/wt103_{size}.yaml: tgt_len {c.tgt_len}, mem_len {c.mem_len}"),
            "tokens_per_sample": (
                "configured",
                f"one segment is tgt_len = {c.tgt_len} tokens, the unit of the example's 'Training throughput' "
                f"tok/s ({DLE_TXL}/wt103_{size}.yaml)",
            ),
            "default_batch_size_per_gpu": (
                "configured",
                f"{DLE_TXL}/wt103_{size}.yaml batch_size {global_batch} over 8 GPUs",
            ),
        },
        notes=(
            "Target tokens drawn from a Zipf(1) law decide how often the adaptive softmax's tail clusters run. "
            + ("lambdal/deeplearning-benchmark runs the large model with tgt_len 256, not 384, and without the adaptive "
               "softmax: transformer-xl-large-256-full-softmax." if c is LARGE else "")
            + ("lambdal/deeplearning-benchmark runs it without the adaptive softmax: transformer-xl-base-full-softmax."
               if c is BASE else "")
        ).strip(),
    )


LAMBDA_TXL = "lambdal/deeplearning-benchmark pytorch/scripts/config_v1/config_pytorch_80GB.sh"
LAMBDA_TXL_24GB = "lambdal/deeplearning-benchmark pytorch/scripts/config_v1/config_pytorch_24GB.sh"
#: How the suite starts train.py: pytorch/scripts/benchmark_pytorch.sh, benchmark_pytorch_transformerxl.
LAMBDA_TXL_COMMAND = (
    "lambdal/deeplearning-benchmark pytorch/scripts/benchmark_pytorch.sh: python -m torch.distributed.launch "
    "train.py with the config's arguments, which name neither --adaptive nor --config_file"
)


def _lambda_sources(where: str, tgt_len: int, batch: str) -> dict[str, tuple[str, str]]:
    """Where the suite's configuration sets a Lambda variant's segment and batch."""
    return {
        "sequence_length": ("configured", where),
        "tokens_per_sample": ("configured", f"one segment is tgt_len = {tgt_len} tokens, the unit of the suite's tok/s ({where})"),
        "default_batch_size_per_gpu": ("configured", batch),
    }


def _lambda_large_recipe() -> Recipe:
    """The large model on 256-token segments: the network of ``transformer-xl-large``, as Lambda's suite configures it."""
    c = LARGE_256
    recipe = _recipe("transformer-xl-large-256", c, 8 * 48, ("txl-large-256",))
    where = f"{LAMBDA_TXL} (every config_v1 file): --tgt_len 256 --mem_len 256"
    return dataclasses.replace(
        recipe,
        description=recipe.description + " (lambdal/deeplearning-benchmark's segment length)",
        extra_sources=_lambda_sources(where, c.tgt_len, f"{LAMBDA_TXL}: PyTorch_transformerxllarge_FP16_PARAMS --batch_size 48"),
        notes=(
            "Target tokens drawn from a Zipf(1) law decide how often the adaptive softmax's tail clusters run. The suite "
            "itself trains it without the adaptive softmax: transformer-xl-large-256-full-softmax."
        ),
        network_of="transformer-xl-large",
    )


def _lambda_full_softmax_recipe(name: str, c: TxlConfig, batch: int, flag: str, network: str, aliases: tuple[str, ...]) -> Recipe:
    """Transformer-XL as Lambda's suite trains it: no --adaptive, so one softmax over all 267,735 words.

    The layers of ``network`` with another output table (as DLRM's sizes are one network with other
    tables): a model held out of training leaves with both.
    """
    recipe = _recipe(name, c, 8 * batch, aliases)
    where = f"{LAMBDA_TXL_24GB} {flag}: --tgt_len {c.tgt_len} --mem_len {c.mem_len}, no --adaptive"
    return dataclasses.replace(
        recipe,
        description=recipe.description + ", a full softmax over the 267,735-word vocabulary (lambdal/deeplearning-benchmark's configuration)",
        architecture=recipe.architecture + f"; cutoffs empty as train.py builds them without --adaptive ({LAMBDA_TXL_COMMAND})",
        extra_sources=_lambda_sources(where, c.tgt_len, f"{LAMBDA_TXL_24GB}: {flag} --batch_size {batch} on one GPU"),
        notes=(
            "train.py's --adaptive is off unless given (or set by a --config_file yaml, which the suite does not pass): "
            "the embedding is one 267,735-row table tied to the output layer, and every token's logits span the vocabulary."
        ),
        network_of=network,
    )


RECIPES = [
    _recipe("transformer-xl-base", BASE, 256, ("transformerxlbase", "transformer-xl-base-wt103", "txl-base")),
    _recipe("transformer-xl-large", LARGE, 128, ("transformerxllarge", "transformer-xl-large-wt103", "txl-large")),
    _lambda_large_recipe(),
    _lambda_full_softmax_recipe("transformer-xl-base-full-softmax", BASE_FULL_SOFTMAX, 24, "PyTorch_transformerxlbase_FP16_PARAMS", "transformer-xl-base",
                                ("txl-base-full-softmax",)),
    _lambda_full_softmax_recipe(
        "transformer-xl-large-256-full-softmax", LARGE_256_FULL_SOFTMAX, 8, "PyTorch_transformerxllarge_FP16_PARAMS", "transformer-xl-large",
        ("txl-large-256-full-softmax",),
    ),
]
