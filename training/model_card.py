"""The model card shipped beside a trained model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.train import TrainResult


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def model_card(result: "TrainResult") -> str:
    meta = result.metadata
    data, domain, metrics = meta["data"], meta["domain"], result.metrics
    sources = "\n".join(f"- {name}: {count} runs" for name, count in sorted(data["rows_by_source"].items()))
    pairs = ", ".join(f"{kind} {n}" for kind, n in sorted(data["pairs_by_kind"].items())) or "none"
    bins = ", ".join(f"{name} ({n})" for name, n in sorted(meta["calibration_bins"].items()))
    estimates = meta.get("shrink_estimates", {})
    shrink = "\n".join(
        f"- {fact}: keeps {100 * e['share']:.0f}% (chosen on {e['rows']} runs of {e['values']} values held out in turn; "
        f"MAPE with none / all of it: {e['mape_by_share']['0.00']}% / {e['mape_by_share']['1.00']}%)"
        for fact, e in sorted(estimates.items())
    ) or "- none estimated"
    shares = meta.get("pair_shares") or {}
    pair_shares = ", ".join(f"{kind} {100 * share:.0f}%" for kind, share in sorted(shares.items())) or "none estimated (all of it)"
    ranges = "\n".join(
        f"- {name}: {low:.3g} to {high:.3g}" for name, (low, high) in sorted(domain["ranges"].items())
    )
    return f"""# Step-time residual model

Created {meta['created_at']}; MLflow run `{meta.get('mlflow_run_id', 'none')}`.

## What it is
XGBoost on physical features of the PAI analytical breakdown (io, compute, memory,
communication; see `features/analytical.py`), predicting the log of measured over
analytical ({meta['baseline']}) step time. Prediction = analytical x exp(residual).
The residual is monotone where physics fixes the sign (`features/build.py`, MONOTONE_SIGNS):
more bandwidth, NICs, peak FLOP/s or memory bandwidth never predict a slower step.
Intervals are split-conformal (CV+ style, from out-of-fold residuals grouped by GPU type,
MLPerf benchmark or testbed topology), Mondrian by architecture and network tier, each group's
runs counting as the square root of their number (as training weighs runs); speedup intervals
calibrate the log ratio of measured pairs of runs, Mondrian by kind of what-if, each pair weighted so
that a pair of CV groups counts as the square root of its number of pairs (as training weighs runs).
A speedup is the physics' times the share of the correction's change that out-of-fold pairs
of its kind support (`training/shrink.py`, pair_shares; "all" for kinds with few pairs): {pair_shares}.

## Trained on
{data['rows']} measured runs (fingerprint `{data['fingerprint'][:16]}`):
{sources}

Pairs of runs for speedup calibration: {pairs}.
Step-time calibration bins (runs): {bins}.

## Cross-validated accuracy (grouped by GPU type / MLPerf benchmark / testbed topology)
- step time MAPE {_pct(metrics['cv_mape'])}, median APE {_pct(metrics['cv_median_ape'])},
  within 10% {_pct(metrics['cv_within_10pct'])}, within 20% {_pct(metrics['cv_within_20pct'])}
- the analytical model alone on the same runs: MAPE {_pct(metrics['analytical_mape'])},
  median APE {_pct(metrics['analytical_median_ape'])}

See `predict evaluate` for held-out evaluations by GPU type, tier, architecture and benchmark.

## Where it is valid
GPU types seen: {', '.join(domain['gpus'])}.
Architectures seen: {', '.join(domain['architectures'])}. Models seen: {', '.join(domain['models'])}.
Frameworks seen: {', '.join(domain.get('frameworks', []))}. Software stacks seen: {', '.join(domain.get('software_stacks', []))}. Model families seen: {', '.join(domain.get('model_families', []))}.
Architecture x device seen: {', '.join(domain.get('combinations', {}).get('architecture x device', []))}.
Architecture x network seen: {', '.join(domain.get('combinations', {}).get('architecture x network', []))}.
Feature ranges seen:
{ranges}

## Where it is not
- Jobs outside these ranges, or on a GPU type it has not seen, are flagged in the output
  (`extrapolation`). A GPU type it has not seen keeps its bin (the calibration folds hold whole
  GPU types out); every other reason sends the interval to the pooled bin, which holds the
  out-of-fold residuals of every run, while the other bins hold only those of runs that lay
  inside their cross-fitting fold's training data.
  Outside the frameworks, model families and combinations above, each unseen fact also
  shrinks the learned correction toward the physics to the share estimated for that fact by
  holding its values out in turn (`training/shrink.py`; none of it, the physics alone, where
  there was only one value to learn from), and the interval widens to hold the unfaded one
  (`predictor/domain.py`):
{shrink}
- Public GPU runs are single-node stock PyTorch (Lambda), NVIDIA's DeepLearningExamples and
  DLPerf (several frameworks, V100 and A100, up to multi-node) and vendor-tuned MLPerf
  submissions. PS/Worker on GPUs is only TensorFlow's 2017 K80 runs over 10 GbE; the other
  PS/Worker and Ethernet-tier effects are learned from the CPU testbed, at scaled-down
  bandwidths (emulated links), not from GPU clusters.
- Frameworks other than PyTorch (TensorFlow, MXNet, PaddlePaddle) are a quarter of the runs;
  their residuals are less certain.
"""
