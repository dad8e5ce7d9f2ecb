"""A structural check of a UBJSON file before XGBoost reads it.

XGBoost's UBJSON reader trusts the counts a file declares: a booster file cut
in half can declare an array of billions of elements, and loading it then
allocates until the machine runs out of memory instead of failing. This
module walks the file's structure (UBJSON draft 12, the subset XGBoost
writes and reads: big-endian numbers, strings, optimised containers with a
``$`` type and a ``#`` count) without decoding it, and says what is wrong:
a value that runs past the end of the file, a count larger than the bytes
left could hold, an unknown type marker, nesting deeper than any model's, or
bytes after the end. What passes is bounded by the file's size, so XGBoost's
own reading of it is too.
"""

from __future__ import annotations

#: Payload bytes of the fixed-size types.
_SIZES = {"i": 1, "U": 1, "I": 2, "l": 4, "L": 8, "d": 4, "D": 8, "C": 1}
#: Integer types, which also give lengths and counts.
_INTEGERS = ("i", "U", "I", "l", "L")
#: Types without a payload.
_EMPTY = ("Z", "T", "F")
#: XGBoost's models nest a handful of levels (learner, booster, trees, tree); far deeper is not a model.
MAX_DEPTH = 32


class _Malformed(Exception):
    pass


def ubjson_problem(data: bytes) -> str | None:
    """What makes ``data`` not one well-formed UBJSON value (None when it is one)."""
    try:
        end = _value(data, 0, None, 0)
    except _Malformed as exc:
        return str(exc)
    except RecursionError:
        return "nested too deep"
    if end != len(data):
        return f"{len(data) - end} bytes follow the end of the model"
    return None


def _need(data: bytes, pos: int, size: int) -> None:
    if pos + size > len(data):
        raise _Malformed(f"the file ends inside a value at byte {pos} (truncated?)")


def _marker(data: bytes, pos: int) -> tuple[str, int]:
    while True:
        _need(data, pos, 1)
        marker = chr(data[pos])
        if marker != "N":  # no-op padding
            return marker, pos + 1
        pos += 1


def _length(data: bytes, pos: int) -> tuple[int, int]:
    """A length or count: an integer value with its own type marker, at least 0."""
    marker, pos = _marker(data, pos)
    if marker not in _INTEGERS:
        raise _Malformed(f"a length of type {marker!r} at byte {pos - 1}")
    size = _SIZES[marker]
    _need(data, pos, size)
    value = int.from_bytes(data[pos : pos + size], "big", signed=marker != "U")
    if value < 0:
        raise _Malformed(f"a negative length at byte {pos}")
    return value, pos + size


def _value(data: bytes, pos: int, marker: str | None, depth: int) -> int:
    """The position after the value at ``pos`` (whose type marker is ``marker`` when a typed container gave it)."""
    if marker is None:
        marker, pos = _marker(data, pos)
    if marker in _SIZES:
        _need(data, pos, _SIZES[marker])
        return pos + _SIZES[marker]
    if marker in _EMPTY:
        return pos
    if marker in ("S", "H"):
        length, pos = _length(data, pos)
        _need(data, pos, length)
        return pos + length
    if marker in ("[", "{"):
        if depth >= MAX_DEPTH:
            raise _Malformed("nested too deep")
        return _container(data, pos, marker == "{", depth + 1)
    raise _Malformed(f"unknown type marker {marker!r} at byte {pos - 1}")


def _container(data: bytes, pos: int, is_object: bool, depth: int) -> int:
    element_type = count = None
    if pos < len(data) and data[pos] == ord("$"):
        _need(data, pos, 2)
        element_type = chr(data[pos + 1])
        if element_type not in _SIZES and element_type not in _EMPTY + ("S", "H", "[", "{"):
            raise _Malformed(f"unknown element type {element_type!r} at byte {pos + 1}")
        pos += 2
        if pos >= len(data) or data[pos] != ord("#"):
            raise _Malformed(f"a typed container without a count at byte {pos}")
    if pos < len(data) and data[pos] == ord("#"):
        count, pos = _length(data, pos + 1)
    if count is not None:
        left = len(data) - pos
        if element_type in _SIZES and not is_object:
            if count * _SIZES[element_type] > left:
                raise _Malformed(f"an array of {count:,} values of {_SIZES[element_type]} bytes in the {left:,} bytes left")
            return pos + count * _SIZES[element_type]
        if count > left:  # every element (or key) takes a byte at least
            raise _Malformed(f"a container of {count:,} items in the {left:,} bytes left")
        for _ in range(count):
            if is_object:
                pos = _key(data, pos)
            pos = _value(data, pos, element_type, depth)
        return pos
    close = ord("}") if is_object else ord("]")
    while True:
        _need(data, pos, 1)
        if data[pos] == close:
            return pos + 1
        if is_object:
            pos = _key(data, pos)
        pos = _value(data, pos, None, depth)


def _key(data: bytes, pos: int) -> int:
    length, pos = _length(data, pos)
    _need(data, pos, length)
    return pos + length
