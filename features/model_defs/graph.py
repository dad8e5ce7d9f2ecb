"""Graph workloads: GCN (full-batch, Cora) and R-GAT (MLPerf, IGBH-full, sampled mini-batches).

Plain torch definitions (no graph library is installed): message passing is
a gather of source rows and an ``index_add`` into destination rows, which
FlopCounterMode does not count as FLOPs (its bytes are counted); the dense
projections, where almost all the FLOPs are, are counted.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import FLOAT32_BYTES, INT64_BYTES, Probe, Recipe, configured

# Cora (Sen et al. 2008; Kipf and Welling 2017, Table 1): 2,708 nodes, 5,429
# undirected edges, 1,433 bag-of-words features, 7 classes, 140 labelled.
CORA_NODES, CORA_EDGES, CORA_FEATURES, CORA_CLASSES = 2708, 5429, 1433, 7


class GCN(nn.Module):
    """Two-layer GCN of Kipf and Welling 2017 (arXiv:1609.02907): 1433 -> 16 (ReLU, dropout 0.5) -> 7.

    Each layer is ``D^-1/2 (A + I) D^-1/2 X W``: a dense projection then
    a normalised sum over in-edges (self-loops included).
    """

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(CORA_FEATURES, 16)
        self.w2 = nn.Linear(16, CORA_CLASSES)

    @staticmethod
    def propagate(x, src, dst, norm):
        return torch.zeros_like(x).index_add(0, dst, x.index_select(0, src) * norm.unsqueeze(1))

    def forward(self, x, src, dst, norm):
        h = F.dropout(F.relu(self.propagate(self.w1(F.dropout(x, 0.5, self.training)), src, dst, norm)), 0.5)
        return self.propagate(self.w2(h), src, dst, norm)


def _cora_graph(copies: int) -> tuple[torch.Tensor, ...]:
    """``copies`` disjoint Cora-sized random graphs: features, edge ends (both directions + self-loops), norms."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, CORA_NODES, (CORA_EDGES,), generator=g)
    b = torch.randint(0, CORA_NODES, (CORA_EDGES,), generator=g)
    loops = torch.arange(CORA_NODES)
    src1, dst1 = torch.cat([a, b, loops]), torch.cat([b, a, loops])
    offsets = torch.arange(copies).repeat_interleave(src1.numel()) * CORA_NODES
    src, dst = src1.repeat(copies) + offsets, dst1.repeat(copies) + offsets
    deg = torch.zeros(copies * CORA_NODES).index_add(0, dst, torch.ones(dst.numel()))
    norm = (deg[src] * deg[dst]).rsqrt()
    x = (torch.rand(copies * CORA_NODES, CORA_FEATURES, generator=g) < 0.0127).float()
    labels = torch.randint(0, CORA_CLASSES, (copies * CORA_NODES,), generator=g)
    train = (torch.arange(copies * CORA_NODES) % CORA_NODES) < 140
    return x, src, dst, norm, labels, train


def _gcn_probe() -> Probe:
    def make_batch(b: int):
        return _cora_graph(b)

    def loss(m: nn.Module, batch):
        x, src, dst, norm, labels, train = batch
        return F.cross_entropy(m(x, src, dst, norm)[train], labels[train])

    return Probe(GCN(), make_batch, loss)


# MLPerf Training R-GAT (mlcommons/training graph_neural_network/train_rgnn_multi_gpu.py defaults).
FANOUT = (15, 10, 5)
RGAT_IN, RGAT_HIDDEN, RGAT_HEADS, RGAT_CLASSES = 1024, 512, 4, 2983
IGBH_RELATIONS = 12  # 6 IGBH-full edge types and their reverses


