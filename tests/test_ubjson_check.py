"""The UBJSON check that stands before XGBoost's reader: hand-built files, the shipped booster, every cut of it."""

from __future__ import annotations

import pytest

from predictor.artefact import BOOSTER_FILE
from predictor.ubjson_check import MAX_DEPTH, ubjson_problem
from predictor.api import DEFAULT_MODEL_DIR


def test_well_formed_values_pass():
    assert ubjson_problem(b"Z") is None
    assert ubjson_problem(b"{U\x01ai\x05}") is None  # {"a": 5}
    assert ubjson_problem(b"[$d#U\x02" + b"\x00" * 8) is None  # two float32
    assert ubjson_problem(b"{#U\x01U\x03keyS" + b"U\x02hi") is None  # counted object {"key": "hi"}
    assert ubjson_problem(b"[NTF]") is None  # no-op padding, true, false


@pytest.mark.parametrize(
    "data, problem",
    [
        (b"[$d#U\x03" + b"\x00" * 8, "an array of 3 values of 4 bytes in the 8 bytes left"),
        (b"[$d#L" + (2**62).to_bytes(8, "big"), "in the 0 bytes left"),
        (b"[#l" + (10**9).to_bytes(4, "big") + b"ZZ", "a container of 1,000,000,000 items in the 2 bytes left"),
        (b"{U\x05ab", "the file ends inside a value"),
        (b"[i\x01", "the file ends inside a value"),
        (b"{i\xffab}", "a negative length"),
        (b"{L" + (-5).to_bytes(8, "big", signed=True) + b"abS", "a negative length"),
        (b"SL" + (-5).to_bytes(8, "big", signed=True), "a negative length"),
        (b"x", "unknown type marker 'x'"),
        (b'{"a": 1}', "a length of type '\"'"),
        (b"ZZ", "1 bytes follow the end"),
        (b"[$x#U\x01\x00", "unknown element type 'x'"),
        (b"[$d\x00", "a typed container without a count"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested too deep"),
    ],
)
def test_malformed_values_are_named(data, problem):
    assert problem in ubjson_problem(data)


def _shipped() -> bytes:
    path = DEFAULT_MODEL_DIR / BOOSTER_FILE
    if not path.exists():
        pytest.skip("no shipped model")
    return path.read_bytes()


def test_the_shipped_booster_passes_and_every_cut_of_it_fails():
    data = _shipped()
    assert ubjson_problem(data) is None
    step = max(1, len(data) // 2000)
    for cut in range(0, len(data), step):
        assert ubjson_problem(data[:cut]) is not None, cut
