"""Language workloads: GNMT, the base Transformer (WMT), BERT pre-training and SQuAD fine-tuning.

BERT is transformers' definition built from a config (random weights, nothing
downloaded). GNMT v2 and the base Transformer are written here after their
published architectures.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import INT64_BYTES, Probe, Recipe, configured, randint, repeat_to, seeded

# Tokens per side of a WMT16 English-German sentence pair after 32k BPE
# (about 125 M tokens per side over 4.5 M pairs; training keeps pairs of at
# most 50 tokens). The per-token figures depend on it only through attention.
WMT_TOKENS_PER_SIDE = 28
WMT_LENGTH_SOURCE = (
    "configured: 28 BPE tokens per side, an estimate of the mean WMT16 en-de sentence length after 32k BPE "
    "(about 125 M tokens per side over 4.5 M pairs)"
)


class BahdanauAttention(nn.Module):
    """Normalised Bahdanau (additive) attention of GNMT v2 (NVIDIA DeepLearningExamples seq2seq/models/attention.py)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear_q = nn.Linear(hidden, hidden, bias=False)
        self.linear_k = nn.Linear(hidden, hidden, bias=False)
        self.linear_att = nn.Parameter(torch.empty(hidden).uniform_(-0.1, 0.1))
        self.normalize_scalar = nn.Parameter(torch.tensor(1.0 / math.sqrt(hidden)))
        self.normalize_bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """``query`` (Tq, B, H) and ``keys`` (Tk, B, H) to the context (Tq, B, H)."""
        q = self.linear_q(query).transpose(0, 1)  # (B, Tq, H)
        k = self.linear_k(keys).transpose(0, 1)  # (B, Tk, H)
        v = self.linear_att / self.linear_att.norm() * self.normalize_scalar
        scores = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1) + self.normalize_bias) @ v  # (B, Tq, Tk)
        context = torch.bmm(scores.softmax(-1), keys.transpose(0, 1))
        return context.transpose(0, 1)


class GNMT(nn.Module):
    """GNMT v2 as NVIDIA DeepLearningExamples (PyTorch/Translation/GNMT) and MLPerf train it.

    Shared 32,320-token embedding of width 1024. Encoder: a bidirectional
    LSTM layer (1024 per direction), then three LSTM layers of 1024, residual
    from the third. Decoder: an LSTM layer whose outputs query normalised
    Bahdanau attention over the encoder outputs, then three LSTM layers fed
    the previous output concatenated with the attention context (residual
    from the third), and a linear classifier over the vocabulary. Dropout 0.2
    on every LSTM input; label-smoothed cross-entropy (0.1). Time-major.
    """

    vocab_size = 32320
    hidden = 1024

    def __init__(self) -> None:
        super().__init__()
        h = self.hidden
        self.embedding = nn.Embedding(self.vocab_size, h)
        self.enc_bi = nn.LSTM(h, h, bidirectional=True)
        self.enc_layers = nn.ModuleList([nn.LSTM(2 * h, h), nn.LSTM(h, h), nn.LSTM(h, h)])
        self.att_rnn = nn.LSTM(h, h)
        self.attention = BahdanauAttention(h)
        self.dec_layers = nn.ModuleList([nn.LSTM(2 * h, h) for _ in range(3)])
        self.classifier = nn.Linear(h, self.vocab_size)
        self.dropout = nn.Dropout(0.2)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        x = self.enc_bi(self.dropout(self.embedding(src)))[0]
        for i, layer in enumerate(self.enc_layers):
            y = layer(self.dropout(x))[0]
            x = x + y if i >= 1 else y
        enc = x
        y = self.att_rnn(self.dropout(self.embedding(tgt)))[0]
        context = self.attention(y, enc)
        x = y
        for i, layer in enumerate(self.dec_layers):
            out = layer(self.dropout(torch.cat([x, context], dim=2)))[0]
            x = x + out if i >= 1 else out
        return self.classifier(x)


def _gnmt_probe() -> Probe:
    g = seeded()
    n = WMT_TOKENS_PER_SIDE
    src = randint(4, GNMT.vocab_size, (n, 2), g)
    tgt = randint(4, GNMT.vocab_size, (n + 1, 2), g)

    def make_batch(b: int):
        return repeat_to(src, b, 1), repeat_to(tgt, b, 1)

    def loss(m: nn.Module, batch):
        s, t = batch
        logits = m(s, t[:-1])
        return F.cross_entropy(logits.reshape(-1, GNMT.vocab_size), t[1:].reshape(-1), label_smoothing=0.1)

    return Probe(GNMT(), make_batch, loss)


