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


#: Per byte value: the payload size of a fixed-size type marker (0 where it is not one).
_SIZE = bytes(_SIZES.get(chr(b), 0) for b in range(256))
_INTEGER_MARKERS = frozenset(ord(m) for m in _INTEGERS)
_EMPTY_MARKERS = frozenset(ord(m) for m in _EMPTY)
_STRING_MARKERS = frozenset(b"SH")
_ELEMENT_TYPES = frozenset(b"iUIlLdDCZTFSH[{")
_NOOP, _TYPED, _COUNTED, _ARRAY, _OBJECT, _END_ARRAY, _END_OBJECT, _UINT8, _INT64 = b"N$#[{]}UL"


def ubjson_problem(data: bytes) -> str | None:
    """What makes ``data`` not one well-formed UBJSON value (None when it is one).

    One pass with an explicit stack of open containers (a booster holds
    thousands of small ones, so no call per value).
    """
    try:
        end = _walk(data)
    except _Malformed as exc:
        return str(exc)
    if end != len(data):
        return f"{len(data) - end} bytes follow the end of the model"
    return None


def _truncated(pos: int) -> _Malformed:
    return _Malformed(f"the file ends inside a value at byte {pos} (truncated?)")


def _length(data: bytes, pos: int) -> tuple[int, int]:
    """A length or count at ``pos``: an integer value with its own type marker, at least 0."""
    n = len(data)
    while pos < n and data[pos] == _NOOP:
        pos += 1
    if pos >= n:
        raise _truncated(pos)
    marker = data[pos]
    if marker not in _INTEGER_MARKERS:
        raise _Malformed(f"a length of type {chr(marker)!r} at byte {pos}")
    size = _SIZE[marker]
    pos += 1
    if pos + size > n:
        raise _truncated(pos)
    value = int.from_bytes(data[pos : pos + size], "big", signed=marker != _UINT8)
    if value < 0:
        raise _Malformed(f"a negative length at byte {pos}")
    return value, pos + size


def _skip_sized(data: bytes, pos: int) -> int:
    """The position after a length at ``pos`` and the bytes it counts (a key's or a string's)."""
    n = len(data)
    if pos + 9 <= n and data[pos] == _INT64:  # XGBoost writes every length as int64: the common case first
        length = int.from_bytes(data[pos + 1 : pos + 9], "big", signed=True)
        pos += 9
        if length < 0:
            raise _Malformed(f"a negative length at byte {pos - 8}")
    else:
        length, pos = _length(data, pos)
    if pos + length > n:
        raise _truncated(pos)
    return pos + length


def _walk(data: bytes) -> int:
    """The position after the one value at the start of ``data``."""
    n = len(data)
    pos = 0
    # Open containers, innermost last: [is object, items left (-1: until its closing marker), element type (-1: each its own)].
    stack: list[list] = []
    while True:
        element_type = -1
        if stack:
            frame = stack[-1]
            if frame[1] == 0:
                stack.pop()
                if not stack:
                    return pos
                continue
            if frame[1] < 0:
                if pos >= n:
                    raise _truncated(pos)
                if data[pos] == (_END_OBJECT if frame[0] else _END_ARRAY):
                    pos += 1
                    stack.pop()
                    if not stack:
                        return pos
                    continue
            else:
                frame[1] -= 1
            if frame[0]:  # the key: a length, then that many bytes
                pos = _skip_sized(data, pos)
            element_type = frame[2]
        # One value.
        if element_type < 0:
            while pos < n and data[pos] == _NOOP:
                pos += 1
            if pos >= n:
                raise _truncated(pos)
            marker = data[pos]
            pos += 1
        else:
            marker = element_type
        size = _SIZE[marker]
        if size:
            if pos + size > n:
                raise _truncated(pos)
            pos += size
        elif marker in _EMPTY_MARKERS:
            pass
        elif marker in _STRING_MARKERS:
            pos = _skip_sized(data, pos)
        elif marker == _ARRAY or marker == _OBJECT:
            if len(stack) >= MAX_DEPTH:
                raise _Malformed("nested too deep")
            pos = _open(data, pos, marker == _OBJECT, stack)
        else:
            raise _Malformed(f"unknown type marker {chr(marker)!r} at byte {pos - 1}")
        if not stack:
            return pos


def _open(data: bytes, pos: int, is_object: bool, stack: list) -> int:
    """Read a container's header at ``pos``; push it, or skip it whole when it is a typed array of fixed-size values."""
    n = len(data)
    element_type = count = -1
    if pos < n and data[pos] == _TYPED:
        if pos + 2 > n:
            raise _truncated(pos)
        element_type = data[pos + 1]
        if element_type not in _ELEMENT_TYPES:
            raise _Malformed(f"unknown element type {chr(element_type)!r} at byte {pos + 1}")
        pos += 2
        if pos >= n or data[pos] != _COUNTED:
            raise _Malformed(f"a typed container without a count at byte {pos}")
    if pos < n and data[pos] == _COUNTED:
        count, pos = _length(data, pos + 1)
        left = n - pos
        size = _SIZE[element_type] if element_type >= 0 else 0
        if size and not is_object:
            if count * size > left:
                raise _Malformed(f"an array of {count:,} values of {size} bytes in the {left:,} bytes left")
            stack.append([False, 0, -1])  # read whole: closes at once
            return pos + count * size
        if count > left:  # every element (or key) takes a byte at least
            raise _Malformed(f"a container of {count:,} items in the {left:,} bytes left")
    stack.append([is_object, count, element_type])
    return pos
