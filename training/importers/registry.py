"""The public sources, by name: which file each reads by default and which importer maps it."""

from __future__ import annotations

from training.importers.common import Importer
from training.importers.dlperf import import_dlperf
from training.importers.dle import import_dle, import_dle_history
from training.importers.lambda_benchmark import import_lambda
from training.importers.tf_benchmarks import import_tf_benchmarks
from training.importers.mlperf import import_mlperf, import_mlperf_rounds

#: Every public source the default training set draws on, in report order.
IMPORTERS: dict[str, Importer] = {
    importer.name: importer
    for importer in (
        Importer("lambda", "lambda_throughput.csv", "Lambda PyTorch GPU benchmark (lambdal/deeplearning-benchmark)", import_lambda),
        Importer("mlperf", "mlperf_training_v3.1.csv", "MLPerf Training v3.1 (mlcommons/training_results_v3.1)", import_mlperf),
        Importer("dle", "dle_training_throughput.csv", "NVIDIA DeepLearningExamples published training throughput (snapshot 729963dd47e7)", import_dle),
        Importer("dle-history", "dle_training_throughput_history.csv", "NVIDIA DeepLearningExamples, values of older README versions", import_dle_history),
        Importer("dlperf", "dlperf_v100_cluster.csv", "Oneflow-Inc/DLPerf: 4 x 8 V100 cluster, 6-8 frameworks", import_dlperf),
        Importer("mlperf-rounds", "mlperf_training_v0.7-v3.0.csv", "MLPerf Training v0.7-v3.0 (mlcommons/training_results_v0.7 ... v3.0)", import_mlperf_rounds),
        Importer("tf-benchmarks", "ps_worker_gpu_measured.csv", "TensorFlow 1.x 2017 benchmarks: PS/Worker and replicated on P100 and K80", import_tf_benchmarks),
    )
}


def importer(name: str) -> Importer:
    """The importer of a source name; ``SpecError`` naming the known ones otherwise."""
    from features.errors import SpecError

    if name not in IMPORTERS:
        raise SpecError("source", name, f"allowed: {', '.join(IMPORTERS)}")
    return IMPORTERS[name]
