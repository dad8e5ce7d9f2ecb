"""Recommendation workloads: DIN, DIEN, Wide & Deep (AI Matrix) and NCF (NVIDIA); DLRM-DCNv2 is in :mod:`features.model_defs.dlrm`.

Plain torch definitions after the published code. Embedding tables are
updated sparsely (only looked-up rows change), so they are listed as the
probe's sparse modules and excluded from ``dense_param_count``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from features.model_defs.recipe import FLOAT32_BYTES, INT64_BYTES, Probe, Recipe, configured

HISTORY = 100  # behaviour history padded to 100 (DIEN's maxlen)

# DIN paper (Zhou et al. 2018, arXiv:1706.06978) Table 1, Amazon Electronics.
ELECTRONICS = {"users": 192403, "items": 63001, "categories": 801}
# DIEN paper (Zhou et al. 2019, arXiv:1809.03672) Table 1, Amazon Books.
BOOKS = {"users": 603668, "items": 367982, "categories": 1600}


def mlp(sizes: list[int], act: type[nn.Module] = nn.Sigmoid, last_act: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_act:
            layers.append(act())
    return nn.Sequential(*layers)


class _ItemEmbedding(nn.Module):
    """Item and category embeddings (64 each) concatenated, plus the per-item bias (AI Matrix DeepInterest)."""

    def __init__(self) -> None:
        super().__init__()
        self.item = nn.Embedding(ELECTRONICS["items"], 64)
        self.cate = nn.Embedding(ELECTRONICS["categories"], 64)
        self.item_b = nn.Embedding(ELECTRONICS["items"], 1)
        self.register_buffer("cate_list", torch.randint(0, ELECTRONICS["categories"], (ELECTRONICS["items"],)))

    def forward(self, items: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.item(items), self.cate(self.cate_list[items])], dim=-1)

    def tables(self) -> tuple[nn.Module, ...]:
        return self.item, self.cate, self.item_b


class DIN(nn.Module):
    """Deep Interest Network as AI Matrix trains it (macro_benchmark/DeepInterest/din/model.py).

    Target item and history items embed to 128 (item 64 + category 64);
    local activation unit over [q, k, q-k, q*k] (512 -> 80 -> 40 -> 1,
    sigmoid), masked softmax over the history, weighted sum; batch norm and
    a 128 linear layer give the user vector; batch norm over [user, item]
    then 80 -> 40 -> 1 (sigmoid); logit plus item bias; sigmoid
    cross-entropy.
    """

    def __init__(self) -> None:
        super().__init__()
        self.emb = _ItemEmbedding()
        self.att = mlp([512, 80, 40, 1])
        self.hist_bn = nn.BatchNorm1d(128)
        self.hist_fc = nn.Linear(128, 128)
        self.bn = nn.BatchNorm1d(256)
        self.fcn = mlp([256, 80, 40, 1])

    def forward(self, item, hist, mask):
        i_emb = self.emb(item)
        h_emb = self.emb(hist)
        q = i_emb.unsqueeze(1).expand_as(h_emb)
        scores = self.att(torch.cat([q, h_emb, q - h_emb, q * h_emb], -1)).squeeze(-1)
        scores = scores.masked_fill(~mask, -(2**32) + 1) / 128**0.5
        hist_vec = torch.bmm(scores.softmax(-1).unsqueeze(1), h_emb).squeeze(1)
        u_emb = self.hist_fc(self.hist_bn(hist_vec))
        logit = self.fcn(self.bn(torch.cat([u_emb, i_emb], -1))).squeeze(-1)
        return logit + self.emb.item_b(item).squeeze(-1)


class WideDeep(nn.Module):
    """The Wide & Deep baseline of AI Matrix (macro_benchmark/DeepInterest/wide_deep/model.py).

    As DIN without attention: the history is mean-pooled (masked), batch
    norm and a 128 linear layer; deep part 256 -> 80 -> 40 -> 1 (sigmoid);
    wide part a linear layer over three user x item feature crosses.
    """

    def __init__(self) -> None:
        super().__init__()
        self.emb = _ItemEmbedding()
        self.hist_bn = nn.BatchNorm1d(128)
        self.hist_fc = nn.Linear(128, 128)
        self.bn = nn.BatchNorm1d(256)
        self.fcn = mlp([256, 80, 40, 1])
        self.wide = nn.Linear(3, 1)

    def forward(self, item, hist, mask):
        i_emb = self.emb(item)
        h_emb = self.emb(hist) * mask.unsqueeze(-1)
        hist_vec = h_emb.sum(1) / mask.sum(1, keepdim=True)
        u_emb = self.hist_fc(self.hist_bn(hist_vec))
        deep = self.fcn(self.bn(torch.cat([u_emb, i_emb], -1))).squeeze(-1)
        cross = torch.stack([u_emb[:, 0] * i_emb[:, 0], u_emb[:, -1] * i_emb[:, -1], u_emb[:, 64] * i_emb[:, 64]], 1)
        return deep + self.wide(cross).squeeze(-1) + self.emb.item_b(item).squeeze(-1)


def _electronics_probe(model: nn.Module) -> Probe:
    def make_batch(b: int):
        item = torch.randint(0, ELECTRONICS["items"], (b,))
        hist = torch.randint(0, ELECTRONICS["items"], (b, HISTORY))
        mask = torch.ones(b, HISTORY, dtype=torch.bool)
        return item, hist, mask, torch.randint(0, 2, (b,)).float()

    def loss(m: nn.Module, batch):
        item, hist, mask, y = batch
        return F.binary_cross_entropy_with_logits(m(item, hist, mask), y)

    return Probe(model, make_batch, loss, sparse_modules=model.emb.tables())


class Dice(nn.Module):
    """Data-adaptive activation of DIN: ``p * x + alpha * (1 - p) * x`` with ``p = sigmoid(BN(x))``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(width, affine=False)
        self.alpha = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(self.bn(x))
        return p * x + self.alpha * (1 - p) * x


