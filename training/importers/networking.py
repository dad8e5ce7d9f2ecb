"""Network and link names from the free text of benchmark submissions.

Shared by the MLPerf importers (``host_networking``, ``accelerator_interconnect``)
and any other source whose systems describe their fabric in words.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from training.importers.common import pcie_link

_LABEL = re.compile(r"^\s*([A-Za-z+ ]+):\s*(.*)$")
_COUNT = re.compile(r"^\s*(\d+)\s*x(?=\b|\d)", re.IGNORECASE)
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*g(?:b|bit)?\s*(?:/\s*s(?:ec)?\b|ps\b)", re.IGNORECASE)
_IB_GENERATIONS = (("hdr100", "infiniband-hdr100"), ("ndr", "infiniband-ndr"), ("hdr", "infiniband-hdr"), ("edr", "infiniband-edr"))
_IB_BY_RATE = {400.0: "infiniband-ndr", 200.0: "infiniband-hdr", 100.0: "infiniband-edr"}
_ETHERNET_RATES = (1.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0)
#: NICs named without a rate: Intel E810-C QSFP controllers are 100GbE parts.
_NIC_RATES = {"e810": 100.0}


def parse_host_networking(text: object) -> tuple[str | None, int | None, str]:
    """The inter-node network link, NICs per node and the rule applied, from MLPerf's free text.

    Rules, in order:

    1. The text is split at commas; a segment labelled "Compute:" is the
       training fabric. Segments labelled only Storage or Management are not;
       a text with nothing else gives no network.
    2. Each remaining segment is read for a NIC count ("8x"), a technology
       (InfiniBand: "IB", "InfiniBand", NDR/HDR/HDR100/EDR; else Ethernet:
       "Ethernet", "GbE", "Gigabit", "Gig") and a rate ("400Gb/s", "100 Gb /
       Sec"; "10GB/Sec" is read as 10 Gb/s, the 10GbE tier). The segment with
       the largest count x rate is the fabric.
    3. InfiniBand: the named generation, else the generation of the rate
       (400 NDR, 200 HDR, 100 EDR). Ethernet: the tier of the rate.
    4. A technology without a rate ("Infiniband", "Ethernet") gives no
       network: guessing a generation would invent the bandwidth the model is
       meant to learn from.
    """
    if text is None or (isinstance(text, float) and np.isnan(text)) or not str(text).strip():
        return None, None, "empty"
    segments = []
    for part in str(text).split(","):
        match = _LABEL.match(part)
        label = match.group(1).strip().lower() if match else ""
        body = match.group(2) if match else part
        segments.append((label, body))
    compute = [body for label, body in segments if "compute" in label]
    if compute:
        candidates = compute
    else:
        candidates = [body for label, body in segments if not label or not re.search(r"storage|management", label)]
    if not candidates:
        return None, None, "only a management or storage network"
    best: tuple[float, str, int] | None = None
    for body in candidates:
        parsed = _parse_segment(body)
        if parsed is None:
            continue
        link, count, rate = parsed
        if best is None or count * rate > best[0]:
            best = (count * rate, link, count)
    if best is None:
        return None, None, "no rate given"
    return best[1], best[2], "parsed"


def _parse_segment(body: str) -> tuple[str, int, float] | None:
    lowered = body.lower()
    count_match = _COUNT.match(body)
    count = int(count_match.group(1)) if count_match else 1
    rate_match = _RATE.search(body)
    rate = float(rate_match.group(1)) if rate_match else None
    if rate is None and re.search(r"\bgig(abit)?\b", lowered):
        rate = 1.0
    if rate is None:
        rate = next((r for nic, r in _NIC_RATES.items() if nic in lowered), None)
    infiniband = re.search(r"\bib\b|infiniband|\b(ndr|hdr|edr)\d*\b", lowered) is not None
    if infiniband:
        link = next((name for key, name in _IB_GENERATIONS if re.search(rf"\b{key}\b", lowered)), None)
        if link is None and rate is not None:
            link = _IB_BY_RATE.get(rate)
        return None if link is None or rate is None else (link, count, rate)
    if rate is not None and rate in _ETHERNET_RATES and re.search(r"ethernet|gbe|gig|\be810", lowered):
        return f"ethernet-{rate:g}g", count, rate
    return None


def interconnect_links(texts: pd.Series, devices: np.ndarray, per_node: np.ndarray) -> np.ndarray:
    """The intra-node link each row's accelerator-interconnect text names for its GPU (None: the GPU's default).

    Mentions NVLink or NVSwitch -> the GPU's ``nvlink_link``, except a
    switch-connected GPU on a board of at most 4 GPUs whose text names no
    NVSwitch (HGX 4-GPU boards) -> its direct nvlink-genN; mentions PCIe -> the
    GPU's host PCIe link; empty, or NVLink on a GPU without one -> None.
    """
    out = np.full(len(texts), None, object)
    for i, (words, device) in enumerate(zip(texts.fillna("").astype(str).str.lower(), devices)):
        if device is None or (isinstance(device, float) and np.isnan(device)):
            continue
        if "nvlink" in words or "nvswitch" in words:
            nvlink = device.nvlink_link
            if nvlink and nvlink.startswith("nvswitch") and "nvswitch" not in words and per_node[i] <= 4:
                nvlink = f"nvlink-gen{device.nvlink_generation}"
            out[i] = nvlink
        elif "pcie" in words:
            out[i] = pcie_link(device)
    return out
