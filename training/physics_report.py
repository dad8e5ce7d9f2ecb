"""The physics against the measurements: how far the analytical model alone is from measured runs.

For every measured run, the analytical step time (PAI additive and
overlapped) against the measured one, by source, GPU, model, architecture
and network tier; and for pairs of runs that differ by one what-if (a
network tier, PS/Worker against AllReduce, n against 2n GPUs, PCIe against
NVLink), the measured speedup against the analytical one. These are the
figures the learned residual has to improve on.

The roofline physics (``roofline``) has a few fitted constants; its
held-out section refits them without each held-out group
(:mod:`training.physics_fit`), next to PAI additive, overlapped and a naive
baseline (PAI additive times one fitted factor). In the other tables it runs
with the shipped constants, fitted on all GPU runs (in-sample there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from features.analytical import OVERLAP_STRATEGIES
from training.cv import ape
from training.dataset import Dataset, build_dataset, cv_groups, joined_keys
from training.pairs import make_pairs, pair_log_ratios
from training.physics_fit import PhysicsProblem, fit_rows, fit_shipped_constants, held_out_protocols, write_constants
from training.report import markdown_table
from training.train import summarize

#: Scaled-down stand-ins for the study's Ethernet tiers on the testbed (same 4x ratio as 25 to 100 Gbps).
TIER_CHANGES = (("emulated-250m", "emulated-1g"), ("emulated-100m", "emulated-250m"), ("emulated-1g", "emulated-4g"))


def error_table(ds: Dataset, by: list[str]) -> pd.DataFrame:
    """Analytical APE summaries (both overlap strategies) per group of the ``by`` columns."""
    records = []
    keyed = pd.Series(joined_keys(ds.runs, by, " / ") if by else ["all"] * len(ds))
    breakdown = ds.breakdown
    for key in sorted(set(keyed)):
        rows = (keyed == key).to_numpy()
        record: dict = {"group": key, "runs": int(rows.sum())}
        for overlap in OVERLAP_STRATEGIES:
            stats = summarize(ape(np.log(breakdown.step_time_s(overlap)[rows]), ds.log_measured_s[rows]))
            record[f"{overlap}_mape"] = stats["mape"]
            record[f"{overlap}_median_ape"] = stats["median_ape"]
        record["measured_over_additive_median"] = float(np.median(np.exp(ds.log_measured_s[rows]) / breakdown.additive_s[rows]))
        records.append(record)
    return pd.DataFrame(records)


def speedup_pairs(ds: Dataset) -> pd.DataFrame:
    """Pairs of runs with measured and analytical speedups (both overlap strategies)."""
    pairs = make_pairs(ds.runs, ds.resolved.total_gpus)
    frame = pairs.assign(
        source=ds.runs["source"].to_numpy()[pairs["a"]],
        model=ds.runs["model"].to_numpy()[pairs["a"]],
        from_value=[_described(ds.runs, a, kind) for a, kind in zip(pairs["a"], pairs["kind"])],
        to_value=[_described(ds.runs, b, kind) for b, kind in zip(pairs["b"], pairs["kind"])],
        measured_speedup=np.exp(pair_log_ratios(pairs, ds.log_measured_s)),
    )
    for overlap in OVERLAP_STRATEGIES:
        frame[f"{overlap}_speedup"] = np.exp(pair_log_ratios(pairs, np.log(ds.breakdown.step_time_s(overlap))))
    return frame


def _described(runs: pd.DataFrame, row: int, kind: str) -> str:
    column = {"gpus": "gpus_per_worker"}.get(kind, kind)
    if kind == "architecture":
        r = runs.iloc[row]
        return f"{r['architecture']}" + (f" ({r['parameter_servers']:.0f} PS)" if r["architecture"] == "ps-worker" else "")
    if kind == "gpus":
        r = runs.iloc[row]
        return f"{int(r['workers'] * r['gpus_per_worker'])} GPUs"
    return str(runs.iloc[row][column])


def oriented(pairs: pd.DataFrame, kind: str, start: str, end: str) -> pd.DataFrame:
    """Pairs of ``kind`` going from ``start`` to ``end`` (flipped where stored the other way)."""
    part = pairs[pairs["kind"] == kind]
    forward = part[(part["from_value"] == start) & (part["to_value"] == end)]
    backward = part[(part["from_value"] == end) & (part["to_value"] == start)].copy()
    for column in [c for c in part.columns if c.endswith("speedup")]:
        backward[column] = 1.0 / backward[column]
    backward[["from_value", "to_value"]] = backward[["to_value", "from_value"]].to_numpy()
    return pd.concat([forward, backward], ignore_index=True)


def speedup_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Measured against analytical speedups per what-if."""
    cases = [("network", a, b) for a, b in TIER_CHANGES]
    arch_pairs = pairs[pairs["kind"] == "architecture"]
    ps_labels = sorted({v for v in arch_pairs["from_value"].tolist() + arch_pairs["to_value"].tolist() if v.startswith("ps-worker")})
    cases += [("architecture", ps, target) for ps in ps_labels for target in ("allreduce-cluster", "allreduce-local")]
    records = []
    for kind, start, end in cases:
        part = oriented(pairs, kind, start, end)
        if len(part):
            records.append(_speedup_record(f"{start} -> {end}", part))
    for kind, label in (("gpus", "n -> 2n GPUs (every public source)"), ("intra_node_link", "PCIe <-> NVLink (every public source)")):
        part = pairs[(pairs["kind"] == kind) & (pairs["source"] != "testbed")]
        if len(part):
            records.append(_speedup_record(label, part))
    return pd.DataFrame(records)


