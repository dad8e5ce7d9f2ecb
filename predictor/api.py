"""The public Python API: ``Predictor`` answers for one job or a whole table of jobs.

>>> from predictor import Predictor
>>> p = Predictor()
>>> p.speedup("examples/jobs/resnet50-ps.json", ["allreduce-nvlink"]).speedup  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from features import physics, scenarios
from features.analytical import BOTTLENECKS, OVERLAP_STRATEGIES, BreakdownArrays
from features.errors import RowError, SpecError
from features.jobspec import Job, flatten, job_from_dict, load_job
from features.layout_spec import is_layout_job
from features.memory import job_memory, may_not_fit_message
from features.bottleneck_links import bottleneck_links
from features.resolve import ResolvedJobs, catalog_arrays, resolve
from features.table import JobTable, table_from_rows
from predictor.results import Breakdown, Prediction, SpeedupPrediction

JobLike = Job | Mapping[str, Any] | str | Path


def as_job(job: JobLike) -> Job:
    """A validated job from a Job, a parsed JSON object or a path to a job file."""
    if isinstance(job, Job):
        return job
    if isinstance(job, (str, Path)):
        return load_job(job)
    return job_from_dict(dict(job))


@dataclass
class TablePrediction:
    """Predictions for every row of a job table (NaN and an error message on bad rows)."""

    resolved: ResolvedJobs
    breakdown: BreakdownArrays
    step_time_s: np.ndarray
    bottleneck: np.ndarray
    bottleneck_link: np.ndarray
    method: str
    lower_s: np.ndarray | None = None
    upper_s: np.ndarray | None = None
    #: Per row, why the job lies outside the model's training data (None where it does not).
    extrapolation: np.ndarray | None = None
    learned: Any = None

    @property
    def errors(self) -> np.ndarray:
        return self.resolved.errors

    @property
    def global_batch_size(self) -> np.ndarray:
        return self.resolved.batch_size_per_gpu * self.resolved.total_gpus


@dataclass
class TableSpeedup:
    """Baseline and what-if target for every row; an error on either side fails the row."""

    baseline: TablePrediction
    target: TablePrediction
    target_table: JobTable
    speedup: np.ndarray
    speedup_lower: np.ndarray | None = None
    speedup_upper: np.ndarray | None = None
    p_speedup_gt_1: np.ndarray | None = None
    #: Share of the learned correction's change the speedup keeps (its what-if kind's); None: analytical.
    share: np.ndarray | None = None
    #: The target's samples per step over the baseline's (GPU count or batch changed: not 1).
    samples_ratio: np.ndarray | None = None
    #: P(the target processes more samples per second); None: analytical.
    p_more_throughput: np.ndarray | None = None

    @property
    def errors(self) -> np.ndarray:
        """The baseline's error where it has one, else the target's."""
        return np.where(self.baseline.resolved.table.failed, self.baseline.errors, self.target.errors)


#: Where the shipped model lives; ``PREDICT_MODEL_DIR`` points elsewhere.
DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[1] / "models" / "default"


def default_model_dir() -> Path:
    return Path(os.environ.get("PREDICT_MODEL_DIR") or DEFAULT_MODEL_DIR)  # set but empty: as if unset


class Predictor:
    """Step-time and speedup predictions: the analytical breakdown, corrected by the learned model.

    ``model`` is a model directory, ``"default"`` (the shipped model, or the
    analytical model alone with a warning when there is none) or ``None``
    (the analytical model alone). ``overlap`` chooses how the analytical
    components add up: ``"none"`` is the PAI model (the sum of io, compute,
    memory and communication), ``"overlapped"`` hides communication behind
    the backward pass (see :mod:`features.analytical`); a learned model
    corrects the baseline it was trained on. ``confidence_level`` sets the
    width of the conformal intervals.
    """

    def __init__(self, *, model: str | Path | None = "default", overlap: str = "none", confidence_level: float = 0.9):
        if overlap not in OVERLAP_STRATEGIES:
            raise SpecError("overlap", overlap, f"allowed: {', '.join(OVERLAP_STRATEGIES)}")
        if not 0.0 < confidence_level < 1.0:
            raise SpecError("confidence_level", confidence_level, "allowed: strictly between 0 and 1")
        self.overlap = overlap
        self.confidence_level = confidence_level
        self.warnings: tuple[str, ...] = ()
        self.artefact = None
        if model is not None:
            self._load(model)

    def _load(self, model: str | Path) -> None:
        from predictor.artefact import load_artefact

        path = default_model_dir() if model == "default" else Path(model)
        if model == "default" and os.environ.get("PREDICT_MODEL_DIR") and not path.is_dir():
            raise SpecError("PREDICT_MODEL_DIR", str(path), "no such model directory; point it at one, or unset it for the shipped model")
        if model == "default" and not path.exists():
            self.warnings = (f"no trained model at {path}: analytical model only",)
            return
        self.artefact = load_artefact(path)  # a corrupt or foreign directory raises ArtefactError, naming the file

    @property
    def method(self) -> str:
        return "learned" if self.artefact is not None else "analytical"

    @property
    def baseline(self) -> str:
        """The analytical total predictions start from: a learned model's own baseline (whatever
        ``overlap`` says, since its residual corrects that one), else ``overlap``."""
        return self.artefact.baseline if self.artefact is not None else self.overlap

    # -- whole tables -------------------------------------------------------

    def predict_table(self, table: JobTable) -> TablePrediction:
        """Resolve and predict every row of a validated job table."""
        result = self._analytical_table(table)
        if self.artefact is not None:
            from predictor.learned import predict_times

            _attach_learned(result, predict_times(self.artefact, result.resolved, result.breakdown, self.confidence_level))
        _fail_non_finite(result)
        return result

    def _analytical_table(self, table: JobTable) -> TablePrediction:
        resolved = resolve(table)
        breakdown = resolved.breakdown()
        # The bottleneck of the analytical step predictions start from (the roofline's parts for a learned model).
        code = breakdown.bottleneck_code(self.baseline)
        names = np.array(BOTTLENECKS, object)[code]
        names[~resolved.ok] = None
        return TablePrediction(
            resolved=resolved,
            breakdown=breakdown,
            step_time_s=breakdown.step_time_s(self.overlap),
            bottleneck=names,
            bottleneck_link=bottleneck_links(resolved, breakdown, catalog_arrays(), code),
            method=self.method,
        )

    def speedup_table(self, table: JobTable, steps: Sequence[scenarios.Step]) -> TableSpeedup:
        """Every row against itself rewritten by the parsed scenario ``steps``."""
        target_table = scenarios.apply(table, steps)
        baseline = self._analytical_table(table)
        target = self._analytical_table(target_table)
        if self.artefact is not None:
            from predictor.learned import predict_times_together

            sides = [(baseline.resolved, baseline.breakdown), (target.resolved, target.breakdown)]
            for result, learned in zip((baseline, target), predict_times_together(self.artefact, sides, self.confidence_level)):
                _attach_learned(result, learned)
        _fail_non_finite(baseline)
        _fail_non_finite(target)
        with np.errstate(invalid="ignore", divide="ignore"):
            samples_ratio = target.global_batch_size / baseline.global_batch_size
        result = TableSpeedup(
            baseline=baseline,
            target=target,
            target_table=target_table,
            speedup=baseline.step_time_s / target.step_time_s,
            samples_ratio=samples_ratio,
        )
        if self.artefact is not None:
            from predictor.learned import predict_speedup

            learned = predict_speedup(
                self.artefact,
                baseline.learned,
                target.learned,
                {**table.columns, "total_gpus": baseline.resolved.total_gpus},
                {**target_table.columns, "total_gpus": target.resolved.total_gpus},
                self.confidence_level,
                samples_ratio,
            )
            result.speedup = learned.speedup
            result.speedup_lower, result.speedup_upper = learned.lower, learned.upper
            result.p_speedup_gt_1 = learned.p_speedup_gt_1
            result.p_more_throughput = learned.p_more_throughput
            result.share = learned.share
            # The target's time is the baseline's over the speedup (a what-if keeps its kind's share of the
            # correction's change), its interval moved with it.
            with np.errstate(invalid="ignore", divide="ignore"):
                moved = baseline.step_time_s / learned.speedup / target.step_time_s
            target.step_time_s = target.step_time_s * moved
            target.lower_s, target.upper_s = target.lower_s * moved, target.upper_s * moved
        ok = baseline.resolved.ok & target.resolved.ok
        with np.errstate(invalid="ignore"):
            finite = np.isfinite(result.speedup) & (result.speedup > 0)
        target.resolved.table.fail(ok & ~finite, "--to: the speedup is not a finite number for this job; its figures are too extreme")
        return result

    # -- one job ------------------------------------------------------------

    def time(self, job: JobLike) -> Prediction:
        """Predicted step time, throughput and breakdown of one job (a layout job: see :mod:`predictor.layout`)."""
        job = as_job(job)
        if is_layout_job(job.row):
            from predictor.layout import predict_layout

            return predict_layout(job)
        result = self.predict_table(table_from_rows([flatten(job)]))
        return self._prediction(result, 0, job.name, _measured(job))

    def breakdown(self, job: JobLike) -> Breakdown:
        """The analytical breakdown of one job."""
        return self.time(job).breakdown

    def speedup(self, job: JobLike, to: Sequence[str]) -> SpeedupPrediction:
        """Baseline against the job rewritten by the scenario steps ``to`` (applied in order)."""
        job = as_job(job)
        if is_layout_job(job.row):
            from predictor.layout import speedup_layout

            return speedup_layout(job, to)
        steps = scenarios.parse(to)
        result = self.speedup_table(table_from_rows([flatten(job)]), steps)
        baseline = self._prediction(result.baseline, 0, job.name, _measured(job))
        target = self._prediction(result.target, 0, job.name, None)

        def optional(values: np.ndarray | None) -> float | None:
            return None if values is None else float(values[0])

        return SpeedupPrediction(
            baseline=baseline,
            target=target,
            scenario=tuple(step.text for step in steps),
            speedup=float(result.speedup[0]),
            target_job={leaf: _plain(values[0]) for leaf, values in result.target_table.columns.items()},
            speedup_lower=optional(result.speedup_lower),
            speedup_upper=optional(result.speedup_upper),
            p_speedup_gt_1=optional(result.p_speedup_gt_1),
            confidence_level=baseline.confidence_level,
            samples_per_step_ratio=float(result.samples_ratio[0]),
            p_more_throughput=optional(result.p_more_throughput),
        )

    def _prediction(self, result: TablePrediction, row: int, name: str, measured: float | None) -> Prediction:
        if result.errors[row] is not None:
            raise RowError(result.errors[row])
        b = result.breakdown
        breakdown = Breakdown(
            io_s=float(b.io_s[row]),
            compute_s=float(b.compute_s[row]),
            memory_s=float(b.memory_s[row]),
            comm_s=float(b.comm_s[row]),
            comm_intra_node_s=float(b.comm.intra_node_s[row]),
            comm_network_s=float(b.comm.network_s[row]),
            additive_s=float(b.additive_s[row]),
            overlapped_s=float(b.overlapped_s[row]),
            bottleneck=str(result.bottleneck[row]),
            bottleneck_link=result.bottleneck_link[row],
            physics=_physics_row(b, row),
        )
        step_time_s = float(result.step_time_s[row])
        global_batch = float(result.global_batch_size[row])
        warnings = self.warnings
        if result.extrapolation is not None and result.extrapolation[row] is not None:
            warnings += (f"outside the training data: {result.extrapolation[row]}",)
        if measured is not None:
            warnings += _faster_than_the_peak(result.resolved, row, measured)
        memory = job_memory(result.resolved, row)
        if memory is not None and not memory.fits:
            resolved = result.resolved
            warnings += (may_not_fit_message(memory, float(resolved.batch_size_per_gpu[row]), float(resolved.passes_per_step[row])),)
        return Prediction(
            name=name,
            step_time_s=step_time_s,
            throughput_samples_per_s=global_batch / step_time_s,
            global_batch_size=global_batch,
            breakdown=breakdown,
            method=result.method,
            overlap=self.baseline,
            lower_s=None if result.lower_s is None else float(result.lower_s[row]),
            upper_s=None if result.upper_s is None else float(result.upper_s[row]),
            confidence_level=None if result.lower_s is None else self.confidence_level,
            measured_step_time_s=measured,
            warnings=warnings,
            memory=None if memory is None else memory.to_dict(),
        )


def _attach_learned(result: TablePrediction, learned) -> None:
    """The learned model's step time, interval and domain notes in place of the analytical answer."""
    result.learned = learned
    result.step_time_s = np.exp(learned.log_step_time_s)
    result.lower_s, result.upper_s = learned.lower_s, learned.upper_s
    result.extrapolation = learned.extrapolation


