"""Importers: public benchmark tables to run tables, every source row accounted for.

One module per source (:mod:`~training.importers.lambda_benchmark`,
:mod:`~training.importers.mlperf`, :mod:`~training.importers.dle`,
:mod:`~training.importers.dlperf`, :mod:`~training.importers.tf_benchmarks`),
each mapping its table's rows onto job specs and a measured step time under
the rules its docstring states, on the shared interface and row accounting of
:mod:`~training.importers.common`. :data:`IMPORTERS` names them;
``python -m training.importers SOURCE PATH`` maps one table from the command
line.
"""

from training.importers.cli import app
from training.importers.common import ImportResult, Importer, RowAccounting
from training.importers.dle import DLE_HISTORY_SOURCE, DLE_SOURCE, import_dle, import_dle_history
from training.importers.dlperf import DLPERF_SOURCE, import_dlperf
from training.importers.lambda_benchmark import LAMBDA_SOURCE, import_lambda
from training.importers.mlperf import MLPERF_SOURCE, MLPERF_SOURCE_PREFIX, import_mlperf, import_mlperf_rounds, is_mlperf, mlperf_framework
from training.importers.networking import parse_host_networking
from training.importers.registry import IMPORTERS, importer
from training.importers.tf_benchmarks import import_tf_benchmarks

__all__ = [
    "DLE_HISTORY_SOURCE", "DLE_SOURCE", "DLPERF_SOURCE", "IMPORTERS", "LAMBDA_SOURCE", "MLPERF_SOURCE",
    "MLPERF_SOURCE_PREFIX", "ImportResult", "Importer", "RowAccounting", "app", "import_dle", "import_dle_history",
    "import_dlperf", "import_lambda", "import_mlperf", "import_mlperf_rounds", "import_tf_benchmarks", "importer",
    "is_mlperf", "mlperf_framework", "parse_host_networking",
]  # fmt: skip
