"""ResNet and BERT written in plain torch, for the operator-level counter.

The workload catalogue's figures for these models were counted on
torchvision's and transformers' definitions; the operator-level counter
(:mod:`features.op_counting`) needs only torch, so it counts these
re-statements of the same published architectures instead. Their matrix
FLOPs equal the catalogue's counted ``flops_per_sample`` (checked by the
tests), which is what makes the two counts one description of one model.

* :class:`ResNet`: ResNet v1.5 (He et al. 2016, arXiv:1512.03385; stride 2
  in the 3x3 convolution of the first bottleneck of a stage, as torchvision
  and NVIDIA DeepLearningExamples build it).
* :class:`Bert`: BERT (Devlin et al. 2019, arXiv:1810.04805): token,
  position and segment embeddings, post-norm encoder layers with GELU, the
  attention as one fused scaled-dot-product call.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import Probe, randint, randn, repeat_to, seeded


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.down is None else self.down(x)
        return F.relu(out + identity)


class ResNet(nn.Module):
    """Bottleneck ResNet v1.5 for 1000-class ImageNet; ``layers`` (3, 4, 6, 3) is ResNet-50."""

    def __init__(self, layers: tuple[int, int, int, int], num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        )
        blocks: list[nn.Module] = []
        cin = 64
        for stage, (n, width) in enumerate(zip(layers, (64, 128, 256, 512))):
            for i in range(n):
                blocks.append(Bottleneck(cin, width, 2 if (i == 0 and stage > 0) else 1))
                cin = width * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def resnet_probe(layers: tuple[int, int, int, int], image_size: int = 224) -> Probe:
    """Cross-entropy training of a ResNet on ``3 x image_size x image_size`` images."""
    g = seeded()
    images = randn(2, 3, image_size, image_size, generator=g)
    labels = randint(0, 1000, (2,), g)

    def make_batch(b: int):
        return repeat_to(images, b), repeat_to(labels, b)

    def loss(m: nn.Module, batch):
        x, y = batch
        return F.cross_entropy(m(x), y)

    return Probe(ResNet(layers), make_batch, loss)


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.up = nn.Linear(hidden, intermediate)
        self.down = nn.Linear(intermediate, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        x = self.norm1(x + F.dropout(self.out(attn.transpose(1, 2).reshape(b, s, h)), 0.1))
        return self.norm2(x + F.dropout(self.down(F.gelu(self.up(x))), 0.1))


class Bert(nn.Module):
    """BERT encoder; ``large`` is 24 layers of 1024 (16 heads), otherwise 12 of 768 (12 heads)."""

    vocab_size = 30522

    def __init__(self, large: bool, max_positions: int = 512) -> None:
        super().__init__()
        hidden, layers, heads = (1024, 24, 16) if large else (768, 12, 12)
        self.hidden = hidden
        self.tokens = nn.Embedding(self.vocab_size, hidden)
        self.positions = nn.Embedding(max_positions, hidden)
        self.segments = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, 4 * hidden) for _ in range(layers))

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions) + self.segments(segments)
        x = F.dropout(self.norm(x), 0.1)
        for layer in self.layers:
            x = layer(x)
        return x


class BertSquad(nn.Module):
    def __init__(self, large: bool) -> None:
        super().__init__()
        self.bert = Bert(large)
        self.qa = nn.Linear(self.bert.hidden, 2)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        return self.qa(self.bert(ids, segments))


class BertPretraining(nn.Module):
    """Masked-LM head (transform, then the tied decoder) on the masked positions, and next-sentence head."""

    def __init__(self, large: bool) -> None:
        super().__init__()
        self.bert = Bert(large)
        hidden = self.bert.hidden
        self.transform = nn.Linear(hidden, hidden)
        self.transform_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.decoder_bias = nn.Parameter(torch.zeros(Bert.vocab_size))
        self.pooler = nn.Linear(hidden, hidden)
        self.nsp = nn.Linear(hidden, 2)

    def forward(self, ids, segments, masked_positions):
        sequence = self.bert(ids, segments)
        hidden = sequence.gather(1, masked_positions.unsqueeze(-1).expand(-1, -1, sequence.shape[-1]))
        hidden = self.transform_norm(F.gelu(self.transform(hidden)))
        mlm = F.linear(hidden, self.bert.tokens.weight, self.decoder_bias)
        nsp = self.nsp(torch.tanh(self.pooler(sequence[:, 0])))
        return mlm, nsp


def bert_squad_probe(large: bool, seq_len: int = 384) -> Probe:
    """SQuAD fine-tuning: start and end logits, cross-entropy on both."""
    g = seeded()
    ids = randint(0, Bert.vocab_size, (2, seq_len), g)
    segments = randint(0, 2, (2, seq_len), g)
    starts = randint(0, seq_len, (2,), g)
    ends = randint(0, seq_len, (2,), g)

    def make_batch(b: int):
        return tuple(repeat_to(t, b) for t in (ids, segments, starts, ends))

    def loss(m: nn.Module, batch):
        input_ids, token_type_ids, start, end = batch
        start_logits, end_logits = m(input_ids, token_type_ids).unbind(-1)
        return (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2

    return Probe(BertSquad(large), make_batch, loss)


def bert_pretraining_probe(large: bool, seq_len: int, predictions: int) -> Probe:
    """Masked-LM + next-sentence pre-training; the MLM head runs on the masked positions only."""
    g = seeded()
    ids = randint(0, Bert.vocab_size, (2, seq_len), g)
    segments = randint(0, 2, (2, seq_len), g)
    positions = randint(0, seq_len, (2, predictions), g)
    mlm_labels = randint(0, Bert.vocab_size, (2, predictions), g)
    nsp_labels = randint(0, 2, (2,), g)

    def make_batch(b: int):
        return tuple(repeat_to(t, b) for t in (ids, segments, positions, mlm_labels, nsp_labels))

    def loss(m: nn.Module, batch):
        input_ids, token_type_ids, masked, labels, nsp = batch
        mlm_logits, nsp_logits = m(input_ids, token_type_ids, masked)
        return F.cross_entropy(mlm_logits.reshape(-1, Bert.vocab_size), labels.reshape(-1)) + F.cross_entropy(nsp_logits, nsp)

    return Probe(BertPretraining(large), make_batch, loss)


#: Workload name -> (probe builder, definition cited in the catalogue's source).
PLAIN_BUILDERS = {
    "resnet50": (lambda: resnet_probe((3, 4, 6, 3)), "features.model_defs.plain.ResNet((3, 4, 6, 3)), ResNet-50 v1.5"),
    "resnet152": (lambda: resnet_probe((3, 8, 36, 3)), "features.model_defs.plain.ResNet((3, 8, 36, 3)), ResNet-152 v1.5"),
    "bert-base-squad": (lambda: bert_squad_probe(False), "features.model_defs.plain.BertSquad(large=False), sequence 384"),
    "bert-large-squad": (lambda: bert_squad_probe(True), "features.model_defs.plain.BertSquad(large=True), sequence 384"),
    "bert-base": (
        lambda: bert_pretraining_probe(False, 128, 20),
        "features.model_defs.plain.BertPretraining(large=False), sequence 128, 20 masked positions",
    ),
    "bert-large": (
        lambda: bert_pretraining_probe(True, 512, 76),
        "features.model_defs.plain.BertPretraining(large=True), sequence 512, 76 masked positions",
    ),
    "bert-large-unpadded": (
        lambda: bert_pretraining_probe(True, 256, 38),
        "features.model_defs.plain.BertPretraining(large=True), sequence 256 (padding removed), 38 masked positions",
    ),
    "bert-large-binned": (
        lambda: bert_pretraining_probe(True, 288, 38),
        "features.model_defs.plain.BertPretraining(large=True), sequence 288 (64-token bins), 38 masked positions",
    ),
}