def _speedup_record(label: str, part: pd.DataFrame) -> dict:
    measured = part["measured_speedup"].to_numpy()
    record = {"what-if": label, "pairs": len(part), "measured_mean": float(np.mean(measured))}
    for overlap in OVERLAP_STRATEGIES:
        predicted = part[f"{overlap}_speedup"].to_numpy()
        record[f"{overlap}_mean"] = float(np.mean(predicted))
        record[f"{overlap}_mape"] = float(np.mean(np.abs(predicted / measured - 1)))
    return record


def held_out_tables(ds: Dataset) -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """Held-out MAPE of the roofline physics and the baselines: one row per protocol, and per group."""
    problem = PhysicsProblem(ds.resolved, np.exp(ds.log_measured_s), cv_groups(ds.runs))
    protocols = held_out_protocols(problem, ds.runs, ds.breakdown.additive_s, ds.breakdown.overlapped_s)
    overall, per_group = [], []
    for protocol in protocols:
        record = {"protocol": protocol.name, "runs": len(protocol.groups)}
        record.update({f"{method} mape": float(np.nanmean(ape)) for method, ape in protocol.ape.items()})
        overall.append(record)
        for group in sorted(set(protocol.groups)):
            rows = protocol.groups == group
            item = {"protocol": protocol.name, "held out": group, "runs": int(rows.sum())}
            item.update({f"{method} mape": float(np.nanmean(ape[rows])) for method, ape in protocol.ape.items()})
            per_group.append(item)
    return pd.DataFrame(overall), pd.DataFrame(per_group), protocols


def constants_table() -> pd.DataFrame:
    from features.mechanisms import PHYSICS_CONSTANTS, physics_constants

    k = physics_constants()
    return pd.DataFrame([{"constant": name, "value": float(getattr(k, name)), "meaning": PHYSICS_CONSTANTS[name]} for name in PHYSICS_CONSTANTS])


def refit_shipped_constants(runs: pd.DataFrame) -> None:
    """Fit the physics' constants on every GPU run and store them as the shipped ones."""
    ds = build_dataset(runs)
    problem = PhysicsProblem(ds.resolved, np.exp(ds.log_measured_s), cv_groups(ds.runs))
    constants = fit_shipped_constants(problem, ds.runs)
    n = int(fit_rows(ds.runs).sum())
    write_constants(
        constants,
        f"fitted by `predict physics-report --refit-constants` on {n} GPU runs (every public source; "
        "Nelder-Mead on the physics' MAPE, each GPU type or benchmark counting as the square root of its runs, with a weak prior on the catalogue scales, training.physics_fit)",
    )


