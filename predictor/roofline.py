"""The roofline plot of the AI Matrix characterization, for one GPU.

Attainable FLOP/s is min(peak, arithmetic intensity x memory bandwidth). Each
workload sits at the arithmetic intensity of one training step at its default
batch (FLOPs over all DRAM traffic, weights and optimizer state included) and
at the FLOP/s the analytical model predicts for it on one GPU (FLOPs over
compute plus memory time), which is at or below the roof.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from features.hardware import hardware_catalog
from features.resolve import resolve
from features.table import table_from_rows
from features.workloads import workload_catalog
from predictor.outputs import output_file


def operating_points(gpu: str, models: Sequence[str], precision: str) -> list[tuple[str, float, float]]:
    """(model, FLOP per byte, predicted FLOP/s) of each model trained on one ``gpu``."""
    rows = [{"model": m, "gpu": gpu, "precision": precision, "architecture": "single"} for m in models]
    resolved = resolve(table_from_rows(rows))
    for error in resolved.errors:
        if error is not None:
            from features.errors import RowError

            raise RowError(error)
    breakdown = resolved.breakdown()
    step_flops = resolved.flops_per_sample * resolved.batch_size_per_gpu
    traffic_bytes = breakdown.memory_s * resolved.memory_bw_bytes_per_s
    intensity = step_flops / traffic_bytes
    achieved = step_flops / (breakdown.compute_s + breakdown.memory_s)
    names = [workload_catalog().get(m).name for m in models]
    return list(zip(names, intensity.tolist(), achieved.tolist()))


def plot_roofline(gpu: str, models: Sequence[str] | None, precision: str, out: Path) -> Path:
    """Write the roofline PNG of ``gpu`` with ``models`` (default: the AI Matrix suite) to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from features.errors import SpecError
    from features.fields import PRECISIONS

    if precision not in PRECISIONS:
        raise SpecError("--precision", precision, f"allowed: {', '.join(PRECISIONS)}")
    device = hardware_catalog().device(gpu, "--gpu")
    if not models:
        models = [w.name for w in workload_catalog().workloads if w.ai_matrix]
    points = operating_points(device.name, models, precision)
    peak = device.peak_flops_per_s(precision)
    bandwidth = device.memory_bw_bytes_per_s
    lowest = min([p[1] for p in points] + [peak / bandwidth]) / 4
    highest = max([p[1] for p in points] + [peak / bandwidth]) * 4
    intensity = np.logspace(np.log10(lowest), np.log10(highest), 200)

    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.loglog(intensity, np.minimum(peak, intensity * bandwidth), color="black", lw=2, label="attainable")
    ax.axhline(peak, color="tab:red", ls=":", lw=1, label=f"{precision} peak {peak / 1e12:.1f} TFLOP/s")
    ax.loglog(intensity, intensity * bandwidth, color="tab:blue", ls=":", lw=1, label=f"memory {bandwidth / 1e9:.0f} GB/s")
    for name, x, y in points:
        ax.scatter([x], [y], s=30, zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"Roofline of {device.name}: training at default batch ({precision})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out = output_file(out, "--out")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
