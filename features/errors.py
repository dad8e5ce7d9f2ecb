"""The domain exception raised for bad user input."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from functools import lru_cache


#: Stands for a value that was not given at all.
MISSING = type("Missing", (), {"__repr__": lambda self: "missing"})()


#: A bad value longer than this is shown by its start and its length: the message stays one readable line.
SHOWN_VALUE_CHARS = 80


def shown(value: object) -> str:
    """``repr(value)``, cut to its first :data:`SHOWN_VALUE_CHARS` characters with the full length said."""
    text = repr(value)
    if len(text) <= SHOWN_VALUE_CHARS:
        return text
    length = f" ({len(str(value)):,} characters)" if isinstance(value, str) else ""
    return f"{text[:SHOWN_VALUE_CHARS]}...{length}"


class SpecError(ValueError):
    """A job, fleet row, scenario or catalogue name that cannot be used.

    The message names the field path, the bad value and what is allowed, so
    the CLI can print it as one line and exit with code 2.
    """

    def __init__(self, field: str, value: object, allowed: str):
        self.field = field
        self.value = value
        self.allowed = allowed
        if value is MISSING:
            super().__init__(f"{field} is missing; {allowed}")
        else:
            super().__init__(f"{field}: {shown(value)} is not valid; {allowed}")


class UnknownNameError(SpecError):
    """A catalogue name (GPU, link, workload, scenario) that resolves to nothing."""

    def __init__(self, kind: str, field: str, value: object, known: Iterable[str], preferred: Iterable[str] = (), listed: int | None = 12):
        known = list(known)
        close = nearest_names(str(value), known, preferred=preferred)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(sorted(known)[:listed])}"
        self.field = field
        self.value = value
        self.allowed = hint
        ValueError.__init__(self, f"unknown {kind} {shown(value)} at {field}; {hint}")


#: Characters of a bad name compared against the known ones: difflib's cost grows with the length,
#: and no catalogue name is longer.
NAME_COMPARED_CHARS = 64


def nearest_names(value: str, known: Iterable[str], n: int = 3, preferred: Iterable[str] = ()) -> list[str]:
    """Up to ``n`` known names closest to ``value``, compared case-insensitively.

    Names sharing a prefix with ``value`` ("v10" and "V100-...") come first,
    ``preferred`` ones (a family's default variant) ahead of their siblings.
    A fleet repeats its bad names row after row: each distinct one is matched once.
    """
    return list(_nearest_names(str(value)[:NAME_COMPARED_CHARS], tuple(known), n, tuple(preferred)))


@lru_cache(maxsize=4096)
def _nearest_names(value: str, known: tuple[str, ...], n: int, preferred: tuple[str, ...]) -> tuple[str, ...]:
    by_lower: dict[str, str] = {}
    for name in known:
        by_lower.setdefault(name.lower(), name)
    lowered = value.lower()
    first = {name.lower() for name in preferred}
    close = difflib.get_close_matches(lowered, list(by_lower), n=n, cutoff=0.5)
    prefixed = [k for k in by_lower if k.startswith(lowered[: max(2, len(lowered) - 1)])]
    prefixed.sort(key=lambda k: (k not in first, -difflib.SequenceMatcher(None, lowered, k).ratio(), k))
    ordered = list(dict.fromkeys(prefixed + close))[:n]
    return tuple(by_lower[k] for k in ordered)


class RowError(SpecError):
    """A row's recorded validation message, raised again for a single job."""

    def __init__(self, message: str):
        self.field = message.split(":", 1)[0].split(" ")[0]
        self.value = None
        self.allowed = ""
        ValueError.__init__(self, message)
