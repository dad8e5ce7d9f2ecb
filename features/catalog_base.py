"""What the hardware and workload catalogues share: files, provenance and name lookup."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from features.errors import UnknownNameError

CATALOG_DIR = Path(__file__).parent / "catalog"

#: How a catalogue value was obtained.
PROVENANCE_KINDS = ("datasheet", "measured", "counted", "published", "configured", "estimated")

_VENDOR_PREFIXES = ("nvidia ", "tesla ", "geforce ", "quadro ")
_SEPARATORS = re.compile(r"[\s_\-/]+")


def normalize_name(name: str) -> str:
    """Canonical lookup key: lower case, vendor prefix dropped, separators as '-'.

    "NVIDIA Tesla V100-SXM2-16GB", "tesla v100 sxm2 16gb" and "V100_SXM2_16GB"
    all give "v100-sxm2-16gb".
    """
    key = name.strip().lower()
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix):]
                changed = True
    return _SEPARATORS.sub("-", key).strip("-")


def read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


T = TypeVar("T")


class NameIndex(Generic[T]):
    """Case- and separator-insensitive lookup of catalogue entries by name or alias."""

    def __init__(self, kind: str, entries: Iterable[tuple[str, Iterable[str], T]], preferred: Iterable[str] = ()):
        self.kind = kind
        self.preferred = tuple(preferred)
        self._by_name: dict[str, T] = {}
        self._by_key: dict[str, T] = {}
        for name, aliases, entry in entries:
            if name in self._by_name:
                raise ValueError(f"duplicate {kind} {name!r} in the catalogue")
            self._by_name[name] = entry
            for alias in (name, *aliases):
                key = normalize_name(alias)
                other = self._by_key.get(key)
                if other is not None and other is not entry:
                    raise ValueError(f"{kind} alias {alias!r} names two catalogue entries")
                self._by_key[key] = entry

    def get(self, name: str, field: str) -> T:
        """The entry called ``name``; ``UnknownNameError`` naming ``field`` otherwise."""
        entry = self._by_key.get(normalize_name(str(name)))
        if entry is None:
            raise UnknownNameError(self.kind, field, name, self._by_name, self.preferred)
        return entry

    def find(self, name: str) -> T | None:
        return self._by_key.get(normalize_name(str(name)))

    def names(self) -> list[str]:
        return list(self._by_name)

    def __iter__(self) -> Iterator[T]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalize_name(name) in self._by_key
