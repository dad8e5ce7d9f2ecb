"""Why a job is slow, and why it gains (or not) under a what-if.

An explanation has two layers. The analytical breakdown says where the step
should go: the parts of the roofline physics the model starts from (matrix and
memory-bound operators, kernel launches, host overhead, exposed communication,
input beyond the rest), which add up to the analytical step, and the PAI
study's components at datasheet rates (io, compute, memory and communication,
and the link behind the bottleneck). The learned residual says how measured runs of jobs
like this one differ from that: its SHAP values (XGBoost's own TreeSHAP,
``pred_contribs``) summed into bottleneck families. In log space the
families add up exactly to the residual minus its base value, so each is a
multiplicative factor on the analytical time ("network communication x1.6").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from features import scenarios
from features.analytical import COMPONENTS
from features.physics import STEP_PARTS
from features.build import FAMILIES, feature_family, physical_features
from features.jobspec import flatten
from features.layout_spec import is_layout_job
from features.table import table_from_rows
from predictor.api import JobLike, Predictor, TablePrediction, as_job
from predictor.domain import unseen_facts
from predictor.outputs import output_file
from predictor.treeshap import grouped_shap


def family_matrix(feature_names: Sequence[str]) -> np.ndarray:
    """0/1 matrix (features x families) that sums feature attributions into families."""
    matrix = np.zeros((len(feature_names), len(FAMILIES)))
    for i, name in enumerate(feature_names):
        matrix[i, FAMILIES.index(feature_family(name))] = 1.0
    return matrix


#: How feature attributions are computed: exact TreeSHAP, or XGBoost's approximate
#: path attributions (Saabas), which also add up to the prediction exactly but are
#: not Shapley values, at about a hundredth of the cost.
ATTRIBUTION_METHODS = ("treeshap", "saabas")


def family_contributions(
    predictor: Predictor, result: TablePrediction, method: str = "treeshap", faded: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Per job: log contributions of each family (n x families) and the base value (n).

    Their sum is the log correction the prediction applies: the model's log
    residual (a refit offset reported with the base value), times the share a
    job outside the training domain keeps (:func:`predictor.domain.unseen_facts`);
    with ``faded=False``, the whole residual.
    """
    from predictor.artefact import DEDUPLICATE_ABOVE_ROWS, distinct_feature_rows, import_xgboost

    artefact = predictor.artefact
    frame = physical_features(result.resolved, result.breakdown)
    values = np.ascontiguousarray(frame.values, dtype=np.float32)  # as XGBoost stores them
    first, inverse = distinct_feature_rows(values) if len(values) >= DEDUPLICATE_ABOVE_ROWS else (slice(None), slice(None))
    xgb = import_xgboost()
    booster = artefact.xgboost_booster()
    if method == "saabas":
        contributions = booster.predict(xgb.DMatrix(values[first], feature_names=list(frame.names)), pred_contribs=True, approx_contribs=True)
        families, base = contributions[:, :-1] @ family_matrix(frame.names), contributions[:, -1]
    else:
        families, base = grouped_shap(booster, values[first], family_matrix(frame.names), frame.names)
    families, base = families[inverse], base[inverse] + artefact.metadata.get("residual_offset", 0.0)
    if not faded:
        return families, base
    # A job outside the training domain keeps only a share of the correction: so do its parts.
    kept, _ = unseen_facts(artefact.metadata["domain"], result.resolved)
    return families * kept[:, None], base * kept


