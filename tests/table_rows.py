"""Writing hand-made source tables for the importer tests."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd


def write_rows(path: Path, header: list[str], rows: list[dict]) -> Path:
    """A CSV with ``header`` and one line per row (columns a row leaves out are empty)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        for row in rows:
            unknown = set(row) - set(header)
            assert not unknown, unknown
            writer.writerow({k: row.get(k, "") for k in header})
    return path


def reasons(excluded: pd.DataFrame, key: str) -> dict[str, str]:
    """Each excluded row's reason, keyed by one of its source columns."""
    return dict(zip(excluded[key], excluded["reason"]))
