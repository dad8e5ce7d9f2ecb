"""The three models the testbed trains, from communication-bound to compute-bound.

Each is small enough that one process with one CPU thread runs a training
step in milliseconds to a few hundred milliseconds, and together they span
the ratio of gradient bytes to FLOPs that decides whether a job is limited
by its network or by its processor:

* ``testbed-recsys``: ~0.27 M parameters, 96 % of them in one embedding
  table, ~60 thousand training FLOPs per sample: communication-bound;
* ``testbed-transformer``: ~0.93 M parameters, ~0.26 GFLOP per sample:
  between the two;
* ``testbed-resnet``: ~0.08 M parameters, ~0.075 GFLOP per sample:
  compute-bound.

(Training FLOPs: forward plus backward, about three times the forward
multiply-adds times two.)

:data:`TESTBED_MODELS` maps each catalogue name to a builder and a synthetic
batch generator with a fixed seed, so every process of a distributed run
builds identical weights and each worker reads its own reproducible batch. This module imports
torch; only the testbed collector and the workload counter import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from features.errors import UnknownNameError


@dataclass(frozen=True)
class Batch:
    """One synthetic training batch: the model's positional inputs and the target."""

    inputs: tuple[torch.Tensor, ...]
    target: torch.Tensor

    @property
    def input_bytes(self) -> int:
        """Bytes of the inputs (not the target) as the model receives them."""
        return sum(t.numel() * t.element_size() for t in self.inputs)


