"""DLRM, the recommendation workload of MLPerf Training and NVIDIA's DeepLearningExamples.

Two networks, plain torch definitions after the references: DLRM with a
DCNv2 cross network (MLPerf Training v3.0+, TorchRec) and the original DLRM
with a dot interaction (Naumov et al. 2019; MLPerf Training v0.7-v2.1 and
DeepLearningExamples' PyTorch and TensorFlow 2 examples, at four embedding
sizes set by a frequency threshold). Tables (4 to 113 billion parameters)
are built with at most 1,000 rows each: the traffic per looked-up row does
not depend on the table size, and the real parameter count comes from the
published table sizes. Tables are updated sparsely, so they are the probe's
sparse modules and excluded from ``dense_param_count``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import FLOAT32_BYTES, INT64_BYTES, Probe, Recipe, configured
from features.model_defs.recsys import mlp

# MLPerf Training DLRM-DCNv2 (mlcommons/training recommendation_v2/torchrec_dlrm): Criteo 1TB
# multi-hot, 26 tables capped at 40 M rows, embedding dimension 128, multi-hot sizes per table.
DLRM_TABLE_ROWS = (
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
    2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36,
)  # fmt: skip
DLRM_MULTI_HOT = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
DLRM_DIM = 128
PROXY_ROWS = 1000


class LowRankCrossNet(nn.Module):
    """DCNv2 cross layers: ``x_{l+1} = x_0 * (W (V x_l) + b) + x_l`` with rank-512 ``W V`` (TorchRec)."""

    def __init__(self, width: int, layers: int = 3, rank: int = 512) -> None:
        super().__init__()
        self.v = nn.ModuleList(nn.Linear(width, rank, bias=False) for _ in range(layers))
        self.w = nn.ModuleList(nn.Linear(rank, width) for _ in range(layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for v, w in zip(self.v, self.w):
            x = x0 * w(v(x)) + x
        return x


class DLRMDCNv2(nn.Module):
    """DLRM with a DCNv2 interaction, as in MLPerf Training v3.0+ (dlrm_dcnv2).

    13 dense features through a 512 -> 256 -> 128 bottom MLP; 26 sum-pooled
    multi-hot embedding bags of width 128; a 3-layer low-rank (512) cross
    network over the 3,456 concatenated features; a 1024 -> 1024 -> 512 ->
    256 -> 1 top MLP; sigmoid cross-entropy. Tables are built with at most
    ``PROXY_ROWS`` rows.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bottom = mlp([13, 512, 256, 128], act=nn.ReLU, last_act=True)
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(min(rows, PROXY_ROWS), DLRM_DIM, mode="sum") for rows in DLRM_TABLE_ROWS
        )
        width = DLRM_DIM * (len(DLRM_TABLE_ROWS) + 1)
        self.cross = LowRankCrossNet(width)
        self.top = mlp([width, 1024, 1024, 512, 256, 1], act=nn.ReLU)

    def forward(self, dense, sparse: list[torch.Tensor]):
        pooled = [table(ids) for table, ids in zip(self.tables, sparse)]
        x = torch.cat([self.bottom(dense), *pooled], 1)
        return self.top(self.cross(x)).squeeze(-1)


def _tables_probe(model: nn.Module, table_rows: tuple[int, ...], multi_hot: tuple[int, ...]) -> Probe:
    """A DLRM built with proxy tables: dense features, ``multi_hot`` indices per table, click labels."""

    def make_batch(b: int):
        sparse = [torch.randint(0, min(rows, PROXY_ROWS), (b, hot)) for rows, hot in zip(table_rows, multi_hot)]
        return torch.randn(b, 13), sparse, torch.randint(0, 2, (b,)).float()

    def loss(m: nn.Module, batch):
        dense, sparse, y = batch
        return F.binary_cross_entropy_with_logits(m(dense, sparse), y)

    return Probe(
        model,
        make_batch,
        loss,
        sparse_modules=tuple(model.tables),
        sparse_param_count=sum(table_rows) * DLRM_DIM,
    )


def _dlrm_probe() -> Probe:
    return _tables_probe(DLRMDCNv2(), DLRM_TABLE_ROWS, DLRM_MULTI_HOT)


