"""How much of the learned correction survives a fact the model never saw: estimated, not assumed.

For each fact of :data:`predictor.domain.FACTS` (framework, model, model
family, architecture x device, architecture x network) the training runs are
split by the fact's value into grouped folds; a residual fitted without a
fold's values predicts that fold, and a share ``s`` of its correction is
chosen on the held-out error of ``log physics + s x correction``: among the
shares under which no held-out value of ten runs or more does worse than the
physics alone by more than two points (the report's no-harm rule, kept inside
the training data), the smallest whose error is within one standard error of
the least (the values as the sampling units). That is the share an unseen
value of that fact keeps (:func:`predictor.domain.unseen_facts`).
A share near 0 says the correction learned on other models (say) does not
carry to a new one; near 1, that it does. With a handful of values (five
frameworks, three software stacks) a small gain over the physics can rest on
which values happened to be held out; the standard error keeps such a fact
at the physics.

Only the data handed in takes part: the held-out evaluation calls this on
each outer training fold, so the group being scored never shapes its own
shrinkage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import GroupKFold

from predictor.calibration import POOLED
from predictor.domain import FACTS, fact_codes, fact_values
from training.cv import sample_weights
from training.dataset import Dataset, network_of
from training.model import ResidualRegressor

#: Shares tried, from "the correction does not carry" to "it carries in full".
SHARE_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)
#: Grouped folds per fact (fewer where the fact has fewer distinct values).
FOLDS = 3
#: The no-harm rule, as the held-out report checks it: a group of at least this many runs...
NO_HARM_MIN_RUNS = 10
#: ...may lose at most this many percentage points of MAPE against the physics alone.
NO_HARM_MARGIN_POINTS = 2.0


@dataclass(frozen=True)
class ShrinkEstimate:
    """One fact's estimated share, with what it was estimated on."""

    share: float
    values: int  # distinct values of the fact among the training runs
    rows: int  # held-out rows the share was chosen on
    mape_by_share: dict[str, float]  # held-out MAPE (%) at a few shares ("0.50"), for the record

    def to_dict(self) -> dict:
        return {"share": self.share, "values": self.values, "rows": self.rows, "mape_by_share": self.mape_by_share}