class AUGRU(nn.Module):
    """GRU with attentional update gate (DIEN's VecAttGRUCell), unrolled over time."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.gates = nn.Linear(2 * width, 2 * width)
        self.candidate = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], x.shape[2])
        for t in range(x.shape[1]):
            r, u = torch.sigmoid(self.gates(torch.cat([x[:, t], h], 1))).chunk(2, dim=1)
            c = torch.tanh(self.candidate(torch.cat([x[:, t], r * h], 1)))
            u = (1 - att[:, t : t + 1]) * u
            h = u * h + (1 - u) * c
        return h


class DIEN(nn.Module):
    """Deep Interest Evolution Network as AI Matrix trains it (macro_benchmark/DIEN/script/model.py, model DIEN).

    Embeddings of 18 for user, item and category (items 36 with their
    category); interest extractor GRU (36) over the 100-item history with an
    auxiliary loss on the next clicked vs a non-clicked item (MLP 72 -> 100
    -> 50 -> 2); attention of the target item over the GRU states (query
    projected by a PReLU layer, MLP 144 -> 80 -> 40 -> 1, masked softmax);
    interest evolving AUGRU (36); final MLP over 162 features: batch norm,
    200 and 80 with Dice, 2-way softmax.
    """

    def __init__(self) -> None:
        super().__init__()
        self.uid = nn.Embedding(BOOKS["users"], 18)
        self.mid = nn.Embedding(BOOKS["items"], 18)
        self.cat = nn.Embedding(BOOKS["categories"], 18)
        self.gru = nn.GRU(36, 36, batch_first=True)
        self.aux_bn = nn.BatchNorm1d(72)
        self.aux = mlp([72, 100, 50, 2])
        self.query = nn.Sequential(nn.Linear(36, 36), nn.PReLU(36))
        self.att = mlp([144, 80, 40, 1])
        self.augru = AUGRU(36)
        self.bn = nn.BatchNorm1d(162)
        self.fc1, self.dice1 = nn.Linear(162, 200), Dice(200)
        self.fc2, self.dice2 = nn.Linear(200, 80), Dice(80)
        self.fc3 = nn.Linear(80, 2)

    def _item(self, mids, cats):
        return torch.cat([self.mid(mids), self.cat(cats)], -1)

    def _aux_prob(self, h, e):
        x = torch.cat([h, e], -1)
        x = self.aux_bn(x.reshape(-1, 72)).view_as(x)
        return self.aux(x).softmax(-1) + 1e-8

    def forward(self, uid, mid, cat, mid_his, cat_his, noclk_mid, noclk_cat, mask):
        item = self._item(mid, cat)
        his = self._item(mid_his, cat_his)
        noclk = self._item(noclk_mid[:, :, 0], noclk_cat[:, :, 0])
        states = self.gru(his)[0]
        m = mask[:, 1:].float()
        click = self._aux_prob(states[:, :-1], his[:, 1:])[..., 0]
        noclick = self._aux_prob(states[:, :-1], noclk[:, 1:])[..., 1]
        aux_loss = -(torch.log(click) * m).mean() - (torch.log(noclick) * m).mean()
        q = self.query(item).unsqueeze(1).expand_as(states)
        scores = self.att(torch.cat([q, states, q - states, q * states], -1)).squeeze(-1)
        scores = scores.masked_fill(~mask, -(2**32) + 1).softmax(-1)
        final = self.augru(states, scores)
        his_sum = his.sum(1)
        x = self.bn(torch.cat([self.uid(uid), item, his_sum, item * his_sum, final], -1))
        x = self.dice2(self.fc2(self.dice1(self.fc1(x))))
        return self.fc3(x), aux_loss


def _dien_probe() -> Probe:
    model = DIEN()

    def make_batch(b: int):
        n = (BOOKS["users"], BOOKS["items"], BOOKS["categories"])
        return (
            torch.randint(0, n[0], (b,)),
            torch.randint(0, n[1], (b,)),
            torch.randint(0, n[2], (b,)),
            torch.randint(0, n[1], (b, HISTORY)),
            torch.randint(0, n[2], (b, HISTORY)),
            torch.randint(0, n[1], (b, HISTORY, 5)),
            torch.randint(0, n[2], (b, HISTORY, 5)),
            torch.ones(b, HISTORY, dtype=torch.bool),
            torch.randint(0, 2, (b,)),
        )

    def loss(m: nn.Module, batch):
        *inputs, y = batch
        logits, aux_loss = m(*inputs)
        return F.cross_entropy(logits, y) + aux_loss

    return Probe(model, make_batch, loss, sparse_modules=(model.uid, model.mid, model.cat))


class NCF(nn.Module):
    """NeuMF as NVIDIA DeepLearningExamples (PyTorch/Recommendation/NCF) and MLPerf v0.7 train it.

    MovieLens-20M (138,493 users, 26,744 items); GMF embeddings of 64; MLP
    embeddings of 128 per side, MLP 256 -> 256 -> 128 -> 64 (ReLU); final
    linear over [GMF 64, MLP 64]; sigmoid cross-entropy.
    """

    users, items = 138493, 26744

    def __init__(self) -> None:
        super().__init__()
        self.mf_user = nn.Embedding(self.users, 64)
        self.mf_item = nn.Embedding(self.items, 64)
        self.mlp_user = nn.Embedding(self.users, 128)
        self.mlp_item = nn.Embedding(self.items, 128)
        self.mlp = mlp([256, 256, 128, 64], act=nn.ReLU, last_act=True)
        self.final = nn.Linear(128, 1)

    def forward(self, user, item):
        gmf = self.mf_user(user) * self.mf_item(item)
        mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], -1))
        return self.final(torch.cat([gmf, mlp], -1)).squeeze(-1)


def _ncf_probe() -> Probe:
    model = NCF()

    def make_batch(b: int):
        return torch.randint(0, NCF.users, (b,)), torch.randint(0, NCF.items, (b,)), torch.randint(0, 2, (b,)).float()

    def loss(m: nn.Module, batch):
        user, item, y = batch
        return F.binary_cross_entropy_with_logits(m(user, item), y)

    tables = (model.mf_user, model.mf_item, model.mlp_user, model.mlp_item)
    return Probe(model, make_batch, loss, sparse_modules=tables)


AIM = "AI Matrix macro_benchmark"
_ELEC_BYTES = (1 + HISTORY) * INT64_BYTES + HISTORY * 1 + FLOAT32_BYTES
_DIEN_BYTES = (3 + 2 * HISTORY + 2 * 5 * HISTORY + 1) * INT64_BYTES + HISTORY * FLOAT32_BYTES
HISTORY_SOURCE = configured(
    f"behaviour history padded to {HISTORY} items (DIEN's maxlen; DIN pads to the longest history of the batch)"
)

RECIPES = [
    Recipe(
        name="din",
        aliases=("deep-interest-network", "deepinterest", "deep_interest_network"),
        domain="recommendation",
        description=f"Deep Interest Network, Amazon Electronics, history of {HISTORY} items",
        architecture=f"{AIM}/DeepInterest/din/model.py (Zhou et al. 2018, arXiv:1706.06978), plain torch "
        "definition features.model_defs.recsys.DIN",
        build=lambda: _electronics_probe(DIN()),
        input_bytes_per_sample=_ELEC_BYTES,
        input_bytes_source=f"int64 target item and {HISTORY} history items, bool mask, float32 label: {_ELEC_BYTES} B",
        default_batch_size_per_gpu=256,
        ai_matrix=True,
        sequence_length=HISTORY,
        extra_sources={
            "sequence_length": HISTORY_SOURCE,
            "default_batch_size_per_gpu": configured(f"{AIM}/DeepInterest/train.sh runs batch 256, 512, 1024"),
        },
        notes="The unused user table of the TensorFlow graph (192,403 x 128) is not counted.",
    ),
    Recipe(
        name="dien",
        aliases=("deep-interest-evolution-network", "deep_interest_evolution_network"),
        domain="recommendation",
        description=f"Deep Interest Evolution Network, Amazon Books, history of {HISTORY} items",
        architecture=f"{AIM}/DIEN/script/model.py model DIEN (Zhou et al. 2019, arXiv:1809.03672), plain torch "
        "definition features.model_defs.recsys.DIEN",
        build=_dien_probe,
        device="cpu",
        input_bytes_per_sample=_DIEN_BYTES,
        input_bytes_source=f"int64 user/item/category, {HISTORY} history items and categories, 5 non-clicked "
        f"samples per step, label; float32 mask: {_DIEN_BYTES} B",
        default_batch_size_per_gpu=128,
        ai_matrix=True,
        sequence_length=HISTORY,
        extra_sources={
            "sequence_length": configured(f"{AIM}/DIEN/script/train.py maxlen = 100"),
            "default_batch_size_per_gpu": configured(f"{AIM}/DIEN/script/train.py default batch_size 128"),
        },
    ),
    Recipe(
        name="ncf",
        aliases=("neumf", "neural-collaborative-filtering"),
        domain="recommendation",
        description="NCF (NeuMF), MovieLens-20M, one (user, item) pair per sample",
        architecture="NVIDIA DeepLearningExamples PyTorch/Recommendation/NCF (He et al. 2017, arXiv:1708.05031), "
        "plain torch definition features.model_defs.recsys.NCF",
        build=_ncf_probe,
        input_bytes_per_sample=2 * INT64_BYTES + FLOAT32_BYTES,
        input_bytes_source="int64 user and item ids + float32 label: 20 B (the example keeps the data set in GPU "
        "memory, so it copies nothing per step)",
        default_batch_size_per_gpu=131072,
        ai_matrix=True,
        sample_unit="samples",
        extra_sources={
            "default_batch_size_per_gpu": configured(
                "DeepLearningExamples NCF default global batch 1,048,576 over 8 GPUs"
            ),
        },
        notes="AI Matrix's NCF is the smaller MovieLens-1M variant of the same model.",
    ),
    Recipe(
        name="wide-deep",
        aliases=("wide_and_deep", "wide-and-deep", "widedeep", "wide_deep"),
        domain="recommendation",
        description=f"Wide & Deep, Amazon Electronics, mean-pooled history of {HISTORY} items",
        architecture=f"{AIM}/DeepInterest/wide_deep/model.py (Cheng et al. 2016, arXiv:1606.07792), plain torch "
        "definition features.model_defs.recsys.WideDeep",
        build=lambda: _electronics_probe(WideDeep()),
        input_bytes_per_sample=_ELEC_BYTES,
        input_bytes_source=f"int64 target item and {HISTORY} history items, bool mask, float32 label: {_ELEC_BYTES} B",
        default_batch_size_per_gpu=256,
        ai_matrix=True,
        sequence_length=HISTORY,
        extra_sources={
            "sequence_length": HISTORY_SOURCE,
            "default_batch_size_per_gpu": configured(f"as DIN ({AIM}/DeepInterest/train.sh)"),
        },
    ),
]