class TransformerBase(nn.Module):
    """The base Transformer of Vaswani et al. 2017 (arXiv:1706.03762, Table 3), WMT English-German.

    Shared source/target BPE vocabulary of 37,000 tokens; embeddings of
    width 512 shared by encoder, decoder and the output projection
    (scaled by sqrt(512)); sinusoidal positions; 6 post-norm encoder and 6
    decoder layers (8 heads, feed-forward 2048, dropout 0.1); causal
    decoder self-attention; label-smoothed cross-entropy (0.1). Batch-first.
    """

    vocab_size = 37000
    d_model = 512

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(self.vocab_size, self.d_model)
        self.transformer = nn.Transformer(
            self.d_model, 8, 6, 6, 2048, dropout=0.1, batch_first=True
        )
        self.dropout = nn.Dropout(0.1)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / self.d_model))
        pe = torch.cat([torch.sin(position * div), torch.cos(position * div)], dim=1)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + pe)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        length = tgt.shape[1]
        causal = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
        out = self.transformer(self._embed(src), self._embed(tgt), tgt_mask=causal, tgt_is_causal=True)
        return F.linear(out, self.embedding.weight)


def _transformer_probe() -> Probe:
    g = seeded()
    n = WMT_TOKENS_PER_SIDE
    src = randint(4, TransformerBase.vocab_size, (2, n), g)
    tgt = randint(4, TransformerBase.vocab_size, (2, n + 1), g)

    def make_batch(b: int):
        return repeat_to(src, b), repeat_to(tgt, b)

    def loss(m: nn.Module, batch):
        s, t = batch
        logits = m(s, t[:, :-1])
        return F.cross_entropy(logits.reshape(-1, TransformerBase.vocab_size), t[:, 1:].reshape(-1), label_smoothing=0.1)

    return Probe(TransformerBase(), make_batch, loss)


def _bert_config(large: bool):
    from transformers import BertConfig  # noqa: PLC0415 - optional dependency of the counter

    if large:
        return BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    return BertConfig()


def _bert_pretraining_probe(large: bool, seq_len: int, predictions: int) -> Probe:
    """Masked-LM + next-sentence pre-training; the MLM head runs on the masked positions only."""
    from transformers import BertForPreTraining  # noqa: PLC0415

    config = _bert_config(large)
    model = BertForPreTraining(config)
    g = seeded()
    ids = randint(0, config.vocab_size, (2, seq_len), g)
    segments = randint(0, 2, (2, seq_len), g)
    positions = randint(0, seq_len, (2, predictions), g)
    mlm_labels = randint(0, config.vocab_size, (2, predictions), g)
    nsp_labels = randint(0, 2, (2,), g)

    def make_batch(b: int):
        return tuple(repeat_to(t, b) for t in (ids, segments, positions, mlm_labels, nsp_labels))

    def loss(m: nn.Module, batch):
        input_ids, token_type_ids, masked_positions, labels, nsp = batch
        sequence, pooled = m.bert(input_ids=input_ids, token_type_ids=token_type_ids)[:2]
        hidden = sequence.gather(1, masked_positions.unsqueeze(-1).expand(-1, -1, sequence.shape[-1]))
        mlm_logits, nsp_logits = m.cls(hidden, pooled)
        return F.cross_entropy(mlm_logits.reshape(-1, config.vocab_size), labels.reshape(-1)) + F.cross_entropy(
            nsp_logits, nsp
        )

    return Probe(model, make_batch, loss)


def _bert_squad_probe(large: bool, seq_len: int = 384) -> Probe:
    from transformers import BertForQuestionAnswering  # noqa: PLC0415

    model = BertForQuestionAnswering(_bert_config(large))
    g = seeded()
    ids = randint(0, 30522, (2, seq_len), g)
    segments = randint(0, 2, (2, seq_len), g)
    starts = randint(0, seq_len, (2,), g)
    ends = randint(0, seq_len, (2,), g)

    def make_batch(b: int):
        return tuple(repeat_to(t, b) for t in (ids, segments, starts, ends))

    def loss(m: nn.Module, batch):
        input_ids, token_type_ids, start, end = batch
        return m(input_ids=input_ids, token_type_ids=token_type_ids, start_positions=start, end_positions=end).loss

    return Probe(model, make_batch, loss)


TRANSFORMERS = "transformers 5.24.0"
BERT_PAPER = "Devlin et al. 2019, arXiv:1810.04805"
LAMBDA_24GB = "lambdal/deeplearning-benchmark pytorch/scripts/config_v1/config_pytorch_24GB.sh"


