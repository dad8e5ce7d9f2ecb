"""Writing a scored fleet: one Parquet or CSV file, replaced atomically."""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from features.errors import SpecError
from predictor.fleet_input import fleet_format

try:
    import fcntl
except ImportError:  # not POSIX: no locks, so no sweeping of temporary files either
    fcntl = None

def write_atomic(chunks: Iterable[pd.DataFrame] | pd.DataFrame, path: str | Path, row_group_rows: int | None = None) -> int:
    """Write frames (one or a stream of chunks) to ``path`` as one Parquet or CSV file; the row count.

    Everything goes to a temporary file in the same directory, which is
    flushed, fsynced and then renamed over ``path`` (``os.replace``, atomic on
    POSIX): an interrupted run leaves the old file as it was and no partial
    file. The writer holds a lock on its temporary file, so a run killed
    before it could clean up leaves one that the next write to ``path``
    removes (a temporary file still locked belongs to a run in progress and
    is left alone). The file gets the mode a new file gets under the umask.
    Parquet row groups follow the chunks (or ``row_group_rows``).
    """
    path = Path(path)
    kind = fleet_format(path, "--out")
    if isinstance(chunks, pd.DataFrame):
        frame = chunks
        step = row_group_rows or max(len(frame), 1)
        chunks = (frame.iloc[i : i + step] for i in range(0, max(len(frame), 1), step))
    if not path.parent.is_dir():
        raise SpecError("--out", str(path), f"the directory {path.parent} does not exist")
    remove_stale_temporaries(path)
    try:
        descriptor, temporary, lock = _locked_temporary(path)
    except OSError as exc:  # the directory refuses new files (/proc, a read-only mount)
        raise SpecError("--out", str(path), f"cannot create a file in {path.parent} ({exc.strerror or exc})") from None
    rows = 0
    try:
        with os.fdopen(descriptor, "wb") as handle:
            rows = _write_parquet(chunks, handle) if kind == "parquet" else _write_csv(chunks, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:  # a full disk, a quota: the old file stays as it was
        Path(temporary).unlink(missing_ok=True)
        raise SpecError("--out", str(path), f"cannot write it ({exc.strerror or exc}); the old file, if any, is unchanged") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    _fsync_directory(path.parent)
    return rows


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}."


def _locked_temporary(path: Path) -> tuple[int, str, int | None]:
    """A new temporary file next to ``path``, with the mode the umask gives, locked for this run.

    The lock lives on a second descriptor of the same open file, so it holds
    until the rename is done, after the writing handle is closed.
    """
    while True:
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=_temporary_prefix(path), suffix=".tmp")
        try:
            os.fchmod(descriptor, 0o666 & ~_umask())
        except (AttributeError, OSError):
            pass
        if fcntl is None:
            return descriptor, temporary, None
        lock = os.dup(descriptor)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.fstat(descriptor).st_nlink:
            return descriptor, temporary, lock
        # Another run swept it between its creation and the lock: take a new one.
        os.close(lock)
        os.close(descriptor)


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporary files of earlier writes to ``path`` that no run holds any more; those removed."""
    if fcntl is None:
        return []
    path = Path(path)
    removed = []
    for candidate in path.parent.glob(glob.escape(_temporary_prefix(path)) + "*.tmp"):
        try:
            descriptor = os.open(candidate, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)  # locked: a run in progress writes it
            continue
        try:
            candidate.unlink()
            removed.append(candidate)
        except OSError:
            pass
        finally:
            os.close(descriptor)
    return removed


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_parquet(chunks: Iterable[pd.DataFrame], handle) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from concurrent.futures import ThreadPoolExecutor

    writer = None
    schema = None
    rows = 0
    pending = None
    # pyarrow encodes and compresses without the GIL: one chunk is written
    # while the next is scored.
    with ThreadPoolExecutor(max_workers=1) as background:
        try:
            for chunk in chunks:
                table = pa.Table.from_pandas(chunk, preserve_index=False)
                if schema is None:
                    schema = table.schema
                    writer = pq.ParquetWriter(handle, schema)
                elif not table.schema.equals(schema, check_metadata=False):
                    table = table.cast(schema)
                if pending is not None:
                    pending.result()
                pending = background.submit(writer.write_table, table.replace_schema_metadata(schema.metadata))
                rows += len(chunk)
            if pending is not None:
                pending.result()
        finally:
            if pending is not None:
                pending.exception()  # wait: the writer must be idle before it is closed
            if writer is not None:
                writer.close()
    if writer is None:
        raise ValueError("no rows to write")
    return rows


def _write_csv(chunks: Iterable[pd.DataFrame], handle) -> int:
    import io

    text = io.TextIOWrapper(handle, encoding="utf-8", newline="", write_through=True)
    rows = 0
    header = True
    for chunk in chunks:
        chunk.to_csv(text, header=header, index=False)
        header = False
        rows += len(chunk)
    text.flush()
    text.detach()
    return rows


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