def best_share(
    measured_residual: np.ndarray, correction: np.ndarray, weights: np.ndarray, groups: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """The share of ``correction`` (log) with the lowest weighted mean absolute percentage error, and the error per share.

    ``measured_residual`` is log(measured / physics); the prediction with share
    ``s`` is ``physics x exp(s x correction)``. Ties go to the smaller share
    (closer to the physics). With ``groups`` (each row's held-out value), only
    shares that keep the no-harm rule in every group of at least
    :data:`NO_HARM_MIN_RUNS` rows are chosen from: the group's MAPE at most its
    MAPE at share 0 (the physics alone) plus :data:`NO_HARM_MARGIN_POINTS`.
    Share 0 always keeps it. Of those, the smallest share whose MAPE exceeds
    the least by at most one standard error of the difference, the groups
    resampled (the one-standard-error rule of model selection), is chosen.
    """
    errors = np.abs(np.expm1(SHARE_GRID[:, None] * correction[None, :] - measured_residual[None, :]))
    mape = errors @ weights / weights.sum()
    if groups is None:
        return float(SHARE_GRID[int(np.argmin(mape))]), mape
    allowed = np.ones(len(SHARE_GRID), bool)
    names, inverse = np.unique(groups, return_inverse=True)
    # Per group: its weight and the weighted error sum at each share (the groups are the sampling units).
    group_weight = np.bincount(inverse, weights, len(names))
    group_error = np.stack([np.bincount(inverse, weights * e, len(names)) for e in errors])
    for g in range(len(names)):
        rows = inverse == g
        if rows.sum() >= NO_HARM_MIN_RUNS:
            group_mape = errors[:, rows].mean(axis=1)
            allowed &= group_mape <= group_mape[0] + NO_HARM_MARGIN_POINTS / 100
    best = int(np.argmin(np.where(allowed, mape, np.inf)))
    # One standard error: the smallest allowed share whose gain over the best is inside the noise of
    # which groups happened to be held out.
    within = allowed & (mape - mape[best] <= _group_standard_error(group_error - group_error[best], group_weight))
    return float(SHARE_GRID[int(np.argmax(within))]), mape


def _group_standard_error(error_sum_change: np.ndarray, group_weight: np.ndarray) -> np.ndarray:
    """Per share, the standard error of the weighted MAPE's change, groups resampled (a cluster standard error)."""
    n = len(group_weight)
    if n < 2:
        return np.zeros(len(error_sum_change))
    total = group_weight.sum()
    mean_change = error_sum_change.sum(axis=1, keepdims=True) / total
    spread = error_sum_change - mean_change * group_weight[None, :]
    return np.sqrt((spread**2).sum(axis=1) * n / (n - 1)) / total


def fact_names(facts: dict, label: str) -> np.ndarray:
    """Each run's value of the fact ``label`` (None where missing or half missing).

    Codes index catalogue rows, so one value (a model family, a device family)
    may have several codes; the names are what is held out. A model is held
    out with the other layouts of its network (:func:`training.dataset.network_of`:
    BERT-large padded, unpadded, in length bins and at length 128), as the
    leave-one-model-out protocol holds them out: a variant whose network
    trained would make an unseen model look easier than a new network is.
    So is the model side of a combination (``accumulated x bert-large``).
    """
    codes, names = fact_values(facts, label)
    whole = [n is not None and not n.endswith(" x None") and not n.startswith("None x ") for n in map(str_or_none, names)]
    if label == "model":
        names = np.array([None if n is None else network_of([n])[0] for n in names], object)
    elif label.endswith(" x model"):
        names = np.array([n if not ok else n.rsplit(" x ", 1)[0] + " x " + network_of([n.rsplit(" x ", 1)[1]])[0] for n, ok in zip(names, whole)], object)
    return np.where(np.append(whole, False)[codes], np.append(names, None)[codes], None)


def str_or_none(value) -> str | None:
    return None if value is None else str(value)


def estimate_shrink(
    ds: Dataset, params: dict, rounds: int, labels: tuple[str, ...] | list[str] = FACTS, seed: int = 0
) -> dict[str, ShrinkEstimate]:
    """Per fact of ``labels`` with at least two values among ``ds``'s runs: the share an unseen value keeps."""
    facts = fact_codes(ds.resolved)
    X, y, row_weights = ds.features.values, ds.residual, sample_weights(ds.group)
    out = {}
    for label in labels:
        value = fact_names(facts, label)
        known = np.flatnonzero(value != None)  # noqa: E711
        _, codes = np.unique(value[known].astype(str), return_inverse=True)
        n_values = int(codes.max()) + 1 if len(known) else 0
        if n_values < 2:
            continue
        correction = np.full(len(ds), np.nan)
        for train, test in GroupKFold(min(FOLDS, n_values)).split(known, groups=codes):
            # Rows without the fact (custom models, failed lookups) always train.
            fit_rows = np.setdiff1d(np.arange(len(ds)), known[test])
            model = ResidualRegressor(params=params, num_boost_round=rounds, seed=seed)
            model.fit(X[fit_rows], y[fit_rows], sample_weight=row_weights[fit_rows], feature_names=ds.features.names)
            correction[known[test]] = model.predict(X[known[test]])
        # Each held-out value counts as the square root of its size, as groups do in fitting.
        share, mape = best_share(y[known], correction[known], sample_weights(codes), codes)
        record = {f"{s:.2f}": round(100 * float(m), 2) for s, m in zip(SHARE_GRID, mape) if s in (0.0, 0.25, 0.5, 0.75, 1.0) or s == share}
        out[label] = ShrinkEstimate(share, n_values, len(known), record)
    return out


def shrink_shares(estimates: dict[str, ShrinkEstimate]) -> dict[str, float]:
    """The shares alone, as the artefact's ``domain.shrink`` holds them."""
    return {label: estimate.share for label, estimate in estimates.items()}


#: A what-if kind gets a share of its own from at least this many comparable out-of-fold pairs.
MIN_PAIRS_PER_KIND = 30


def pair_shares(kinds: np.ndarray, measured_residual: np.ndarray, correction: np.ndarray, comparable: np.ndarray) -> dict[str, float]:
    """How much of the learned correction's change a what-if keeps, per kind of what-if.

    For out-of-fold pairs of runs that differ in one kind (more GPUs, another
    link, another precision ...), ``measured_residual`` is the measured log
    speedup less the physics' and ``correction`` the change of the residual's
    out-of-fold correction between the pair's runs. The predicted log speedup
    with share ``s`` is the physics' plus ``s x correction``; the share is the
    one with the least error over the kind's pairs (:func:`best_share`, ties
    to the physics). Where the learned correction moves the right way
    between two runs, the share comes out near 1; where its change only adds
    noise to the physics' speedup, near 0. No per-group no-harm rule: one
    GPU type whose pairs the correction does not help would otherwise take
    the share from every other (fp32 -> fp16 held out: 8.6% with the kind's
    best share, 15.8% with the rule).

    Only ``comparable`` pairs count: both runs in one cross-validation group,
    so one fold's model predicted both, as one model predicts both sides of a
    what-if. (Across groups, say two GPU types, each side comes from another
    fold's model, and the change would carry their disagreement too.) A kind
    with fewer than :data:`MIN_PAIRS_PER_KIND` comparable pairs keeps all of
    the change (share 1, no evidence either way); a what-if of no measured
    kind takes the share of all comparable pairs pooled (key
    :data:`predictor.calibration.POOLED`).
    """
    kinds = np.asarray(kinds, object)
    comparable = np.asarray(comparable, bool)
    shares: dict[str, float] = {}
    if comparable.sum() >= MIN_PAIRS_PER_KIND:
        shares[POOLED], _ = best_share(measured_residual[comparable], correction[comparable], np.ones(int(comparable.sum())))
    for kind in dict.fromkeys(kinds):
        rows = (kinds == kind) & comparable
        if rows.sum() >= MIN_PAIRS_PER_KIND:
            shares[str(kind)], _ = best_share(measured_residual[rows], correction[rows], np.ones(int(rows.sum())))
        else:
            shares[str(kind)] = 1.0
    return shares