def _pretraining_bytes(seq_len: int, predictions: int) -> tuple[int, str]:
    n = (3 * seq_len + 2 * predictions + 1) * INT64_BYTES
    return n, (
        f"int64 input ids, segment ids and attention mask ({seq_len} each), {predictions} masked positions and "
        f"labels, 1 next-sentence label: {n} B"
    )


def _squad_bytes(seq_len: int = 384) -> tuple[int, str]:
    n = (3 * seq_len + 2) * INT64_BYTES
    return n, f"int64 input ids, segment ids and attention mask ({seq_len} each) + start/end positions: {n} B"


#: Krell, Kosec et al. 2021 (arXiv:2107.02027), from their MLPerf BERT work: padding is in excess of 50% of the
#: tokens of the Wikipedia pre-training set at length 512, so removing it doubles sequences per second.
UNPADDING_SOURCE = (
    "Krell, Kosec et al. 2021, arXiv:2107.02027: at sequence length 512 padding tokens are in excess of 50% of the "
    "Wikipedia dataset used for pre-training BERT (the MLPerf BERT dataset); real tokens per sequence at most 256"
)
UNPADDED_LENGTH = 256
UNPADDED_PREDICTIONS = 38  # 15% of 256 (masked_lm_prob), below MLPerf's cap of 76
BINNED_LENGTH = 288  # 256 real tokens + half a 64-token bin

_BASE_PT = _pretraining_bytes(128, 20)
_LARGE_PT = _pretraining_bytes(512, 76)
_SQUAD = _squad_bytes()
_WMT_BYTES = 2 * WMT_TOKENS_PER_SIDE * INT64_BYTES

