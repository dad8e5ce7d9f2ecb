"""The feature ablation: candidate figures are the catalogue's, reach only the ablation's fits, and
the ablation scores the same held-out groups as the evaluation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from features.build import CANDIDATE_GROUPS, MONOTONE_SIGNS, REMOVABLE_GROUPS, candidate_columns
from features.resolve import resolve
from features.table import validate_columns

FAST_PARAMS = {"max_depth": 3, "eta": 0.3}
FAST_ROUNDS = 10


def _resolved(gpus: list[str]):
    return resolve(validate_columns({"model": ["resnet50"] * len(gpus), "gpu": gpus}, len(gpus)))


def test_candidate_columns_are_the_catalogue_figures():
    """A100-SXM4-80GB: 108 SMs, 40 MiB of L2, third tensor-core generation, 400 W, 2020 (catalogue
    figures); RTX 4090: 128 SMs, 72 MiB, fourth, 450 W, GeForce's half-rate FP32 accumulation."""
    names = [n for group in CANDIDATE_GROUPS.values() for n in group]
    cols = candidate_columns(_resolved(["A100-SXM4-80GB", "RTX-4090"]), names)
    assert cols["log_sm_count"] == pytest.approx([math.log10(108), math.log10(128)])
    assert cols["log_l2_bytes"] == pytest.approx([math.log10(40 * 2**20), math.log10(72 * 2**20)])
    assert list(cols["tensor_core_generation"]) == [3, 4]
    assert cols["log_tdp_w"] == pytest.approx([math.log10(400), math.log10(450)])
    assert list(cols["fp32_accumulate_tensor_rate"]) == [1.0, 0.5]
    assert list(cols["device_release_year"]) == [2020, 2022]
    assert cols["log_param_count"][0] == cols["log_param_count"][1] > 7  # ResNet-50: 25.6 M parameters


def test_a_cpu_host_has_no_gpu_figures_and_unknown_names_are_refused(testbed_runs):
    from features.fields import FLAT_FIELDS

    host = testbed_runs.iloc[:1]
    resolved = resolve(validate_columns({c: host[c].to_numpy() for c in FLAT_FIELDS if c in host.columns}, 1))
    cols = candidate_columns(resolved, CANDIDATE_GROUPS["gpu-mechanisms"])
    assert all(np.isnan(v).all() for v in cols.values())
    with pytest.raises(ValueError, match="unknown candidate features"):
        candidate_columns(resolved, ["gpu_name_one_hot"])


def test_candidates_stay_out_of_the_shipped_features_and_follow_every_subset(testbed_runs):
    from training.dataset import build_dataset

    shipped = build_dataset(testbed_runs)
    candidates = set().union(*CANDIDATE_GROUPS.values())
    assert not candidates & set(shipped.features.names)
    # None is monotone-constrained: a shipped candidate would need a sign it does not have.
    assert not candidates & set(MONOTONE_SIGNS)
    added = build_dataset(testbed_runs, candidates=("log_sm_count", "log_param_count"))
    assert added.features.names == (*shipped.features.names, "log_sm_count", "log_param_count")
    half = added.subset(np.arange(len(added)) % 2 == 0)
    assert half.features.names == added.features.names


def test_a_removable_group_leaves_the_features_of_every_subset_and_nothing_else(testbed_runs):
    from training.dataset import build_dataset

    shipped = build_dataset(testbed_runs)
    framework = REMOVABLE_GROUPS["framework identity"]
    assert framework == ("framework_0", "framework_1", "framework_2", "framework_3", "framework_4", "framework_5")
    assert set(framework) <= set(shipped.features.names)
    removed = build_dataset(testbed_runs, without=framework)
    assert removed.features.names == tuple(n for n in shipped.features.names if n not in framework)
    kept = [shipped.features.names.index(n) for n in removed.features.names]
    np.testing.assert_array_equal(removed.features.values, shipped.features.values[:, kept])
    assert removed.subset(np.arange(len(removed)) % 2 == 0).features.names == removed.features.names
    with pytest.raises(ValueError, match="unknown removable features: log_device_s"):
        build_dataset(testbed_runs, without=("log_device_s",))


@pytest.fixture(scope="module")
def public_runs():
    """Lambda runs of three GPU types and three generations (12 each)."""
    from training.importers import import_lambda
    from training.sources import LAMBDA_FILE, SHARED_DATA

    if not (SHARED_DATA / LAMBDA_FILE).exists():
        pytest.skip(f"public measured runs not found at {SHARED_DATA}")
    runs = import_lambda(SHARED_DATA / LAMBDA_FILE).runs
    picked = runs[runs["gpu"].isin(["A100-SXM4-80GB", "V100-SXM2-32GB", "RTX-4090"])]
    return picked.groupby("gpu", group_keys=False).head(12).reset_index(drop=True)


