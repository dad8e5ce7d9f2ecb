"""Emulated network tiers: a per-host NIC rate enforced with a ``tc`` token bucket.

A tier is written the way ``tc`` writes rates, ``100m`` (100 Mbit/s) or ``4g``
(4 Gbit/s), and names the link ``emulated-<rate>`` in the hardware catalogue
and in the run table. 250 Mbit/s and 1 Gbit/s stand in for 25 and 100 Gbit/s
Ethernet at a hundredth of the rate: the 4x ratio is what the testbed keeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from features.errors import SpecError
from features.units import mbit_per_s_to_bytes_per_s

_TIER = re.compile(r"^(?:emulated-)?(\d+(?:\.\d+)?)([mg])(?:bit)?$")
_MBIT_PER_UNIT = {"m": 1.0, "g": 1000.0}

#: Bytes the token bucket may send back to back at line speed. One 64 KiB
#: segmentation-offload packet must fit; larger bursts would let a whole
#: gradient message pass unthrottled at the faster tiers.
MIN_BURST_BYTES = 64 * 1024
#: Burst allowance as time at the tier's rate (1 ms), used when larger than the minimum.
BURST_S = 1e-3
#: Queue in front of the bucket, as time at the tier's rate, with a floor.
#: Many senders into one parameter server share this queue, like a switch
#: port's buffer; a deep queue avoids TCP loss stalls that would measure the
#: retransmission timer rather than the link.
QUEUE_S = 0.5
MIN_QUEUE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, order=True)
class Tier:
    """A per-host NIC rate, in each direction, in Mbit/s."""

    rate_mbit_per_s: float

    @property
    def label(self) -> str:
        """The rate as ``tc`` spells it: ``250m``, ``1g``, ``2.5g``."""
        rate = self.rate_mbit_per_s
        if rate >= 1000:
            return f"{_compact(rate / 1000)}g"
        return f"{_compact(rate)}m"

    @property
    def link_name(self) -> str:
        """The catalogue and run-table name of the link, ``emulated-250m``."""
        return f"emulated-{self.label}"

    @property
    def bw_bytes_per_s(self) -> float:
        return mbit_per_s_to_bytes_per_s(self.rate_mbit_per_s)

    @property
    def tc_rate(self) -> str:
        """The rate argument of ``tc qdisc ... tbf rate``."""
        return f"{_compact(self.rate_mbit_per_s)}mbit"

    @property
    def burst_bytes(self) -> int:
        return max(MIN_BURST_BYTES, int(self.bw_bytes_per_s * BURST_S))

    @property
    def queue_bytes(self) -> int:
        return max(MIN_QUEUE_BYTES, int(self.bw_bytes_per_s * QUEUE_S))

    def tbf_args(self) -> list[str]:
        """Arguments after ``tc qdisc add|change dev DEV root``."""
        return ["tbf", "rate", self.tc_rate, "burst", str(self.burst_bytes), "limit", str(self.queue_bytes)]

    def describe(self) -> str:
        """Provenance text: the exact qdisc the collector installs."""
        return f"tc qdisc tbf {' '.join(self.tbf_args()[1:])} on both ends of each host's veth pair"


def _compact(value: float) -> str:
    return f"{value:g}"


def parse_tier(text: str) -> Tier:
    """``"250m"``, ``"1g"``, ``"emulated-4g"`` or ``"100mbit"`` to a :class:`Tier`."""
    match = _TIER.match(str(text).strip().lower())
    if match is None:
        raise SpecError("tier", text, "a rate like 100m, 250m, 1g or 4g (Mbit/s or Gbit/s), optionally as emulated-<rate>")
    rate_mbit_per_s = float(match.group(1)) * _MBIT_PER_UNIT[match.group(2)]
    if rate_mbit_per_s <= 0:
        raise SpecError("tier", text, "a positive rate")
    return Tier(rate_mbit_per_s)


def parse_tiers(texts: list[str] | tuple[str, ...] | str) -> tuple[Tier, ...]:
    """A comma-separated list or a sequence of tiers, sorted slowest first, duplicates dropped."""
    if isinstance(texts, str):
        texts = [t for t in texts.split(",") if t.strip()]
    return tuple(sorted({parse_tier(t) for t in texts}))
