"""Named unit conversions.

Every physical quantity in this project carries its unit in its name
(``step_time_s``, ``memory_bw_bytes_per_s``). Conversions between the units
that datasheets use and the SI base units used internally go through these
helpers, never through bare powers of ten at the call site.
"""

from __future__ import annotations

BITS_PER_BYTE = 8
BYTES_PER_GB = 1e9  # decimal gigabyte, as used for bandwidths on datasheets
BYTES_PER_GIB = 2**30  # binary gibibyte, as used for memory capacities
FLOPS_PER_TFLOP = 1e12

#: Bytes per element of a tensor stored at each training precision.
BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

#: Bytes per gradient element exchanged at each training precision: gradients
#: are communicated at the training precision, except that FP8 training keeps
#: its gradients in BF16 (as NVIDIA Transformer Engine does) and PyTorch under
#: autocast keeps them at FP32 (``features.resolve.autocast_keeps_fp32_gradients``).
GRADIENT_BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    """Link rate in Gbit/s (network datasheets) to bytes per second."""
    return gbit_per_s * 1e9 / BITS_PER_BYTE


def mbit_per_s_to_bytes_per_s(mbit_per_s: float) -> float:
    """Link rate in Mbit/s (``tc`` rates) to bytes per second."""
    return mbit_per_s * 1e6 / BITS_PER_BYTE


def gb_per_s_to_bytes_per_s(gb_per_s: float) -> float:
    """Bandwidth in GB/s (memory and NVLink datasheets) to bytes per second."""
    return gb_per_s * BYTES_PER_GB


def tflops_to_flops_per_s(tflops: float) -> float:
    """Peak throughput in TFLOP/s to FLOP/s."""
    return tflops * FLOPS_PER_TFLOP


def gib_to_bytes(gib: float) -> float:
    """Memory capacity in GiB to bytes."""
    return gib * BYTES_PER_GIB


def bytes_to_gib(n_bytes: float) -> float:
    """Bytes to GiB, for display."""
    return n_bytes / BYTES_PER_GIB