@dataclass(frozen=True)
class Explanation:
    """One job: analytical shares, and the learned residual's factors by family."""

    name: str
    step_time_s: float
    analytical_step_time_s: float
    shares: dict[str, float]
    seconds: dict[str, float]
    bottleneck: str
    bottleneck_link: str | None
    base_factor: float | None
    family_factors: dict[str, float]
    #: Seconds of each part of the roofline physics (:data:`features.physics.STEP_PARTS`), which add up to
    #: the analytical step; None where the baseline is not the roofline physics.
    physics_seconds: dict[str, float] | None = None
    #: The share of the learned correction the job keeps (below 1 outside the training data), and the
    #: whole correction's base and family factors before that fading (None without a learned model).
    kept: float = 1.0
    whole_base_factor: float | None = None
    whole_family_factors: dict[str, float] | None = None

    @property
    def dominant_family(self) -> str | None:
        if not self.family_factors:
            return None
        return max(self.family_factors, key=lambda f: abs(np.log(self.family_factors[f])))

    @property
    def dominant_part(self) -> str:
        """What bounds the analytical step: input where it outlasts the rest of the step, else its largest
        roofline part (where known), else the largest PAI component."""
        if self.physics_seconds:
            if self.physics_seconds["input"] > 0:
                return "input"
            return max(self.physics_seconds, key=lambda part: self.physics_seconds[part])
        return self.bottleneck

    def summary(self) -> str:
        part = self.dominant_part
        if self.physics_seconds and part == "input":
            total = sum(self.physics_seconds.values())
            where = f" over {self.bottleneck_link}" if self.bottleneck_link else ""
            text = (
                f"input{where} bounds the step: the prefetched input takes the whole analytical step ({total:.3g} s), "
                f"{self.physics_seconds['input']:.3g} s longer than the rest"
            )
        elif self.physics_seconds:
            total = sum(self.physics_seconds.values())
            where = f" over {self.bottleneck_link}" if self.bottleneck_link and part == "exposed communication" else ""
            verb = "dominate" if part.endswith("s") else "dominates"
            share = self.physics_seconds[part] / total if total > 0 else 0.0
            text = f"{part}{where} {verb}: {share:.0%} of the analytical step ({total:.3g} s)"
        else:
            where = f" over {self.bottleneck_link}" if self.bottleneck_link else ""
            text = f"{part}{where} dominates: {self.shares[part]:.0%} of the analytical step"
        family = self.dominant_family
        if family is not None:
            factor = self.family_factors[family]
            direction = "slower" if factor > 1 else "faster"
            text += f"; measured jobs like this run {direction} than the physics says, mostly through {family} (x{factor:.2f})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "step_time_s": self.step_time_s,
            "analytical_step_time_s": self.analytical_step_time_s,
            "breakdown_s": self.seconds,
            "shares": self.shares,
            "physics_breakdown_s": self.physics_seconds,
            "bottleneck": self.bottleneck,
            "bottleneck_link": self.bottleneck_link,
            "residual_base_factor": self.base_factor,
            "family_factors": self.family_factors,
            "correction_kept": self.kept,
            "summary": self.summary(),
        }


@dataclass(frozen=True)
class SpeedupExplanation:
    """Why a job gains or not under a what-if: component changes and family factor ratios."""

    baseline: Explanation
    target: Explanation
    scenario: tuple[str, ...]
    speedup: float
    analytical_speedup: float
    #: Share of the learned correction's change the what-if keeps (``predictor.calibration.pair_share``).
    share: float = 1.0
    #: The target's samples per step over the baseline's (the speedup explained is per step).
    samples_per_step_ratio: float = 1.0

    @property
    def correction_share(self) -> float:
        """The share of the correction's change the speedup keeps: the what-if kind's, times the share
        the less familiar side keeps (:func:`predictor.learned.pair_correction_change`)."""
        return self.share * min(self.baseline.kept, self.target.kept)

    @property
    def base_speedup_factor(self) -> float | None:
        """How much of the speedup the residual's base rate adds (1 where both sides keep all of it)."""
        base, target = self.baseline.whole_base_factor, self.target.whole_base_factor
        if base is None or target is None:
            return None
        return (base / target) ** self.correction_share

    @property
    def family_speedup_factors(self) -> dict[str, float]:
        """Per family, how much of the speedup the learned residual adds (>1 helps the target), at the what-if's share."""
        base, target = self.baseline.whole_family_factors, self.target.whole_family_factors
        if not base or not target:
            return {}
        return {f: (base[f] / target[f]) ** self.correction_share for f in base}

    def summary(self) -> str:
        # The parts of the analytical step where both sides have them, else the PAI components.
        base, target = self.baseline.physics_seconds, self.target.physics_seconds
        if not (base and target):
            base, target = self.baseline.seconds, self.target.seconds
        lead = max(base, key=lambda part: abs(base[part] - target[part]))
        text = (
            f"{self.speedup:.2f}x: the analytical model gives {self.analytical_speedup:.2f}x, mostly from "
            f"{lead} ({base[lead]:.3g} s -> {target[lead]:.3g} s)"
        )
        factors = self.family_speedup_factors
        if factors and self.correction_share == 0:
            side = "baseline" if self.baseline.kept <= self.target.kept else "target"
            reason = "the what-if's kind keeps none of it" if self.share == 0 else f"the {side} lies outside the training data"
            text += f"; the learned residual leaves it as it is ({reason})"
        elif factors:
            # The residual's whole adjustment is its base rate's ratio times every family's; name the
            # base and the largest family, so the factors shown multiply to the total.
            family = max(factors, key=lambda f: abs(np.log(factors[f])))
            base = self.base_speedup_factor
            text += (
                f"; the learned residual adjusts it by x{self.speedup / self.analytical_speedup:.2f} "
                f"(x{base:.2f} its base rate, x{factors[family]:.2f} through {family}, the largest family)"
            )
        if f"{self.samples_per_step_ratio:.6g}" != "1":
            r = self.samples_per_step_ratio
            text += f"; that is per step: with {r:.3g}x the samples per step, {self.speedup * r:.2f}x the throughput"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": list(self.scenario),
            "speedup": self.speedup,
            "analytical_speedup": self.analytical_speedup,
            "family_speedup_factors": self.family_speedup_factors,
            "correction_share": self.correction_share,
            "samples_per_step_ratio": self.samples_per_step_ratio,
            "throughput_ratio": self.speedup * self.samples_per_step_ratio,
            "summary": self.summary(),
            "baseline": self.baseline.to_dict(),
            "target": self.target.to_dict(),
        }