RECIPES = [
    Recipe(
        name="gnmt",
        aliases=("nmt", "gnmt-v2", "gnmt_v2"),
        domain="language",
        description="GNMT v2 (4+4 LSTM layers of 1024), WMT16 English-German, 32,320-token shared BPE vocabulary",
        architecture="GNMT v2 of NVIDIA DeepLearningExamples PyTorch/Translation/GNMT (README 'Default configuration'; "
        "Wu et al. 2016, arXiv:1609.08144), plain torch definition features.model_defs.language.GNMT",
        build=_gnmt_probe,
        device="cpu",
        input_bytes_per_sample=_WMT_BYTES,
        input_bytes_source=f"int64 source and target token ids, {WMT_TOKENS_PER_SIDE} each: {_WMT_BYTES} B",
        default_batch_size_per_gpu=128,
        ai_matrix=True,
        sequence_length=WMT_TOKENS_PER_SIDE,
        sample_unit="sentence pairs",
        tokens_per_sample=2 * WMT_TOKENS_PER_SIDE,
        extra_sources={
            "sequence_length": configured(WMT_LENGTH_SOURCE),
            "tokens_per_sample": configured(
                "source + target tokens of one sentence pair, the unit of DeepLearningExamples GNMT 'Tok/s' "
                "(README: 'Training: 300155 Tok/s'), with the sequence length above"
            ),
            "default_batch_size_per_gpu": configured("DeepLearningExamples GNMT README: batch size 128 per GPU"),
        },
        notes="AI Matrix's NMT benchmark is the TensorFlow NMT tutorial's GNMT-style model.",
    ),
    Recipe(
        name="transformer",
        aliases=("transformer-base", "transformer-wmt", "transformer_base"),
        domain="language",
        description="Transformer base (6+6 layers, d=512), WMT English-German, 37,000-token shared BPE vocabulary",
        architecture="base Transformer of Vaswani et al. 2017 (arXiv:1706.03762, Table 3), torch nn.Transformer "
        "in features.model_defs.language.TransformerBase",
        build=_transformer_probe,
        input_bytes_per_sample=_WMT_BYTES,
        input_bytes_source=f"int64 source and target token ids, {WMT_TOKENS_PER_SIDE} each: {_WMT_BYTES} B",
        default_batch_size_per_gpu=128,
        sequence_length=WMT_TOKENS_PER_SIDE,
        sample_unit="sentence pairs",
        tokens_per_sample=WMT_TOKENS_PER_SIDE,
        extra_sources={
            "sequence_length": configured(WMT_LENGTH_SOURCE),
            "tokens_per_sample": configured(
                "target tokens of one sentence pair (fairseq's words-per-second counts target tokens)"
            ),
            "default_batch_size_per_gpu": configured(
                "about 3,500 target tokens per GPU (Vaswani et al.: 25,000 per batch of 8 GPUs) / 28 per pair"
            ),
        },
    ),
    Recipe(
        name="bert-base",
        aliases=("bert_base", "bert-base-uncased", "bert-base-pretraining"),
        domain="language",
        description="BERT-base pre-training (MLM + NSP), sequence length 128, 20 masked positions",
        architecture=f"{TRANSFORMERS} BertForPreTraining from BertConfig() ({BERT_PAPER}), MLM head on masked "
        "positions only as NVIDIA DeepLearningExamples does",
        build=lambda: _bert_pretraining_probe(False, 128, 20),
        input_bytes_per_sample=_BASE_PT[0],
        input_bytes_source=_BASE_PT[1],
        default_batch_size_per_gpu=64,
        ai_matrix=True,
        sequence_length=128,
        sample_unit="sequences",
        extra_sources={
            "sequence_length": configured("pre-training phase 1 (DeepLearningExamples, AI Matrix BERT_PyTorch): "
                                           "max_seq_length 128, max_predictions_per_seq 20"),
            "default_batch_size_per_gpu": configured("64 sequences per GPU"),
        },
    ),
    Recipe(
        name="bert-large",
        aliases=("bert_large", "bert-large-uncased", "bert-large-pretraining"),
        domain="language",
        description="BERT-large pre-training (MLM + NSP), sequence length 512, 76 masked positions (MLPerf)",
        architecture=f"{TRANSFORMERS} BertForPreTraining, 24 layers, hidden 1024, 16 heads ({BERT_PAPER}), MLM "
        "head on masked positions only as the MLPerf reference does",
        build=lambda: _bert_pretraining_probe(True, 512, 76),
        input_bytes_per_sample=_LARGE_PT[0],
        input_bytes_source=_LARGE_PT[1],
        default_batch_size_per_gpu=96,
        sequence_length=512,
        sample_unit="sequences",
        extra_sources={
            "sequence_length": configured("MLPerf Training BERT: max_seq_length 512, max_predictions_per_seq 76"),
            "default_batch_size_per_gpu": configured(
                "MLPerf Training v3.1 results (mlcommons/training_results_v3.1): 768 / 8 = 96 per GPU"
            ),
        },
        notes="Counted at the padded length 512; MLPerf submissions pack or unpad sequences, so their work per "
        "sample is lower.",
    ),
    Recipe(
        name="bert-large-seq128",
        aliases=("bert-large-phase1", "bert-large-pretraining-128"),
        domain="language",
        description="BERT-large pre-training phase 1 (MLM + NSP), sequence length 128, 20 masked positions",
        architecture=f"{TRANSFORMERS} BertForPreTraining, 24 layers, hidden 1024, 16 heads ({BERT_PAPER}), MLM "
        "head on masked positions only as NVIDIA DeepLearningExamples does",
        build=lambda: _bert_pretraining_probe(True, 128, 20),
        input_bytes_per_sample=_BASE_PT[0],
        input_bytes_source=_BASE_PT[1],
        default_batch_size_per_gpu=64,
        sequence_length=128,
        sample_unit="sequences",
        network_of="bert-large",
        extra_sources={
            "sequence_length": configured("DeepLearningExamples BERT pre-training phase 1 (PyTorch, TensorFlow and "
                                           "PaddlePaddle run_pretraining scripts): max_seq_length 128, "
                                           "max_predictions_per_seq 20"),
            "default_batch_size_per_gpu": configured(
                "DeepLearningExamples TensorFlow BERT README, phase-1 A100 training rows: 64 per GPU (TF32 and AMP)"
            ),
        },
        notes="Phase 1 of DeepLearningExamples' two-phase BERT-large pre-training, counted at "
        "the padded length 128.",
    ),
    Recipe(
        name="bert-large-unpadded",
        aliases=("mlperf-bert", "bert-large-packed", "bert-large-pretraining-unpadded"),
        domain="language",
        description="BERT-large pre-training at sequence length 512 with the padding removed (unpadded or packed "
        "sequences, as MLPerf submissions run it): about 256 real tokens and 38 masked positions per sequence",
        architecture=f"{TRANSFORMERS} BertForPreTraining, 24 layers, hidden 1024, 16 heads ({BERT_PAPER}), at the "
        f"mean real length {UNPADDED_LENGTH}, MLM head on the real masked positions only",
        build=lambda: _bert_pretraining_probe(True, UNPADDED_LENGTH, UNPADDED_PREDICTIONS),
        input_bytes_per_sample=_LARGE_PT[0],
        input_bytes_source=_LARGE_PT[1] + " (the host copies the padded sequence; padding is removed on the GPU)",
        default_batch_size_per_gpu=96,
        sequence_length=UNPADDED_LENGTH,
        sample_unit="sequences",
        extra_sources={
            "sequence_length": ("published", f"{UNPADDING_SOURCE}; counted at {UNPADDED_LENGTH}"),
            "default_batch_size_per_gpu": configured(
                "MLPerf Training v3.1 results (mlcommons/training_results_v3.1): 768 / 8 = 96 per GPU"
            ),
        },
        network_of="bert-large",
        notes=f"MLPerf's NVIDIA-derived BERT runs with --unpad since v0.7 and --unpad_fmha --dense_seq_output "
        f"since v1.0 (mlcommons/training_results_v0.7 and v1.0, NVIDIA/benchmarks/bert config_*.sh); packed "
        f"submissions do the same work. {UNPADDED_PREDICTIONS} masked positions = 15% (masked_lm_prob) of "
        f"{UNPADDED_LENGTH} real tokens (estimated).",
    ),
    Recipe(
        name="bert-large-binned",
        aliases=("bert-large-lddl", "bert-large-binned-64"),
        domain="language",
        description="BERT-large pre-training at sequence length 512 loaded in length bins of 64 tokens (NVIDIA "
        "LDDL, DeepLearningExamples' PyTorch and PaddlePaddle BERT): each sequence padded to its bin's upper edge, "
        "about 288 tokens and 38 masked positions per sequence",
        architecture=f"{TRANSFORMERS} BertForPreTraining, 24 layers, hidden 1024, 16 heads ({BERT_PAPER}), at "
        f"{BINNED_LENGTH} tokens, MLM head on the real masked positions only",
        build=lambda: _bert_pretraining_probe(True, BINNED_LENGTH, UNPADDED_PREDICTIONS),
        input_bytes_per_sample=_pretraining_bytes(BINNED_LENGTH, 80)[0],
        input_bytes_source=_pretraining_bytes(BINNED_LENGTH, 80)[1],
        default_batch_size_per_gpu=32,
        network_of="bert-large",
        sequence_length=BINNED_LENGTH,
        sample_unit="sequences",
        extra_sources={
            "sequence_length": (
                "estimated",
                f"{UNPADDED_LENGTH} real tokens ({UNPADDING_SOURCE}) plus half a 64-token bin of padding; bin size "
                "64: NVIDIA/DeepLearningExamples PyTorch/LanguageModeling/BERT/data/create_datasets_from_start.sh "
                "(BIN_SIZE default 64, 21.11-py3) and PaddlePaddle/LanguageModeling/BERT/README.md changelog "
                "(January 2023: binned phase-2 pre-training with LDDL, bin size 64)",
            ),
            "default_batch_size_per_gpu": configured(
                "DeepLearningExamples PaddlePaddle BERT README, phase-2 multi-node table: 32 per GPU with AMP"
            ),
        },
    ),
    Recipe(
        name="bert-base-squad",
        aliases=("bert_base_squad", "bert-base-finetune-squad"),
        domain="language",
        description="BERT-base fine-tuning on SQuAD v1.1, sequence length 384",
        architecture=f"{TRANSFORMERS} BertForQuestionAnswering from BertConfig() ({BERT_PAPER})",
        build=lambda: _bert_squad_probe(False),
        input_bytes_per_sample=_SQUAD[0],
        input_bytes_source=_SQUAD[1],
        default_batch_size_per_gpu=48,
        sequence_length=384,
        sample_unit="sequences",
        extra_sources={
            "sequence_length": configured("DeepLearningExamples run_squad.sh max_seq_length 384"),
            "default_batch_size_per_gpu": configured(f"{LAMBDA_24GB}: 48 per GPU in FP32"),
        },
    ),
    Recipe(
        name="bert-large-squad",
        aliases=("bert_large_squad", "bert-large-finetune-squad"),
        domain="language",
        description="BERT-large fine-tuning on SQuAD v1.1, sequence length 384",
        architecture=f"{TRANSFORMERS} BertForQuestionAnswering, 24 layers, hidden 1024, 16 heads ({BERT_PAPER})",
        build=lambda: _bert_squad_probe(True),
        input_bytes_per_sample=_SQUAD[0],
        input_bytes_source=_SQUAD[1],
        default_batch_size_per_gpu=16,
        sequence_length=384,
        sample_unit="sequences",
        extra_sources={
            "sequence_length": configured("DeepLearningExamples run_squad.sh max_seq_length 384"),
            "default_batch_size_per_gpu": configured(f"{LAMBDA_24GB}: 16 per GPU in FP32"),
        },
    ),
]