class TestbedRecsys(nn.Module):
    """A DLRM-style click-through model with one shared embedding table.

    Shapes: ``dense`` (B, 13) float32 and ``ids`` (B, 8) int64, where field
    ``f``'s id already points into its own 2048-row slice of the shared
    16384 x 16 table; output (B,) click logits. The bottom MLP maps
    13 -> 32 -> 16, the 8 looked-up 16-wide embeddings are concatenated with
    it (144 wide) and the top MLP maps 144 -> 64 -> 1.

    The table is trained with DENSE gradients (``sparse=False``): backward
    produces a full 16384 x 16 gradient, so all 262,144 table parameters,
    not only the looked-up rows, are exchanged every step. That makes the
    step communication-bound, as the embedding-heavy recommendation jobs of
    the PAI study are; the table is sized so a step at 100 Mbit/s stays
    under a second.
    """

    num_dense = 13
    num_fields = 8
    rows_per_field = 2048
    embedding_dim = 16

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(self.num_fields * self.rows_per_field, self.embedding_dim, sparse=False)
        self.bottom = nn.Sequential(nn.Linear(self.num_dense, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        self.top = nn.Sequential(
            nn.Linear(16 + self.num_fields * self.embedding_dim, 64), nn.ReLU(), nn.Linear(64, 1)
        )

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        embedded = self.embedding(ids).flatten(1)
        return self.top(torch.cat([self.bottom(dense), embedded], dim=1)).squeeze(1)


def _recsys_batch(batch_size: int, generator: torch.Generator) -> Batch:
    m = TestbedRecsys
    dense = torch.randn(batch_size, m.num_dense, generator=generator)
    offsets = torch.arange(m.num_fields) * m.rows_per_field
    ids = torch.randint(0, m.rows_per_field, (batch_size, m.num_fields), generator=generator) + offsets
    clicks = torch.randint(0, 2, (batch_size,), generator=generator).float()
    return Batch((dense, ids), clicks)


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class TestbedResNet(nn.Module):
    """A CIFAR-style ResNet-8: one basic block per stage, widths 16/32/64.

    Shapes: input (B, 3, 32, 32) float32; stem 3x3 conv to 16 x 32 x 32;
    stages of one basic block each at 16 x 32 x 32, 32 x 16 x 16 and
    64 x 8 x 8 (stride-2 blocks with a 1x1 projection shortcut); global
    average pool to 64; linear to (B, 10) class logits. About 78 k
    parameters and 12.5 M multiply-adds per sample forward: compute-bound.
    """

    num_classes = 10
    input_shape = (3, 32, 32)

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.stages = nn.Sequential(_BasicBlock(16, 16, 1), _BasicBlock(16, 32, 2), _BasicBlock(32, 64, 2))
        self.head = nn.Linear(64, self.num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(images))
        return self.head(features.mean(dim=(2, 3)))


def _resnet_batch(batch_size: int, generator: torch.Generator) -> Batch:
    images = torch.randn(batch_size, *TestbedResNet.input_shape, generator=generator)
    labels = torch.randint(0, TestbedResNet.num_classes, (batch_size,), generator=generator)
    return Batch((images,), labels)


class TestbedTransformer(nn.Module):
    """A two-layer causal transformer language model on token ids.

    Shapes: input (B, 64) int64 token ids from a 2048-token vocabulary;
    token embedding 2048 x 128 plus a learned 64 x 128 position embedding;
    two pre-norm encoder layers (4 heads of 32, feed-forward 512, no
    dropout) under a causal mask; final layer norm; untied linear head to
    (B, 64, 2048) next-token logits. About 0.93 M parameters and 44 M
    multiply-adds per sample forward (~688 k per token), which puts its
    gradient bytes per FLOP between the other two testbed models.
    """

    vocab_size = 2048
    sequence_length = 64
    d_model = 128
    num_heads = 4
    ff_dim = 512
    num_layers = 2

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(self.vocab_size, self.d_model)
        self.positions = nn.Embedding(self.sequence_length, self.d_model)
        layer = nn.TransformerEncoderLayer(
            self.d_model, self.num_heads, self.ff_dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, self.num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(self.d_model)
        self.head = nn.Linear(self.d_model, self.vocab_size)
        self.register_buffer(
            "causal_mask", nn.Transformer.generate_square_subsequent_mask(self.sequence_length), persistent=False
        )

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        length = token_ids.shape[1]
        positions = torch.arange(length, device=token_ids.device)
        x = self.tokens(token_ids) + self.positions(positions)
        x = self.encoder(x, mask=self.causal_mask[:length, :length], is_causal=True)
        return self.head(self.norm(x))


def _transformer_batch(batch_size: int, generator: torch.Generator) -> Batch:
    m = TestbedTransformer
    tokens = torch.randint(0, m.vocab_size, (batch_size, m.sequence_length + 1), generator=generator)
    return Batch((tokens[:, :-1].contiguous(),), tokens[:, 1:].contiguous())


def _lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


@dataclass(frozen=True)
class TestbedModel:
    """A catalogue name bound to a model builder, a batch generator and a loss."""

    name: str
    description: str
    builder: Callable[[], nn.Module]
    batch_generator: Callable[[int, torch.Generator], Batch]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    input_shape: tuple[int, ...]
    default_batch_size: int
    sequence_length: int | None = None

    def build(self, seed: int = 0) -> nn.Module:
        """The model with weights drawn from ``seed``; the global RNG is left untouched."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.builder()

    def make_batch(self, batch_size: int, seed: int = 0) -> Batch:
        """A synthetic batch of ``batch_size`` samples drawn from ``seed``."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        return self.batch_generator(batch_size, torch.Generator().manual_seed(seed))

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Forward pass and the scalar training loss of ``batch``."""
        return self.loss_fn(model(*batch.inputs), batch.target)


TESTBED_MODELS: dict[str, TestbedModel] = {
    "testbed-recsys": TestbedModel(
        name="testbed-recsys",
        description="DLRM-style click model, 16384 x 16 embedding table trained with dense gradients",
        builder=TestbedRecsys,
        batch_generator=_recsys_batch,
        loss_fn=F.binary_cross_entropy_with_logits,
        input_shape=(TestbedRecsys.num_dense + TestbedRecsys.num_fields,),
        default_batch_size=128,
    ),
    "testbed-resnet": TestbedModel(
        name="testbed-resnet",
        description="CIFAR-style ResNet-8 (widths 16/32/64) on 3x32x32 images, 10 classes",
        builder=TestbedResNet,
        batch_generator=_resnet_batch,
        loss_fn=F.cross_entropy,
        input_shape=TestbedResNet.input_shape,
        default_batch_size=16,
    ),
    "testbed-transformer": TestbedModel(
        name="testbed-transformer",
        description="two-layer causal transformer LM, d_model 128, vocabulary 2048, 64 tokens",
        builder=TestbedTransformer,
        batch_generator=_transformer_batch,
        loss_fn=_lm_loss,
        input_shape=(TestbedTransformer.sequence_length,),
        default_batch_size=8,
        sequence_length=TestbedTransformer.sequence_length,
    ),
}


def testbed_model(name: str) -> TestbedModel:
    """The registry entry called ``name``; ``UnknownNameError`` otherwise."""
    try:
        return TESTBED_MODELS[name]
    except KeyError:
        raise UnknownNameError("testbed model", "workload.model", name, TESTBED_MODELS) from None