def write_physics_report(runs: pd.DataFrame, out_dir: Path, refit_constants: bool = False) -> Path:
    """report.md and PNGs in ``out_dir``; ``refit_constants`` first refits and stores the shipped physics constants."""
    if refit_constants:
        refit_shipped_constants(runs)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ds = build_dataset(runs)
    testbed = ds.runs["source"].eq("testbed").to_numpy()
    sections = [
        "# The analytical model against measured runs\n",
        f"{len(ds)} runs. APE = |predicted / measured - 1|. `none` is the PAI additive model, "
        "`overlapped` the roofline-and-overlap form (see `features/analytical.py`), `roofline` the op-class "
        "roofline physics with launches, host overhead, bucketed overlap and NCCL ring/tree collectives "
        "(`features/physics.py`). Below the held-out section, `roofline` runs with the shipped constants, "
        "fitted on all GPU runs: those figures are in-sample for every public source (the testbed's CPU host "
        "uses none of them).\n",
    ]
    overall, per_group, _ = held_out_tables(ds)
    sections += [
        "## Roofline physics, held out\n\n"
        "Each group's runs are predicted with constants fitted without them (for Lambda: without any run of "
        "that GPU type; for MLPerf: without any run of that benchmark), on the other GPU runs of every public source. "
        "PAI additive and overlapped have nothing fitted; the naive baseline is PAI additive times the median "
        "measured/additive ratio of the same training runs.\n\n" + markdown_table(overall),
        "### By held-out group\n\n" + markdown_table(per_group),
        "### Shipped constants\n\n" + markdown_table(constants_table()),
        "## By source\n\n" + markdown_table(error_table(ds, ["source"])),
        "## By source and architecture\n\n" + markdown_table(error_table(ds, ["source", "architecture"])),
    ]
    if testbed.any():
        sections.append("## Testbed, by architecture and tier\n\n" + markdown_table(error_table(ds.subset(testbed), ["architecture", "network"])))
        sections.append("## Testbed, by model\n\n" + markdown_table(error_table(ds.subset(testbed), ["model"])))
    lambda_rows = ds.runs["source"].eq("lambdal/deeplearning-benchmark").to_numpy()
    if lambda_rows.any():
        sections.append("## Lambda, by GPU\n\n" + markdown_table(error_table(ds.subset(lambda_rows), ["gpu"])))
        sections.append("## Lambda, by model\n\n" + markdown_table(error_table(ds.subset(lambda_rows), ["model"])))
    pairs = speedup_pairs(ds)
    sections.append("## Speedups: measured against analytical\n\n" + markdown_table(speedup_table(pairs)))

    fig, axes = plt.subplots(1, len(OVERLAP_STRATEGIES), figsize=(5.5 * len(OVERLAP_STRATEGIES), 5))
    for ax, overlap in zip(axes, OVERLAP_STRATEGIES):
        for source in sorted(set(ds.runs["source"])):
            rows = ds.runs["source"].eq(source).to_numpy()
            ax.scatter(np.exp(ds.log_measured_s[rows]), ds.breakdown.step_time_s(overlap)[rows], s=6, alpha=0.5, label=source)
        lims = [np.exp(ds.log_measured_s).min() / 2, np.exp(ds.log_measured_s).max() * 2]
        ax.plot(lims, lims, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured step time (s)")
        ax.set_ylabel(f"analytical step time, {overlap} (s)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "measured-vs-analytical.png", dpi=110)
    plt.close(fig)
    sections.append("![measured against analytical](measured-vs-analytical.png)\n")

    shown = pairs[pairs["kind"].isin(["network", "architecture"])]
    if len(shown):
        fig, ax = plt.subplots(figsize=(5.5, 5))
        for kind in ("network", "architecture"):
            part = shown[shown["kind"] == kind]
            ax.scatter(part["measured_speedup"], part["none_speedup"], s=8, alpha=0.6, label=f"{kind} (PAI additive)")
        lims = [min(shown["measured_speedup"].min(), shown["none_speedup"].min()) / 1.2,
                max(shown["measured_speedup"].max(), shown["none_speedup"].max()) * 1.2]
        ax.plot(lims, lims, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured speedup")
        ax.set_ylabel("analytical speedup")
        ax.set_title("Testbed what-ifs: tier changes and PS/Worker vs AllReduce", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / "speedups.png", dpi=110)
        plt.close(fig)
        sections.append("![speedups](speedups.png)\n")
    path = out_dir / "report.md"
    path.write_text("\n".join(sections))
    return path
