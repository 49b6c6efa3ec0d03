"""Which TensorFlow ops a loaded form may hold, unless the caller opts in.

A form file may come from anywhere, and running a piece runs every op in its
graph. The default allows the op libraries of pure in-memory computation
(math, nn, array, bitwise, control flow, function calls, stateless random,
linalg, strings, parsing, sparse, ragged, tensor lists, datasets built from
tensors and their pure transformations, seeded shuffles and samples, and
the data-flow library's `DynamicStitch`, which gradients use), minus
their members that touch files, other processes or the
interpreter, and minus stateful ops other than a few known harmless ones
(function calls, Assert, dataset iteration, reading the clock). Everything else is refused:
`PyFunc` / `EagerPyFunc` (Python code), file and network I/O (`ReadFile`,
`WriteFile`, `Save`, `Restore`, `MatchingFiles`, file-reading datasets,
`PrintV2` to a file), variables, queues and lookup tables, stateful random,
collectives, `RemoteCall`, `Abort`.

The rules' answer for the installed TensorFlow is kept as a table,
`allowed_ops.txt`, which the loader and the TensorFlow-free reader both
read; a test fails when a TensorFlow upgrade changes the answer, so the
change is read before the table is rewritten.
"""

import functools
import importlib.resources
import os

from canonical import io as storage_lib

# The allowed op names, one per line: written from the rules below by
# `python -m canonical.saving.op_allowlist`, read by the loader and by the
# TensorFlow-free reader alike.
TABLE_NAME = 'allowed_ops.txt'  # Package data, beside this module.
TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), TABLE_NAME)
_TABLE_HEADER = ('# The ops a loaded form may hold by default (op_allowlist.py '
                 'says why).\n# Written by python -m '
                 'canonical.saving.op_allowlist; do not edit.\n')

_ALLOWED_LIBRARIES = frozenset({
    'gen_array_ops', 'gen_bitwise_ops', 'gen_control_flow_ops',
    'gen_dataset_ops', 'gen_functional_ops', 'gen_linalg_ops',
    'gen_list_ops', 'gen_logging_ops', 'gen_manip_ops', 'gen_math_ops',
    'gen_nn_ops', 'gen_optional_ops', 'gen_parsing_ops',
    'gen_ragged_array_ops', 'gen_ragged_conversion_ops',
    'gen_ragged_math_ops', 'gen_random_index_shuffle_ops', 'gen_set_ops',
    'gen_sparse_ops', 'gen_special_math_ops', 'gen_spectral_ops',
    'gen_stateless_random_ops', 'gen_stateless_random_ops_v2',
    'gen_string_ops',
})

# Stateful ops of those libraries that only compute (in this process).
_HARMLESS_STATEFUL = frozenset({
    'StatefulPartitionedCall', 'If', 'While', 'Case', 'Assert',
    'CheckNumerics', 'CheckNumericsV2', 'GuaranteeConst',
    'StatelessRandomGetAlg', 'ReduceDataset', 'DatasetToSingleElement',
    'RangeDataset', 'TensorDataset', 'TensorSliceDataset',
    'SparseTensorSliceDataset', 'AnonymousIterator', 'AnonymousIteratorV2',
    'AnonymousIteratorV3', 'MakeIterator', 'DeleteIterator',
    'IteratorGetNext', 'IteratorGetNextSync', 'IteratorGetNextAsOptional',
    # Reads the clock: TFF's analytics stamp a round's result with it.
    'Timestamp',
})

# Pure transformations of tf.data's experimental library (which also holds
# file readers, snapshots and data services: those stay refused).
_PURE_EXPERIMENTAL_DATASETS = frozenset({
    'ScanDataset', 'ExperimentalScanDataset', 'TakeWhileDataset',
    'ExperimentalTakeWhileDataset', 'UnbatchDataset',
    'ExperimentalUnbatchDataset', 'UniqueDataset', 'ExperimentalUniqueDataset',
    'SlidingWindowDataset', 'ExperimentalSlidingWindowDataset',
    'GroupByWindowDataset', 'ExperimentalGroupByWindowDataset',
    'DenseToSparseBatchDataset', 'ExperimentalDenseToSparseBatchDataset',
    'MapAndBatchDataset', 'ExperimentalMapAndBatchDataset',
    'DirectedInterleaveDataset', 'ExperimentalDirectedInterleaveDataset',
    'ParallelInterleaveDataset', 'LegacyParallelInterleaveDatasetV2',
    'IgnoreErrorsDataset', 'ExperimentalIgnoreErrorsDataset',
    'RebatchDataset', 'RebatchDatasetV2', 'AssertCardinalityDataset',
    'ParseExampleDatasetV2', 'MaxIntraOpParallelismDataset',
    'PrivateThreadPoolDataset', 'ExperimentalMapDataset',
})