def test_each_variant_scores_the_evaluations_groups_and_only_its_fits_see_the_candidates(public_runs, monkeypatch):
    import training.ablation as ablation
    import training.evaluate as evaluate
    from training.ablation import FeatureSet, mape_by_group, protocols, run_ablation
    from training.dataset import build_dataset

    # Three of the variants keep the test short; the loop over them is the same for four.
    VARIANTS = {
        "shipped features": FeatureSet(),
        "+ gpu-mechanisms": FeatureSet(added=CANDIDATE_GROUPS["gpu-mechanisms"]),
        "- framework identity": FeatureSet(removed=REMOVABLE_GROUPS["framework identity"]),
    }
    monkeypatch.setattr(ablation, "VARIANTS", VARIANTS)

    seen: list[tuple[tuple[str, ...], frozenset]] = []
    real_fit = evaluate.fit_calibrated

    def fit_calibrated(sub, *args, **kwargs):
        seen.append((sub.features.names, frozenset(sub.runs["gpu"])))
        return real_fit(sub, *args, **kwargs)

    monkeypatch.setattr(evaluate, "fit_calibrated", fit_calibrated)
    result = run_ablation(public_runs, "roofline", FAST_PARAMS, FAST_ROUNDS)

    # Lambda rows only: the GPU-type, generation and model protocols, not MLPerf's nor the frameworks'.
    assert list(result["protocols"]) == [
        "Lambda, leave one GPU type out", "All sources, leave one GPU generation out",
        "Lambda and DeepLearningExamples, leave one model out",
    ]
    gpu_protocol = result["protocols"]["Lambda, leave one GPU type out"]
    assert gpu_protocol["groups"] == {"A100-SXM4-80GB": 12, "V100-SXM2-32GB": 12, "RTX-4090": 12} and gpu_protocol["n"] == 36
    for entry in result["protocols"].values():
        assert list(entry["residual"]) == list(VARIANTS)
        for by_group in entry["residual"].values():
            assert set(by_group) == {"all", *entry["groups"]}
            assert all(np.isfinite(v) for v in by_group.values())

    # Each variant's fits see exactly its own features; a held-out GPU type reaches none of its fold's fits.
    shipped = build_dataset(public_runs).features.names
    folds_per_variant = len(seen) // len(VARIANTS)
    for i, (variant, change) in enumerate(VARIANTS.items()):
        expected = (*(n for n in shipped if n not in change.removed), *change.added)
        for names, gpus in seen[i * folds_per_variant:(i + 1) * folds_per_variant]:
            assert names == expected, variant
    assert result["variants"]["- framework identity"] == {"added": [], "removed": list(REMOVABLE_GROUPS["framework identity"])}
    three = {"A100-SXM4-80GB", "V100-SXM2-32GB", "RTX-4090"}
    gpu_folds = [gpus for names, gpus in seen[:3]]  # the first protocol's three folds
    assert sorted(g for fold in gpu_folds for g in three - fold) == sorted(three)
    assert all(len(fold) == 2 for fold in gpu_folds)

    # The shipped variant's figure is held_out's on the same protocol, as the evaluation scores it.
    ds = build_dataset(public_runs)
    p = protocols(ds)[0]
    direct = evaluate.held_out(ds, p.scheme, p.groups, p.scored, FAST_PARAMS, FAST_ROUNDS, exclude=p.exclude, pure_ml=False)
    assert gpu_protocol["residual"]["shipped features"] == pytest.approx(mape_by_group(ds, direct.log_residual_model_s, p))
    errors = pd.Series(np.abs(np.exp(direct.log_physics_s - ds.log_measured_s) - 1) * 100)
    assert gpu_protocol["physics"]["all"] == pytest.approx(errors[p.scored].mean())


def _seeded(per_protocol: dict[str, list[tuple[float, float]]], seeds: int) -> dict:
    """A run_ablation-shaped result: per protocol, (shipped, variant) "all" MAPE per seed."""
    protocols = {
        name: {"residual_by_seed": {"shipped features": [{"all": s} for s, _ in pairs], "- names": [{"all": v} for _, v in pairs]}}
        for name, pairs in per_protocol.items()
    }
    return {"protocols": protocols, "seeds": seeds, "variants": {"shipped features": {"added": [], "removed": []}, "- names": {"added": [], "removed": ["x"]}}}


