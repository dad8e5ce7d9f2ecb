"""The Dask engine: a fleet's partitions scored in parallel with the local engine's function."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

from features.errors import SpecError
from predictor.fleet_input import read_fleet_dask
from predictor.fleet_scoring import score_frame

def iter_scored_dask(
    path: str | Path,
    to: Sequence[str] = (),
    overlap: str = "none",
    scheduler: str | None = None,
    n_workers: int = 2,
    progress: bool | None = None,
    model: str = "default",
    confidence_level: float = 0.9,
    explain: bool | str = False,
) -> Iterator[pd.DataFrame]:
    """The Dask engine: :func:`score_frame` on every partition, handed back in order.

    Runs on the scheduler at ``scheduler`` or, by default, on a local cluster
    of ``n_workers`` worker processes. Partitions are scored in parallel and
    fetched one at a time, so the caller holds one partition at once.
    """
    from dask.distributed import Client, LocalCluster
    from tqdm import tqdm

    fleet = read_fleet_dask(path)
    meta = score_frame(fleet._meta, to, overlap, model, confidence_level, explain)
    scored = fleet.map_partitions(score_frame, list(to), overlap, model, confidence_level, explain, meta=meta)
    if scheduler:
        cluster = None
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        parts = scored.to_delayed()
        futures = client.compute(parts)
        show = len(futures) > 1 if progress is None else progress
        with tqdm(total=len(futures), unit="partitions", disable=not show, desc="scoring", leave=False) as bar:
            for future in futures:
                try:
                    part = future.result()
                except ValueError as exc:
                    if "Mismatched dtypes" not in str(exc):
                        raise
                    raise SpecError("--jobs", str(path), "column types differ between blocks of the CSV; convert it to Parquet") from None
                future.release()
                bar.update(1)
                yield part
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def score_fleet_dask(
    path: str | Path,
    to: Sequence[str] = (),
    overlap: str = "none",
    scheduler: str | None = None,
    n_workers: int = 2,
    model: str = "default",
    confidence_level: float = 0.9,
    explain: bool | str = False,
) -> pd.DataFrame:
    """Every row of the fleet at ``path`` scored with Dask, as one frame (index 0..n-1)."""
    parts = iter_scored_dask(path, to, overlap, scheduler, n_workers, None, model, confidence_level, explain)
    return pd.concat(list(parts)).reset_index(drop=True)
