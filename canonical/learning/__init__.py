"""Pure-TensorFlow learning blocks for federated averaging.

Every function here is pure (no variables, no stateful random ops), so it can
be traced into a canonical-form piece and saved as a GraphDef.
"""

from typing import TYPE_CHECKING

from canonical import _lazy
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


if TYPE_CHECKING:  # Imported on first use (`_lazy.declared`), each alone: they
  # build on `canonical.aggregators` (the recommended aggregators bring
  # dp-accounting) and on this package's own blocks.
  from canonical.learning.tff_learning import build_federated_averaging_process
  from canonical.learning import framework
  from canonical.learning import algorithms
  from canonical.learning import templates
  from canonical.learning import programs
  from canonical.learning.debug_measurements import add_debug_measurements
  from canonical.learning.debug_measurements import (
      add_debug_measurements_with_mixed_dtype)
  from canonical.learning.loop_builder import LoopImplementation
  from canonical.learning.algorithms.averaging import ClientWeighting
  from canonical.learning.model_update_aggregator import compression_aggregator
  from canonical.learning.model_update_aggregator import ddp_secure_aggregator
  from canonical.learning.model_update_aggregator import dp_aggregator
  from canonical.learning.model_update_aggregator import robust_aggregator
  from canonical.learning.model_update_aggregator import secure_aggregator
  from canonical.learning import model_update_aggregator

__getattr__, __dir__ = _lazy.declared(globals())
