"""MLPerf Training's recommendation workload: DLRM with a DCNv2 cross network.

A plain torch definition after the reference (TorchRec). Its tables (26
billion parameters) are built with at most 1,000 rows each: the traffic per
looked-up row does not depend on the table size, and the real parameter
count comes from the published table sizes. Tables are updated sparsely, so
they are the probe's sparse modules and excluded from ``dense_param_count``.
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


def _dlrm_probe() -> Probe:
    model = DLRMDCNv2()

    def make_batch(b: int):
        sparse = [
            torch.randint(0, min(rows, PROXY_ROWS), (b, hot)) for rows, hot in zip(DLRM_TABLE_ROWS, DLRM_MULTI_HOT)
        ]
        return torch.randn(b, 13), sparse, torch.randint(0, 2, (b,)).float()

    def loss(m: nn.Module, batch):
        dense, sparse, y = batch
        return F.binary_cross_entropy_with_logits(m(dense, sparse), y)

    return Probe(
        model,
        make_batch,
        loss,
        sparse_modules=tuple(model.tables),
        sparse_param_count=sum(DLRM_TABLE_ROWS) * DLRM_DIM,
    )


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