# MLPerf Training v0.7-v2.1 DLRM (mlcommons/training recommendation/dlrm, Criteo 1TB one-hot, --max-ind-range
# 40000000): the 26 table sizes of the reference's preprocessed day counts.
DLRM_DOT_TABLE_ROWS = (
    39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208, 11938, 155, 4,
    976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36,
)  # fmt: skip


class DLRMDot(nn.Module):
    """The original DLRM (Naumov et al. 2019, arXiv:1906.00091) on Criteo Terabyte.

    13 dense features through a 512 -> 256 -> 128 bottom MLP; 26 one-hot
    embedding lookups of width 128; the dot interaction: the pairwise dot
    products of the 27 vectors below the diagonal (351) concatenated with
    the bottom MLP's output (479 features; NVIDIA's kernels pad them to
    480); a 1024 -> 1024 -> 512 -> 256 -> 1 top MLP; sigmoid cross-entropy.
    Tables are built with at most ``PROXY_ROWS`` rows.
    """

    def __init__(self, table_rows: tuple[int, ...] = DLRM_DOT_TABLE_ROWS) -> None:
        super().__init__()
        self.bottom = mlp([13, 512, 256, DLRM_DIM], act=nn.ReLU, last_act=True)
        self.tables = nn.ModuleList(nn.EmbeddingBag(min(rows, PROXY_ROWS), DLRM_DIM, mode="sum") for rows in table_rows)
        vectors = len(table_rows) + 1
        below = torch.tril_indices(vectors, vectors, offset=-1)
        self.register_buffer("below_i", below[0], persistent=False)
        self.register_buffer("below_j", below[1], persistent=False)
        self.top = mlp([DLRM_DIM + vectors * (vectors - 1) // 2, 1024, 1024, 512, 256, 1], act=nn.ReLU)

    def forward(self, dense, sparse: list[torch.Tensor]):
        x = self.bottom(dense)
        vectors = torch.stack([x, *(table(ids) for table, ids in zip(self.tables, sparse))], 1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.below_i, self.below_j]
        return self.top(torch.cat([x, dots], 1)).squeeze(-1)


def _dlrm_dot_probe() -> Probe:
    return _tables_probe(DLRMDot(), DLRM_DOT_TABLE_ROWS, (1,) * len(DLRM_DOT_TABLE_ROWS))


_DLRM_BYTES = sum(DLRM_MULTI_HOT) * INT64_BYTES + 14 * FLOAT32_BYTES

RECIPES = [
    Recipe(
        name="dlrm-dcnv2",
        aliases=("dlrm", "dlrm_dcnv2", "dlrmv2", "dlrm-v2"),
        domain="recommendation",
        description="DLRM with a DCNv2 cross network, Criteo 1TB multi-hot (MLPerf Training dlrm_dcnv2)",
        architecture="MLPerf Training recommendation_v2 (mlcommons/training, TorchRec DLRM-DCNv2; Wang et al. 2021, "
        "arXiv:2008.13535), plain torch definition features.model_defs.dlrm.DLRMDCNv2",
        build=_dlrm_probe,
        input_bytes_per_sample=_DLRM_BYTES,
        input_bytes_source=f"{sum(DLRM_MULTI_HOT)} int64 multi-hot indices + 13 float32 dense features + float32 "
        f"label: {_DLRM_BYTES} B",
        default_batch_size_per_gpu=6912,
        sample_unit="samples",
        extra_sources={
            "default_batch_size_per_gpu": configured(
                "MLPerf Training v3.1 results (mlcommons/training_results_v3.1): 55,296 / 8 = 6,912 per GPU"
            ),
        },
        notes="param_count includes the 26 tables at their MLPerf sizes (204 M rows x 128); they are updated "
        "sparsely (or model-parallel), so dense_param_count is the MLPs and the cross network.",
    ),
]


_DLRM_DOT_BYTES = len(DLRM_DOT_TABLE_ROWS) * INT64_BYTES + 14 * FLOAT32_BYTES
_DLRM_DOT_ARCHITECTURE = (
    "the original DLRM with a dot interaction (Naumov et al. 2019, arXiv:1906.00091; MLPerf Training v0.7-v2.1 "
    "recommendation/dlrm; DeepLearningExamples PyTorch and TensorFlow2 Recommendation/DLRM), plain torch definition "
    "features.model_defs.dlrm.DLRMDot"
)
#: DeepLearningExamples' global batch, split over the GPUs (PyTorch dist_main.py: 65,536; 8 GPUs -> 8,192 each).
_DLE_DLRM_BATCH = configured("DeepLearningExamples DLRM: global batch 65,536 (dist_main.py) / 8 GPUs = 8,192 per GPU")
_DLE_DLRM_README = "NVIDIA/DeepLearningExamples TensorFlow2/Recommendation/DLRM README (model sizes table)"


def _dle_dlrm(threshold: int, size: str, params: float, source: tuple[str, str], aliases: tuple[str, ...]) -> Recipe:
    """One of DeepLearningExamples' DLRM sizes: the network of ``dlrm-dot`` with the tables a frequency threshold leaves."""
    kind, where = source
    return Recipe(
        name=f"dlrm-dot-fl{threshold}",
        aliases=aliases,
        domain="recommendation",
        description=f"the original DLRM, DeepLearningExamples' {size!r} model (Criteo Terabyte, frequency threshold "
        f"{threshold})",
        architecture=_DLRM_DOT_ARCHITECTURE,
        build=_dlrm_dot_probe,
        input_bytes_per_sample=_DLRM_DOT_BYTES,
        input_bytes_source=f"26 int64 indices + 13 float32 dense features + float32 label: {_DLRM_DOT_BYTES} B",
        default_batch_size_per_gpu=8192,
        sample_unit="samples",
        published={"param_count": (params, where)},
        extra_sources={"default_batch_size_per_gpu": _DLE_DLRM_BATCH, "param_count": (kind, where)},
        notes="The network of dlrm-dot; only the tables differ (categories seen fewer than "
        f"{threshold} times share one row), so param_count is the model size DeepLearningExamples gives.",
        network_of="dlrm-dot",
    )


RECIPES += [
    Recipe(
        name="dlrm-dot",
        aliases=("dlrm-v1", "dlrm-original", "dlrm-mlperf-v1"),
        domain="recommendation",
        description="the original DLRM (dot interaction), Criteo 1TB one-hot, tables capped at 40 M rows "
        "(MLPerf Training v0.7-v2.1 dlrm)",
        architecture=_DLRM_DOT_ARCHITECTURE,
        build=_dlrm_dot_probe,
        input_bytes_per_sample=_DLRM_DOT_BYTES,
        input_bytes_source=f"26 int64 indices + 13 float32 dense features + float32 label: {_DLRM_DOT_BYTES} B",
        default_batch_size_per_gpu=6912,
        sample_unit="samples",
        extra_sources={
            "default_batch_size_per_gpu": configured(
                "MLPerf Training v0.7-v1.0 results (mlcommons/training_results): 55,296 / 8 = 6,912 per GPU"
            ),
        },
        notes="param_count includes the 26 tables at the MLPerf reference's sizes (188 M rows x 128); they are "
        "updated sparsely (model-parallel in NVIDIA's and DeepLearningExamples' code, exchanged by an all-to-all "
        "the physics does not model), so dense_param_count is the two MLPs.",
    ),
    _dle_dlrm(15, "small", 4.2e9, ("published", f"{_DLE_DLRM_README}: 4.2B parameters, 15.6 GiB"), ("dlrm-small",)),
    _dle_dlrm(3, "large", 22.8e9, ("published", f"{_DLE_DLRM_README}: 22.8B parameters, 84.9 GiB"), ("dlrm-large",)),
    _dle_dlrm(0, "extra large", 113e9, ("published", f"{_DLE_DLRM_README}: 113B parameters, 421 GiB"), ("dlrm-extra-large",)),
    _dle_dlrm(
        2, "xlarge", 35.5e9,
        ("estimated", "NVIDIA/DeepLearningExamples PyTorch/Recommendation/DLRM README: '\"xlarge\" (~142 GB)' at 4 bytes "
         "a parameter (the parameter count is not given)"),
        ("dlrm-xlarge",),
    ),
]