class RelationalGATLayer(nn.Module):
    """One R-GAT layer: a GAT convolution (``heads`` x ``out / heads``) per relation, summed per destination.

    Each relation's projection runs on the source and destination nodes of
    its edges; attention logits are LeakyReLU(a_src . h_src + a_dst . h_dst),
    soft-maxed over each destination's in-edges (computed as exp / sum).
    """

    def __init__(self, d_in: int, d_out: int, relations: int, heads: int) -> None:
        super().__init__()
        self.heads, self.d_head = heads, d_out // heads
        self.lin = nn.ModuleList(nn.Linear(d_in, d_out, bias=False) for _ in range(relations))
        self.att_src = nn.Parameter(torch.randn(relations, heads, self.d_head) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(relations, heads, self.d_head) * 0.1)
        self.bias = nn.Parameter(torch.zeros(relations, d_out))

    def forward(self, x: torch.Tensor, edges: list[tuple[torch.Tensor, torch.Tensor]], num_dst: int) -> torch.Tensor:
        out = x.new_zeros(num_dst, self.heads * self.d_head)
        for r, (src, dst) in enumerate(edges):
            h_src = self.lin[r](x.index_select(0, src)).view(-1, self.heads, self.d_head)
            h_dst = self.lin[r](x.index_select(0, dst)).view(-1, self.heads, self.d_head)
            logits = F.leaky_relu((h_src * self.att_src[r]).sum(-1) + (h_dst * self.att_dst[r]).sum(-1), 0.2)
            weight = logits.exp()
            denom = x.new_zeros(num_dst, self.heads).index_add(0, dst, weight)
            alpha = weight / denom.index_select(0, dst)
            msg = (h_src * alpha.unsqueeze(-1)).reshape(-1, self.heads * self.d_head)
            out = out.index_add(0, dst, msg) + self.bias[r]
        return out


class RGAT(nn.Module):
    """The MLPerf R-GAT: 3 relational GAT layers (1024 -> 512 -> 512 -> 512, 4 heads), batch norm, 2,983 classes."""

    def __init__(self) -> None:
        super().__init__()
        dims = [RGAT_IN, RGAT_HIDDEN, RGAT_HIDDEN, RGAT_HIDDEN]
        self.layers = nn.ModuleList(
            RelationalGATLayer(a, b, IGBH_RELATIONS, RGAT_HEADS) for a, b in zip(dims[:-1], dims[1:])
        )
        self.norms = nn.ModuleList(nn.BatchNorm1d(RGAT_HIDDEN) for _ in range(len(dims) - 2))
        self.classifier = nn.Linear(RGAT_HIDDEN, RGAT_CLASSES)

    def forward(self, x, hops, sizes):
        """``hops[l]``: per-relation (src, dst) edges of layer ``l``; ``sizes[l]``: its destination count."""
        for i, (layer, edges, n_dst) in enumerate(zip(self.layers, hops, sizes)):
            x = layer(x, edges, n_dst)
            if i < len(self.norms):
                x = F.dropout(F.relu(self.norms[i](x)), 0.2, self.training)
        return self.classifier(x)


def _sampled_tree(seeds: int) -> tuple[list, list[int], int]:
    """Fan-out tree of ``seeds`` seeds: nodes ordered hop by hop; edges split round-robin over relations.

    Layer ``l`` (of 3) maps the nodes within ``3 - l`` hops of the seeds to
    those within ``2 - l`` hops: the first layer runs on the whole sampled
    tree, the last only produces the seeds' representations.
    """
    level_sizes = [seeds]
    for f in FANOUT:
        level_sizes.append(level_sizes[-1] * f)
    starts = [sum(level_sizes[:i]) for i in range(len(level_sizes))]
    edges_by_hop = []  # hop h: edges from level h+1 nodes to their level-h parents
    for h, f in enumerate(FANOUT):
        child = torch.arange(level_sizes[h + 1]) + starts[h + 1]
        parent = torch.arange(level_sizes[h]).repeat_interleave(f) + starts[h]
        edges_by_hop.append((child, parent))
    hops, sizes = [], []
    for layer in range(len(FANOUT)):
        depth = len(FANOUT) - layer  # destinations are the nodes within depth - 1 hops
        src = torch.cat([edges_by_hop[h][0] for h in range(depth)])
        dst = torch.cat([edges_by_hop[h][1] for h in range(depth)])
        per_relation = [(src[r::IGBH_RELATIONS], dst[r::IGBH_RELATIONS]) for r in range(IGBH_RELATIONS)]
        hops.append(per_relation)
        sizes.append(sum(level_sizes[:depth]))
    return hops, sizes, sum(level_sizes)


