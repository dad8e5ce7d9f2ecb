"""Checks on where a command writes, made before any work: a bad ``--out`` or ``--plot`` is one clear error.

Nothing here creates directories on the user's behalf for a single output
file: a typo in ``--plot /no/such/dir/x.png`` is reported, not turned into a
new directory tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from features.errors import SpecError

#: The files a model directory written by this tool holds (see :mod:`predictor.artefact`).
MODEL_FILES = frozenset({"booster.ubj", "calibration.json", "metadata.json", "model_card.md"})


def output_file(path: str | Path, field: str) -> Path:
    """``path`` as a file this process can write: not a directory, in an existing writable directory."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(field, str(path), "is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise SpecError(field, str(path), f"directory {parent} does not exist; create it first")
    if not parent.is_dir():
        raise SpecError(field, str(path), f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SpecError(field, str(path), "is not writable; choose a path you may write to")
    return path


#: Image formats a figure is written in, chosen by the file's extension.
IMAGE_SUFFIXES = (".png", ".svg", ".pdf")


def image_file(path: str | Path, field: str) -> Path:
    """``path`` as an image file this process can write (:func:`output_file`), its format named by its extension."""
    path = output_file(path, field)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise SpecError(field, str(path), f"give a file name ending in {', '.join(IMAGE_SUFFIXES)}")
    return path


def output_dir(path: str | Path, field: str) -> Path:
    """``path`` as a directory this process can create or write into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SpecError(field, str(path), "is a file; give a directory")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(field, str(path), f"is not writable ({existing} does not accept new files)")
    return path


def model_output_dir(path: str | Path, field: str) -> Path:
    """A directory to write a model into: new, empty, or a model directory this tool wrote (its files are replaced).

    Anything else (``--out .``, a home directory, a report folder) is refused
    rather than overwritten.
    """
    path = output_dir(path, field)
    if path.is_dir():
        entries = {entry.name for entry in path.iterdir()}
        if entries and not (entries <= MODEL_FILES and "metadata.json" in entries):
            raise SpecError(
                field, str(path),
                "is not empty and is not a model directory written by predict; give a new or empty directory",
            )
    return path