def _physics_row(b: BreakdownArrays, row: int) -> dict[str, float] | None:
    """The roofline physics of one row by mechanism, in seconds."""
    p = b.physics
    if p is None:
        return None
    return {
        "roofline_s": float(p.step_time_s[row]),
        "matrix_s": float(p.device.matrix_s[row]),
        "memory_bound_s": float(p.device.memory_bound_s[row]),
        "launch_s": float(p.device.launch_s[row]),
        "host_s": float(p.device.host_s[row]),
        "backward_s": float(p.backward_s[row]),
        "allreduce_or_ps_s": float(p.comm_s[row]),
        "exposed_comm_s": float(p.exposed_comm_s[row]),
    }


def _fail_non_finite(result: TablePrediction) -> None:
    """Rows whose figures give a step time or component that is not a finite positive number fail, with a reason.

    The job spec's bounds keep every product of valid inputs finite; this is
    the guarantee that no NaN or infinity leaves the predictor as a number.
    """
    b = result.breakdown
    values = [result.step_time_s, b.io_s, b.compute_s, b.memory_s, b.comm_s]
    values += [v for v in (result.lower_s, result.upper_s) if v is not None]
    with np.errstate(invalid="ignore"):
        finite = np.logical_and.reduce([np.isfinite(v) for v in values]) & (result.step_time_s > 0)
    result.resolved.table.fail(
        ~finite,
        "job: its figures give a step time that is not a finite positive number of seconds; "
        "check flops_per_sample, param_count and the byte counts against their bounds (`predict schema`)",
    )


def _faster_than_the_peak(resolved: ResolvedJobs, row: int, measured_s: float) -> tuple[str, ...]:
    """A warning where a measured step is shorter than the job's arithmetic at its GPU's dense peak allows."""
    if resolved.matrix_flops_per_sample is None:
        return ()
    floor_s = float(physics.arithmetic_floor_s(resolved.device_inputs())[row])
    if not measured_s < floor_s:
        return ()
    return (
        f"measured.step_time_s: {measured_s:.4g} s is shorter than the {floor_s:.3g} s the job's arithmetic needs at "
        "the GPU's dense peak; was it measured at another precision, batch or GPU count?",
    )


def _measured(job: Job) -> float | None:
    return job.measured_step_time_s


def _plain(value: Any) -> Any:
    if isinstance(value, float) and np.isnan(value):
        return None
    if isinstance(value, (np.floating, float)):
        return int(value) if float(value).is_integer() else float(value)
    return value