def test_verdicts_follow_the_rule_written_before_the_run():
    """d = variant - shipped per seed; lowers if mean < -2 SE, raises if mean > +SE (SE = sd / sqrt(K))."""
    from training.ablation import verdicts

    # A: d = -1.0, -0.8, -1.2: mean -1.0, sd 0.2, SE 0.115: lowers. B: d = +0.1, -0.1, 0.0: mean 0, neither.
    lowers = {"A": [(10.0, 9.0), (10.0, 9.2), (10.0, 8.8)], "B": [(20.0, 20.1), (20.0, 19.9), (20.0, 20.0)]}
    verdict = verdicts(_seeded(lowers, 3))["- names"]
    assert verdict["protocols"]["A"]["mean"] == pytest.approx(-1.0)
    assert verdict["protocols"]["A"]["se"] == pytest.approx(0.2 / math.sqrt(3))
    assert [e["effect"] for e in verdict["protocols"].values()] == ["lowers", "neither"]
    assert verdict["decision"].startswith("leave the shipped features")

    # B now d = +0.3, +0.2, +0.4: mean 0.3 > SE 0.058: raises, so the gain on A does not ship it.
    raises = {**lowers, "B": [(20.0, 20.3), (20.0, 20.2), (20.0, 20.4)]}
    verdict = verdicts(_seeded(raises, 3))["- names"]
    assert verdict["protocols"]["B"]["effect"] == "raises"
    assert verdict["decision"].startswith("do not leave the shipped features")

    # A gain of one SE is not enough: d = -0.1, -0.3, -0.2: mean -0.2, SE 0.058, -2 SE = -0.115 -> lowers;
    # d = -0.1, -0.5, 0.0: mean -0.2, sd 0.265, SE 0.153, -2 SE = -0.306 -> neither.
    noisy = {"A": [(10.0, 9.9), (10.0, 9.5), (10.0, 10.0)]}
    verdict = verdicts(_seeded(noisy, 3))["- names"]
    assert verdict["protocols"]["A"]["effect"] == "neither"
    assert verdict["decision"].startswith("do not leave")

    # Fewer than three seeds decide nothing.
    two = {"A": [(10.0, 9.0), (10.0, 9.2)]}
    verdict = verdicts(_seeded(two, 2))["- names"]
    assert verdict["decision"].startswith("undecided") and verdict["protocols"]["A"]["effect"] == "neither"


def test_seeds_reach_every_fit_and_the_figure_is_their_mean(public_runs, monkeypatch):
    import training.evaluate as evaluate
    from training.ablation import run_ablation

    seen: list[int] = []
    real_fit = evaluate.fit_calibrated

    def fit_calibrated(sub, params, rounds, seed=0):
        seen.append(seed)
        return real_fit(sub, params, rounds, seed)

    monkeypatch.setattr(evaluate, "fit_calibrated", fit_calibrated)
    params = {**FAST_PARAMS, "subsample": 0.5, "colsample_bytree": 0.5}
    result = run_ablation(public_runs, "roofline", params, FAST_ROUNDS, seeds=2, variants=("- framework identity",))
    assert list(result["variants"]) == ["shipped features", "- framework identity"]
    entry = result["protocols"]["Lambda and DeepLearningExamples, leave one model out"]
    runs = entry["residual_by_seed"]["shipped features"]
    assert len(runs) == 2
    assert entry["residual"]["shipped features"]["all"] == pytest.approx((runs[0]["all"] + runs[1]["all"]) / 2)
    # Each protocol's folds run once per seed, in order: 0 for every fold, then 1.
    assert set(seen) == {0, 1} and seen.count(0) == seen.count(1)
    assert result["verdicts"]["- framework identity"]["decision"].startswith("undecided")
    with pytest.raises(ValueError, match="unknown variants: - gpu names"):
        run_ablation(public_runs, "roofline", params, FAST_ROUNDS, variants=("- gpu names",))


def test_a_seed_reaches_the_fit_and_the_out_of_fold_correction(public_runs):
    from training.dataset import build_dataset
    from training.train import fit_calibrated

    ds = build_dataset(public_runs)
    params = {**FAST_PARAMS, "subsample": 0.5, "colsample_bytree": 0.5}
    (m1, oof1, _, _), (again, oof_again, _, _), (m2, oof2, _, _) = (fit_calibrated(ds, params, FAST_ROUNDS, seed) for seed in (1, 1, 2))
    X = ds.features.values
    np.testing.assert_array_equal(m1.predict(X), again.predict(X))
    np.testing.assert_array_equal(oof1, oof_again)
    assert not np.array_equal(m1.predict(X), m2.predict(X))
    assert not np.array_equal(oof1, oof2)


def test_an_unknown_variant_is_one_line_and_exit_2(tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["ablate", "--variant", "- gpu names", "--out", str(tmp_path / "a")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "--variant: - gpu names is not a variant; allowed: 'shipped features'" in result.stderr
