"""A flat job row as a layout job: the transformer's shape, its TP/PP/CP/DP layout and its cluster, validated.

The first problem raises :class:`~features.errors.SpecError` naming the
field; the physics of a validated job is :mod:`features.layout`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from features.errors import MISSING, SpecError, UnknownNameError
from features.hardware import hardware_catalog
from features.layout import LAYOUT_LEAVES, SHAPE_LEAVES, Layout, LayoutJob, transformer_catalog
from features.layout_collectives import Links
from features.transformer import FAMILIES, RECOMPUTE_MODES, SHARDING_MODES, TransformerShape


def _value(row: Mapping[str, Any], leaf: str) -> Any:
    value = row.get(leaf)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str) and not value.strip():
        return None
    return value


def is_layout_job(row: Mapping[str, Any]) -> bool:
    """True when a job row describes a transformer layout (shape or layout fields, or a family name as model)."""
    if any(_value(row, leaf) is not None for leaf in SHAPE_LEAVES + LAYOUT_LEAVES):
        return True
    model = _value(row, "model")
    return model is not None and str(model).strip().lower() in FAMILIES


def _int(row: Mapping[str, Any], leaf: str, default: int | None = None) -> int | None:
    value = _value(row, leaf)
    return default if value is None else int(value)


def _shape(row: Mapping[str, Any]) -> TransformerShape:
    model = _value(row, "model")
    base: TransformerShape | None = None
    if model is not None and str(model).strip().lower() not in FAMILIES:
        entry = transformer_catalog().find(str(model))
        if entry is None:
            known = [*FAMILIES, *transformer_catalog().names()]
            raise UnknownNameError("transformer", "workload.model", model, known)
        base = entry.shape
    family = base.family if base is not None else (str(model).strip().lower() if model is not None else None)
    if family is None:
        raise SpecError("workload.model", MISSING, f"a transformer job names its family ({', '.join(FAMILIES)}) or a catalogue transformer")

    def dim(leaf: str, attr: str) -> int:
        value = _int(row, leaf)
        if value is None and base is not None:
            value = getattr(base, attr)
        if value is None:
            raise SpecError(f"workload.{leaf}", MISSING, f"a {family} transformer needs it (or name a catalogue transformer)")
        return value

    layers = dim("layers", "layers")
    hidden = dim("hidden_size", "hidden_size")
    heads = dim("attention_heads", "attention_heads")
    vocab = dim("vocab_size", "vocab_size")
    sequence = dim("sequence_length", "sequence_length")
    ffn = _int(row, "ffn_hidden_size")
    if ffn is None:
        ffn = base.ffn_hidden_size if base is not None and base.hidden_size == hidden else (
            4 * hidden if family == "gpt" else 256 * math.ceil(8 * hidden / 3 / 256)
        )
    kv = _int(row, "kv_heads")
    if kv is None:
        kv = base.kv_heads if base is not None and base.attention_heads == heads else heads
    if hidden % heads:
        raise SpecError("workload.hidden_size", hidden, f"must be divisible by workload.attention_heads = {heads}")
    if heads % kv:
        raise SpecError("workload.kv_heads", kv, f"must divide workload.attention_heads = {heads}")
    if family == "gpt" and kv != heads:
        raise SpecError("workload.kv_heads", kv, f"gpt has multi-head attention: kv_heads = attention_heads = {heads}")
    adapter = _value(row, "adapter")
    rank = _int(row, "adapter_rank")
    lora_rank = base.lora_rank if base is not None else None
    if adapter is not None and str(adapter).lower() == "lora":
        lora_rank = rank if rank is not None else lora_rank
        if lora_rank is None:
            raise SpecError("workload.adapter.rank", MISSING, "a LoRA adapter needs its rank")
    elif adapter is not None and str(adapter).lower() == "none":
        lora_rank = None
    elif rank is not None:
        lora_rank = rank
    return TransformerShape(family, layers, hidden, ffn, heads, kv, vocab, sequence, lora_rank)


def layout_job_from_row(row: Mapping[str, Any]) -> LayoutJob:
    """Validate a flat job row as a layout job; the first problem raises ``SpecError`` naming the field.

    GPUs: ``parallelism.nodes`` x ``cluster.gpus_per_node`` when ``nodes`` is
    given (``data_parallel`` then defaults to what fills them), else
    TP x PP x CP x DP. ``global_batch_size`` defaults to DP x micro-batch
    (no gradient accumulation); ``precision`` to bf16.
    """
    if _value(row, "gradient_accumulation_steps") is not None:
        raise SpecError("workload.gradient_accumulation_steps", _value(row, "gradient_accumulation_steps"),
                        "a layout job accumulates through global_batch_size: data_parallel x micro_batch_size x passes")
    shape = _shape(row)
    hardware = hardware_catalog()
    gpu = hardware.device(str(_value(row, "gpu") or ""), "cluster.gpu") if _value(row, "gpu") else None
    if gpu is None:
        raise SpecError("cluster.gpu", MISSING, "this field is required")
    gpus_per_node = _int(row, "gpus_per_node", 8)
    tp = _int(row, "tensor_parallel", 1)
    pp = _int(row, "pipeline_parallel", 1)
    cp = _int(row, "context_parallel", 1)
    dp = _int(row, "data_parallel")
    nodes = _int(row, "nodes")
    if nodes is not None:
        gpus = nodes * gpus_per_node
        if dp is None:
            if gpus % (tp * pp * cp):
                raise SpecError("parallelism.tensor_parallel", f"TP {tp} x PP {pp} x CP {cp}",
                                f"must divide the {gpus} GPUs of {nodes} nodes x {gpus_per_node}")
            dp = gpus // (tp * pp * cp)
        elif tp * pp * cp * dp != gpus:
            raise SpecError("parallelism.data_parallel", f"TP {tp} x PP {pp} x CP {cp} x DP {dp} = {tp * pp * cp * dp} GPUs",
                            f"TP x PP x CP x DP must equal the {gpus} GPUs of {nodes} nodes x {gpus_per_node}")
    dp = 1 if dp is None else dp
    gpus = tp * pp * cp * dp
    micro = _int(row, "micro_batch_size", 1)
    global_batch = _int(row, "global_batch_size", dp * micro)
    schedule = str(_value(row, "pipeline_schedule") or "1f1b").lower()
    v = _int(row, "virtual_stages", 1)
    if schedule != "interleaved" and v != 1:
        raise SpecError("parallelism.virtual_stages", v, "virtual stages need pipeline_schedule interleaved")
    if schedule == "interleaved" and v < 2:
        raise SpecError("parallelism.virtual_stages", v, "the interleaved schedule needs 2 or more virtual stages")
    if shape.attention_heads % tp:
        raise SpecError("parallelism.tensor_parallel", tp, f"must divide workload.attention_heads = {shape.attention_heads}")
    if shape.kv_heads % tp:
        raise SpecError("parallelism.tensor_parallel", tp, f"must divide workload.kv_heads = {shape.kv_heads}")
    if shape.layers % (pp * v):
        raise SpecError("parallelism.pipeline_parallel", f"PP {pp} x virtual stages {v}",
                        f"must divide workload.layers = {shape.layers}")
    if global_batch % (dp * micro):
        raise SpecError("workload.global_batch_size", global_batch,
                        f"must be divisible by data_parallel x micro_batch_size = {dp} x {micro}")
    if shape.sequence_length % cp:
        raise SpecError("parallelism.context_parallel", cp, f"must divide workload.sequence_length = {shape.sequence_length}")
    recompute = str(_value(row, "activation_recompute") or "none").lower()
    sharding = str(_value(row, "sharding") or "none").lower()
    if recompute not in RECOMPUTE_MODES:
        raise SpecError("parallelism.activation_recompute", recompute, f"allowed: {', '.join(RECOMPUTE_MODES)}")
    if sharding not in SHARDING_MODES:
        raise SpecError("parallelism.sharding", sharding, f"allowed: {', '.join(SHARDING_MODES)}")
    sp_value = _value(row, "sequence_parallel")
    sequence_parallel = True if sp_value is None else bool(sp_value)
    warnings = []
    if tp > gpus_per_node:
        warnings.append(f"tensor_parallel {tp} spans more than one node of {gpus_per_node} GPUs: its all-reduces run over the network")
    precision = str(_value(row, "precision") or "bf16").lower()
    intra_name = _value(row, "intra_node_link") or gpu.default_intra_node_link
    intra = hardware.link(str(intra_name), "cluster.intra_node_link", ("nvlink", "pcie", "shared-memory"))
    network_name = str(_value(row, "network") or "ethernet-25g")
    network = hardware.link(network_name, "cluster.network", ("network",))
    links = Links(gpus_per_node, intra.bw_bytes_per_s, intra.latency_s, network.bw_bytes_per_s, network.latency_s,
                  _int(row, "nics_per_node", 1))
    layout = Layout(tp, pp, cp, dp, micro, global_batch, schedule, v, sequence_parallel, recompute, sharding)
    if layout.gpus != gpus:  # pragma: no cover - defensive, gpus is the product above
        raise SpecError("parallelism.data_parallel", dp, "TP x PP x CP x DP must equal the GPUs")
    return LayoutJob(str(_value(row, "name") or "job"), shape, layout, gpu, precision, links, network.name, tuple(warnings))
