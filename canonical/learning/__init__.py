"""Pure-TensorFlow learning blocks for federated averaging.

Every function here is pure (no variables, no stateful random ops), so it can
be traced into a canonical-form piece and saved as a GraphDef.
"""

from canonical.learning.client_update import client_update
from canonical.learning.client_update import ClientOutput
from canonical.learning.evaluation import evaluate
from canonical.learning.keras_functional import KerasFunctionalModel
from canonical.learning.keras_model import from_keras_model
from canonical.learning import keras_optimizers
from canonical.learning import losses
from canonical.learning.model import BatchOutput
from canonical.learning.model import FunctionalModel
from canonical.learning.model import ModelWeights
from canonical.learning.model import split_batch
from canonical.learning.model import without_empty_batches
from canonical.learning import models
from canonical.learning import optimizers
from canonical.learning.optimizers import adagrad
from canonical.learning.optimizers import adam
from canonical.learning.optimizers import Optimizer
from canonical.learning.optimizers import rmsprop
from canonical.learning.optimizers import sgd
from canonical.learning.server_update import server_update

__all__ = [
    'BatchOutput', 'ClientOutput', 'FunctionalModel', 'KerasFunctionalModel',
    'ModelWeights',
    'Optimizer', 'adagrad', 'adam', 'client_update', 'evaluate',
    'from_keras_model',
    'keras_optimizers', 'losses', 'models', 'optimizers', 'rmsprop',
    'server_update', 'sgd', 'split_batch', 'without_empty_batches',
]


# TFF's recommended model aggregators, on first use: they bring dp-accounting.
_AGGREGATORS = ('compression_aggregator', 'ddp_secure_aggregator',
                'dp_aggregator', 'robust_aggregator', 'secure_aggregator')


def __getattr__(name):
  """TFF's `tff.learning.build_federated_averaging_process`,
  `ClientWeighting`, and the `framework`, `algorithms`, `templates` and
  `programs` modules, imported on first use: they build on
  `canonical.aggregators` and on this package's own blocks."""
  import importlib  # pylint: disable=g-import-not-at-top
  if name == 'build_federated_averaging_process':
    return importlib.import_module(
        'canonical.learning.tff_learning').build_federated_averaging_process
  if name in ('framework', 'algorithms', 'templates', 'programs'):
    return importlib.import_module(f'canonical.learning.{name}')
  if name in ('add_debug_measurements',
              'add_debug_measurements_with_mixed_dtype'):
    return getattr(importlib.import_module(
        'canonical.learning.debug_measurements'), name)
  if name == 'LoopImplementation':
    return importlib.import_module(
        'canonical.learning.loop_builder').LoopImplementation
  if name == 'ClientWeighting':
    return importlib.import_module(
        'canonical.learning.algorithms.averaging').ClientWeighting
  if name in _AGGREGATORS:
    return getattr(importlib.import_module(
        'canonical.learning.model_update_aggregator'), name)
  if name == 'model_update_aggregator':
    return importlib.import_module(
        'canonical.learning.model_update_aggregator')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