def _rgat_probe() -> Probe:
    def make_batch(b: int):
        hops, sizes, nodes = _sampled_tree(b)
        dev = torch.get_default_device()
        hops = [[(s.to(dev), d.to(dev)) for s, d in layer] for layer in hops]
        return torch.randn(nodes, RGAT_IN), hops, sizes, torch.randint(0, RGAT_CLASSES, (b,))

    def loss(m: nn.Module, batch):
        x, hops, sizes, labels = batch
        return F.cross_entropy(m(x, hops, sizes), labels)

    return Probe(RGAT(), make_batch, loss)


_TREE_NODES = 1 + 15 + 150 + 750
_RGAT_BYTES = _TREE_NODES * (RGAT_IN * 2 + 2 * INT64_BYTES)
_CORA_BYTES = CORA_NODES * CORA_FEATURES * FLOAT32_BYTES + (2 * CORA_EDGES + CORA_NODES) * 2 * INT64_BYTES

RECIPES = [
    Recipe(
        name="gcn",
        aliases=("graph-convolutional-network", "gcn-cora"),
        domain="graph",
        description="Two-layer GCN, full-batch on a Cora-sized graph (2,708 nodes, 1,433 features); one sample is "
        "the whole graph",
        architecture="GCN of Kipf and Welling 2017 (arXiv:1609.02907), plain torch definition "
        "features.model_defs.graph.GCN",
        build=_gcn_probe,
        device="cpu",
        input_bytes_per_sample=_CORA_BYTES,
        input_bytes_source="float32 features 2708x1433 + int64 edge ends (both directions and self-loops): "
        f"{_CORA_BYTES} B, copied once and kept on the device in full-batch training",
        default_batch_size_per_gpu=1,
        sample_unit="graphs",
        extra_sources={"default_batch_size_per_gpu": configured("full-batch training: one graph per step")},
    ),
    Recipe(
        name="rgat",
        aliases=("gnn", "r-gat", "rgat-igbh"),
        domain="graph",
        description="R-GAT node classification (MLPerf Training gnn), IGBH-full, fan-out 15/10/5, one seed node "
        "per sample",
        architecture="MLPerf Training graph_neural_network (mlcommons/training, train_rgnn_multi_gpu.py: 3 layers, "
        "hidden 512, 4 heads, 2983 classes, fan-out 15,10,5; Busbridge et al. 2019, arXiv:1904.05811), plain "
        "torch definition features.model_defs.graph.RGAT",
        build=_rgat_probe,
        input_bytes_per_sample=_RGAT_BYTES,
        input_bytes_source=f"fp16 1024-wide features of the {_TREE_NODES} sampled nodes + int64 edge ends: "
        f"{_RGAT_BYTES} B",
        default_batch_size_per_gpu=1024,
        sample_unit="seed nodes",
        extra_sources={
            "default_batch_size_per_gpu": configured(
                "mlcommons/training graph_neural_network train_rgnn_multi_gpu.py --train_batch_size 1024"
            ),
        },
        notes=(
            "Counted on a full fan-out tree (1 + 15 + 150 + 750 nodes per seed, no neighbours shared between seeds, "
            "edges spread evenly over the 12 relations): real IGBH samples are smaller where degrees are below "
            "the fan-out and share nodes within a batch, and PyG projects every node of a relation's node types, "
            "so this is an approximation of the reference's work."
        ),
    ),
]