def _explain_row(predictor: Predictor, result: TablePrediction, name: str) -> Explanation:
    if result.errors[0] is not None:
        from features.errors import RowError

        raise RowError(result.errors[0])
    b = result.breakdown
    seconds = dict(zip(COMPONENTS, (float(v) for v in b.component_matrix_s()[0])))
    total = sum(seconds.values())
    base_factor, factors, kept, whole_base, whole = None, {}, 1.0, None, None
    if predictor.artefact is not None:
        families, base = family_contributions(predictor, result, faded=False)
        kept = float(unseen_facts(predictor.artefact.metadata["domain"], result.resolved)[0][0])
        whole_base = float(np.exp(base[0]))
        whole = {family: float(np.exp(families[0, i])) for i, family in enumerate(FAMILIES)}
        base_factor = float(np.exp(kept * base[0]))
        factors = {family: float(np.exp(kept * families[0, i])) for i, family in enumerate(FAMILIES)}
    baseline = predictor.artefact.baseline if predictor.artefact is not None else predictor.overlap
    physics = b.physics if baseline == "roofline" else None
    physics_seconds = dict(zip(STEP_PARTS, (float(v) for v in physics.parts_s()[0]))) if physics is not None else None
    return Explanation(
        name=name,
        step_time_s=float(result.step_time_s[0]),
        analytical_step_time_s=float(b.step_time_s(baseline)[0]),
        shares={c: s / total for c, s in seconds.items()},
        seconds=seconds,
        bottleneck=str(result.bottleneck[0]),
        bottleneck_link=result.bottleneck_link[0],
        base_factor=base_factor,
        family_factors=factors,
        physics_seconds=physics_seconds,
        kept=kept,
        whole_base_factor=whole_base,
        whole_family_factors=whole,
    )


def explain(predictor: Predictor, job: JobLike, to: Sequence[str] | None = None) -> Explanation | SpeedupExplanation:
    """Explain one job, or (with ``to``) its speedup under a what-if."""
    job = as_job(job)
    if is_layout_job(job.row):
        from predictor.layout import explain_layout

        return explain_layout(job, to)
    table = table_from_rows([flatten(job)])
    if not to:
        return _explain_row(predictor, predictor.predict_table(table), job.name)
    steps = scenarios.parse(to)
    result = predictor.speedup_table(table, steps)
    base = _explain_row(predictor, result.baseline, job.name)
    target = _explain_row(predictor, result.target, job.name)
    return SpeedupExplanation(
        baseline=base,
        target=target,
        scenario=tuple(s.text for s in steps),
        speedup=float(result.speedup[0]),
        analytical_speedup=base.analytical_step_time_s / target.analytical_step_time_s,
        share=1.0 if result.share is None else float(result.share[0]),
        samples_per_step_ratio=float(result.samples_ratio[0]),
    )


def plot_waterfall(explanation: Explanation | SpeedupExplanation, out: Path) -> Path:
    """A waterfall of log factors from the analytical time to the prediction (or between the two jobs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(explanation, SpeedupExplanation):
        steps = [("analytical speedup", np.log(explanation.analytical_speedup))]
        if explanation.base_speedup_factor is not None:
            steps.append(("residual base", np.log(explanation.base_speedup_factor)))
        steps += [(f, np.log(v)) for f, v in explanation.family_speedup_factors.items()]
        title, end_label = f"{explanation.baseline.name}: speedup under {' + '.join(explanation.scenario)}", "predicted speedup"
    else:
        steps = [("analytical", np.log(explanation.analytical_step_time_s))]
        if explanation.base_factor is not None:
            steps.append(("residual base", np.log(explanation.base_factor)))
        steps += [(f, np.log(v)) for f, v in explanation.family_factors.items()]
        title, end_label = f"{explanation.name}: step time (log scale)", "predicted"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    level = 0.0
    for i, (label, delta) in enumerate(steps):
        start = 0.0 if i == 0 else level
        colour = "tab:grey" if i == 0 else ("tab:red" if delta > 0 else "tab:green")
        ax.bar(i, delta, bottom=start, color=colour)
        level = start + delta
    ax.bar(len(steps), level, color="tab:blue")
    ax.set_xticks(range(len(steps) + 1), [s[0] for s in steps] + [end_label], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("log factor (natural log)")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    out = output_file(out, "--plot")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
