"""Exact TreeSHAP for many jobs: each tree explains each distinct path pattern once.

Path-dependent TreeSHAP (XGBoost's ``pred_contribs``) walks every node of a
tree, sending the explained row to the child its value picks and weighting
the other by cover. So a tree's SHAP values for a row depend on the row only
through the side it takes at each of the tree's splits: two rows that agree
on every split of a tree get the same values from it, whatever else differs.
A fleet's distinct feature rows take far fewer distinct patterns through
any one tree (about 1,800 of 49,000 rows for a depth-5 tree of the shipped
model), so :func:`grouped_shap` asks XGBoost for one tree at a time on one
row per pattern, sums the values into groups (the bottleneck families) and
adds them up over the trees. The values are XGBoost's own, tree by tree; the
total differs from a single ``pred_contribs`` call only by float32 rounding
in the order of the sum.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Below this many rows one ``pred_contribs`` call is cheaper than finding patterns.
PER_TREE_ABOVE_ROWS = 2_000


@dataclass(frozen=True)
class TreeSplits:
    """The internal nodes of one tree: split feature, float32 threshold, where a missing value goes."""

    feature: np.ndarray
    threshold: np.ndarray
    default_left: np.ndarray

    def patterns(self, values: np.ndarray) -> np.ndarray:
        """Per row, its side at every split (rows x splits, True is left), as XGBoost decides.

        XGBoost sends a row left when its float32 value is below the split's
        threshold, and a missing value where the split's default says.
        """
        column = values[:, self.feature]
        with np.errstate(invalid="ignore"):
            left = column < self.threshold
        missing = np.isnan(column)
        if missing.any():
            left = np.where(missing, self.default_left, left)
        return left


def tree_splits(booster) -> list[TreeSplits] | None:
    """Every tree's splits, read from the booster's JSON.

    None where the trees cannot be explained one by one: a categorical split,
    or more than one tree per boosting round.
    """
    model = json.loads(booster.save_raw(raw_format="json"))
    forest = model["learner"]["gradient_booster"]["model"]
    if len(forest["trees"]) != booster.num_boosted_rounds():
        return None  # several trees per round (a forest or several outputs): a slice is not one tree
    trees = []
    for tree in forest["trees"]:
        internal = np.asarray(tree["left_children"]) != -1
        if np.any(np.asarray(tree.get("split_type", [0]), dtype=int) != 0):
            return None
        trees.append(
            TreeSplits(
                feature=np.asarray(tree["split_indices"], dtype=np.intp)[internal],
                threshold=np.asarray(tree["split_conditions"], dtype=np.float32)[internal],
                default_left=np.asarray(tree["default_left"], dtype=bool)[internal],
            )
        )
    return trees


def distinct_patterns(left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One row per distinct pattern and, per row, its pattern: ``left[first][inverse] == left``."""
    import pandas as pd

    from predictor.artefact import distinct_feature_rows

    packed = np.packbits(left, axis=1)
    pad = -packed.shape[1] % 8  # whole 64-bit words
    if pad:
        packed = np.concatenate([packed, np.zeros((len(packed), pad), np.uint8)], axis=1)
    if packed.shape[1] > 8:  # more than 64 splits: hash the words, checked bit for bit
        return distinct_feature_rows(np.ascontiguousarray(packed).view(np.uint32))
    # Up to 64 splits, a pattern is one word: its own exact key.
    codes, _ = pd.factorize(np.ascontiguousarray(packed).view(np.uint64)[:, 0])
    codes = np.asarray(codes, np.int64)
    first = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
    return first, codes


def grouped_shap(booster, values: np.ndarray, groups: np.ndarray, feature_names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Exact TreeSHAP values summed into groups (rows x groups) and the base value (rows).

    ``values`` are float32 feature rows, ``groups`` a 0/1 matrix (features x
    groups). Small inputs, and models with categorical splits, take one
    ``pred_contribs`` call; larger ones go tree by tree, once per pattern.
    """
    from predictor.artefact import import_xgboost

    xgb = import_xgboost()
    names = list(feature_names)
    splits = tree_splits(booster) if len(values) >= PER_TREE_ABOVE_ROWS else None
    if splits is None:
        contributions = booster.predict(xgb.DMatrix(values, feature_names=names), pred_contribs=True)
        return contributions[:, :-1] @ groups, contributions[:, -1].astype(np.float64)
    # The base value is the same for every row: the model's, not one tree's (each slice adds the base score).
    base = float(booster.predict(xgb.DMatrix(values[:1], feature_names=names), pred_contribs=True)[0, -1])
    total = np.zeros((len(values), groups.shape[1]))
    for i, tree in enumerate(splits):
        first, inverse = distinct_patterns(tree.patterns(values))
        contributions = booster[i : i + 1].predict(xgb.DMatrix(values[first], feature_names=names), pred_contribs=True)
        total += (contributions[:, :-1] @ groups)[inverse]
    return total, np.full(len(values), base)