# Seeded randomness of tf.data: pure once its seeds are (dataset_seeds.py
# refuses the constant zero pair, which draws OS entropy).
_SEEDED_DATASETS = frozenset({
    'ShuffleDatasetV3', 'ShuffleAndRepeatDatasetV2', 'DummySeedGenerator',
    'AnonymousSeedGenerator', 'DeleteSeedGenerator', 'RandomDataset',
    'RandomDatasetV2',
})

# Pure ops of tf's data-flow library (which also holds queues, stacks and
# tensor arrays, refused): the gradient of a reduction stitches with them.
_PURE_DATA_FLOW = frozenset({'DynamicStitch', 'ParallelDynamicStitch'})

# Stateless ops of those libraries that still reach outside the process.
_REFUSED = frozenset({
    'Abort',             # ends the process
    'ImmutableConst',    # memory-maps a file
    'CacheDataset',      # writes a cache file
    'DatasetFromGraph',  # a dataset from a GraphDef no one checked
})


def _library_of(op_class):
  return getattr(op_class, '__module__', '').rsplit('.', 1)[-1]


@functools.lru_cache(maxsize=None)
def default_allowed_ops():
  """The op names a form may hold by default: the table `allowed_ops.txt`,
  which the loader and the TensorFlow-free reader both read."""
  text = importlib.resources.files(__package__).joinpath(
      TABLE_NAME).read_text(encoding='utf-8')
  return frozenset(line.strip() for line in text.splitlines()
                   if line.strip() and not line.startswith('#'))


def ops_the_rules_allow():
  """The op names the rules above allow in the installed TensorFlow: what
  the table must hold (a test compares them; `python -m
  canonical.saving.op_allowlist` rewrites the table)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.python.framework import op_def_registry  # pylint: disable=g-import-not-at-top
  allowed = {'Placeholder', 'Const', 'NoOp', *_PURE_EXPERIMENTAL_DATASETS,
             *_SEEDED_DATASETS, *_PURE_DATA_FLOW}
  for name in dir(tf.raw_ops):
    if name.startswith('_') or name in _REFUSED:
      continue
    if _library_of(getattr(tf.raw_ops, name)) not in _ALLOWED_LIBRARIES:
      continue
    op_def = op_def_registry.get(name)
    if op_def is None:
      continue
    if op_def.is_stateful and name not in _HARMLESS_STATEFUL:
      continue
    allowed.add(name)
  return frozenset(allowed)


def table_text(ops):
  return ''.join([_TABLE_HEADER] + [f'{op}\n' for op in sorted(ops)])


def ops_of(graph_def):
  """(op name, where) for every node of a GraphDef and of its functions."""
  for node in graph_def.node:
    yield node.op, f'node {node.name!r}'
  for function in graph_def.library.function:
    for node in function.node_def:
      yield node.op, (f'node {node.name!r} of function '
                      f'{function.signature.name!r}')


def refused_op(graph_def, allowed):
  """The first `(op, where)` of `graph_def` not in `allowed` (nor a call of
  one of its own functions), or None."""
  own = {function.signature.name for function in graph_def.library.function}
  for op, where in ops_of(graph_def):
    if op not in allowed and op not in own:
      return op, where
  return None


def main():
  # A developer's command: it rewrites the table in this source tree,
  # whole or not at all (the storage layer writes a temporary, then renames).
  storage_lib.write_bytes(TABLE, table_text(ops_the_rules_allow()).encode())
  print(f'wrote {os.path.relpath(TABLE)}')


if __name__ == '__main__':
  main()
