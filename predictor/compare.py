"""One job on every GPU: the ``gpu=`` what-if for each candidate, ranked.

Each candidate is exactly ``predict speedup --job JOB --to gpu=NAME``: the
target takes the GPU's default intra-node link as that what-if does, a
data-parallel job gets its learned correction and intervals (fading where
the GPU lies outside the training data, with the warning that says so), a
layout job the layout model's answer and a memory check. A candidate the
what-if refuses (a precision the GPU has no path for, a layout that does not
fit its memory) is listed with the reason and no numbers.

The default candidates are one GPU per family of the catalogue (its family
default: the SXM part of an A100 or H100, say), plus the job's own GPU. A layout job that does not fit its own GPU gets
the same list, without speedups: which GPUs could hold it, and how fast.

With ``accumulate_to_fit`` a data-parallel candidate whose step may not fit its
memory is scored again as the same optimizer step in the fewest passes that fit
(``gpu=NAME`` and ``gradient_accumulation_steps=K``, K dividing the batch per
GPU; :func:`features.memory.passes_that_fit`): what the job would take there
made to fit, with the samples per step unchanged, so its speedup compares like
with like.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from features.errors import SpecError
from features.hardware import hardware_catalog
from features.table import RULES
from predictor.api import JobLike, as_job

#: Words of a warning that say the target lies outside the training data.
_UNSEEN = "outside the training data"


@dataclass(frozen=True)
class GpuOption:
    """The job on one GPU: its step, the speedup over the job's own GPU, or why there is none."""

    gpu: str
    step_time_s: float | None = None
    speedup: float | None = None
    speedup_lower: float | None = None
    speedup_upper: float | None = None
    bottleneck: str | None = None
    memory_per_gpu_bytes: float | None = None
    #: A data-parallel job's estimated memory against the GPU's (None where not estimated; layout jobs that
    #: do not fit are refused with an ``error`` instead).
    fits: bool | None = None
    error: str | None = None
    #: The precision the GPU computes at where it has no path for the job's (bf16 on a V100: fp32).
    computes_at: str | None = None
    #: Passes per step the option was scored at, where it was made to fit by accumulating (None otherwise).
    passes: int | None = None
    samples_per_pass: float | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def outside_training_data(self) -> bool:
        return any(_UNSEEN in w for w in self.warnings)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None and k != "warnings"}
        out["outside_training_data"] = self.outside_training_data
        out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True)
class Comparison:
    """A job's baseline and its options, fastest first (refused candidates last)."""

    name: str
    gpu: str
    #: None where the job does not fit its own GPU's memory (a layout job): the options then carry no speedup.
    step_time_s: float | None
    method: str
    options: tuple[GpuOption, ...]

    @property
    def runs_anywhere(self) -> bool:
        """Whether any GPU compared (the job's own included) can run the job: one has a step time."""
        return any(o.step_time_s is not None for o in self.options)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpu": self.gpu,
            "step_time_s": self.step_time_s,
            "method": self.method,
            "runs_anywhere": self.runs_anywhere,
            "options": [o.to_dict() for o in self.options],
        }


def default_candidates() -> list[str]:
    """One GPU per catalogue family: its family default, else its only member."""
    devices = [d for d in hardware_catalog().devices if d.kind == "gpu"]
    families: dict[str, list] = {}
    for d in devices:
        families.setdefault(d.family, []).append(d)
    return [next((d for d in members if d.family_default), members[0]).name for members in families.values()]


def compare_gpus(predictor, job: JobLike, gpus: Sequence[str] | None = None, accumulate_to_fit: bool = False) -> Comparison:
    """The job under ``gpu=NAME`` for each of ``gpus`` (default :func:`default_candidates`) and its own GPU;
    with ``accumulate_to_fit``, in the fewest passes that fit where its step does not (module docstring)."""
    catalog = hardware_catalog()
    job = as_job(job)
    baseline = predictor.time(job)
    layout = hasattr(baseline, "check_fits")
    fits = not layout or baseline.fits
    if layout:
        own, precision = baseline.job.gpu.name, baseline.job.precision
    else:
        own, precision = catalog.device(job.row["gpu"]).name, str(job.row.get("precision") or RULES["precision"].default).lower()
    names = []
    for g in gpus or default_candidates():
        device = catalog.device(g, "--gpu")  # an unknown name raises, with the nearest names
        if device.kind != "gpu":
            raise SpecError("--gpu", g, "a GPU of the catalogue (predict devices)")
        names.append(device.name)
    options = []
    for name in dict.fromkeys([own, *names]):
        option = _option(predictor, job, name, layout)
        if accumulate_to_fit and option.fits is False:
            option = _accumulated_to_fit(predictor, job, option)
        computes_at = catalog.device(name).compute_precision(precision)
        if computes_at != precision and option.error is None:
            option = replace(option, computes_at=computes_at)
        if name == own and option.error is None and option.passes is None:  # the job itself: 1x by definition
            option = replace(option, speedup=1.0, speedup_lower=None, speedup_upper=None)
        if not fits and option.error is None:  # no speedup over a job that cannot run
            option = replace(option, speedup=None)
        options.append(option)
    ranked = sorted(options, key=lambda o: (o.step_time_s is None, o.step_time_s or 0.0, o.gpu))
    method = "analytical layout model" if layout else predictor.method
    return Comparison(job.name, own, baseline.step_time_s if fits else None, method, tuple(ranked))


def _accumulated_to_fit(predictor, job, option: GpuOption) -> GpuOption:
    """``option`` scored again in the fewest passes that fit, or as it was where none does."""
    from features.memory import DataParallelMemory, passes_that_fit

    memory = predictor.speedup(job, [f"gpu={option.gpu}"]).target.memory
    batch = float(job.row["batch_size_per_gpu"])
    passes = float(job.row.get("gradient_accumulation_steps") or 1)
    needed = passes_that_fit(DataParallelMemory(**memory["parts"], capacity_bytes=memory["capacity_bytes"]), batch, passes)
    if needed is None:
        return option
    accumulated = _option(predictor, job, option.gpu, False, (f"gradient_accumulation_steps={needed}",))
    if accumulated.error is not None:
        return option
    return replace(accumulated, passes=needed, samples_per_pass=batch / needed)


def _option(predictor, job, gpu: str, layout: bool, more: tuple[str, ...] = ()) -> GpuOption:
    try:
        result = predictor.speedup(job, [f"gpu={gpu}", *more])
    except SpecError as error:
        return GpuOption(gpu, error=str(error))
    target = result.target
    if layout:
        if not target.fits:
            from features.layout import does_not_fit_message

            return GpuOption(gpu, error=does_not_fit_message(target.breakdown, gpu))
        return GpuOption(
            gpu, target.step_time_s, result.speedup, bottleneck=target.breakdown.bottleneck,
            memory_per_gpu_bytes=target.breakdown.memory.total_bytes, warnings=tuple(target.warnings),
        )
    return GpuOption(
        gpu, target.step_time_s, result.speedup, result.speedup_lower, result.speedup_upper,
        bottleneck=target.breakdown.bottleneck, warnings=tuple(target.warnings),
        memory_per_gpu_bytes=None if target.memory is None else target.memory["total_bytes"], fits=target.fits,
    )
