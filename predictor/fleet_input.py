"""Reading a fleet table (Parquet or CSV), in process or as Dask partitions, and its first checks."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from features.errors import SpecError

FLEET_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
#: Rows named in a warning about text that is not UTF-8.
SHOWN_ROWS = 5


class FleetInputWarning(UserWarning):
    """Something in a fleet table was read, but not exactly as written (the CLI prints it)."""


def fleet_format(path: Path, field: str) -> str:
    """``parquet`` or ``csv`` from the file name; anything else is a ``SpecError``."""
    kind = FLEET_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise SpecError(field, str(path), "allowed: a .parquet (or .pq) or .csv file")
    return kind


def read_fleet(path: str | Path) -> pd.DataFrame:
    """The fleet table at ``path`` (Parquet or CSV), checked to have at least a ``gpu`` column."""
    path = Path(path)
    kind = fleet_format(path, "--jobs")
    if not path.is_file():
        raise SpecError("--jobs", str(path), "no such file")
    try:
        if kind == "parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, engine="pyarrow")
    except Exception as exc:  # pyarrow and pandas raise many types for a file they cannot parse
        raise SpecError("--jobs", str(path), f"cannot read it as {kind.upper()} ({type(exc).__name__}: {first_line(exc)})") from None
    check_fleet_columns(frame.columns, path)
    decode_text_columns(frame, path)
    return frame


def decode_text_columns(frame: pd.DataFrame, path: str | Path) -> None:
    """Text columns that were read as raw bytes turned back into text, in place.

    One value that is not UTF-8 makes the readers keep its whole column as
    bytes. Each value that is valid UTF-8 is decoded exactly; only a row whose bytes
    are not gets U+FFFD in place of each bad byte, with a
    :class:`FleetInputWarning` naming the column and the rows.
    """
    for column in frame.columns:
        series = frame[column]
        if series.dtype != object:
            continue
        values = series.to_numpy()
        raw = np.fromiter((isinstance(v, (bytes, bytearray)) for v in values), bool, len(values))
        if not raw.any():
            continue
        text = values.copy()
        replaced = []
        for i in np.flatnonzero(raw):
            try:
                text[i] = bytes(values[i]).decode("utf-8")
            except UnicodeDecodeError:
                text[i] = bytes(values[i]).decode("utf-8", errors="replace")
                replaced.append(int(i))
        frame[column] = pd.array(text, dtype="str")
        if replaced:
            rows = ", ".join(map(str, replaced[:SHOWN_ROWS])) + (f" and {len(replaced) - SHOWN_ROWS:,} more" if len(replaced) > SHOWN_ROWS else "")
            warnings.warn(
                f"--jobs: {path}: column {column} is not UTF-8 in row {rows}; the bad bytes are replaced by U+FFFD in "
                f"{'that row' if len(replaced) == 1 else 'those rows'} only",
                FleetInputWarning,
                stacklevel=3,
            )


def check_fleet_columns(columns: Iterable[str], path: str | Path) -> None:
    """A fleet needs a ``gpu`` column; any other job column may be left out (its default applies)."""
    columns = list(columns)
    if "gpu" not in columns:
        shown = ", ".join(map(str, columns[:12])) + (" ..." if len(columns) > 12 else "")
        raise SpecError("--jobs", str(path), f"a fleet table needs a gpu column; its columns: {shown or 'none'}")


def first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def read_fleet_dask(path: str | Path, blocksize: str | int | None = "default"):
    """The fleet as a Dask DataFrame: Parquet one partition per row group, CSV per ``blocksize`` bytes.

    Text columns keep pandas' own string type, as the local engine reads
    them. Parquet stores column types; a CSV's are guessed from its first
    block, so Parquet is the safer input for large fleets.
    """
    import dask
    import dask.dataframe as dd

    path = Path(path)
    kind = fleet_format(path, "--jobs")
    if not path.exists():
        raise SpecError("--jobs", str(path), "no such file")
    try:
        with dask.config.set({"dataframe.convert-string": False}):
            if kind == "parquet":
                frame = dd.read_parquet(str(path), split_row_groups=True)
            else:
                frame = dd.read_csv(str(path), blocksize=blocksize)
    except Exception as exc:
        raise SpecError("--jobs", str(path), f"cannot read it as {kind.upper()} ({type(exc).__name__}: {first_line(exc)})") from None
    check_fleet_columns(frame.columns, path)
    return frame
