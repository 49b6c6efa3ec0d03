"""Pure optimizers: TFF 0.87's `tff.learning.optimizers`, and the builders
this library had before.

An optimizer is a `base.Optimizer`: `initialize(specs) -> state` and
`next(state, weights, gradients) -> (state, weights)`, pure functions of
tensor structures, so client and server updates stay canonical-form pieces.
Weights may be any `tf.nest` structure (tuples, not lists, if the state has
to live inside `Dataset.reduce`).

| module | TFF's builders | ours before (Keras's numerics, fixed hparams) |
|---|---|---|
| `base` | `Optimizer` and its checks | - |
| `sgdm` | `build_sgdm` | `sgd` (and Nesterov) |
| `adafactor` | `build_adafactor` | - |
| `moments` | `build_adam`, `build_adamw`, `build_yogi` | `adam` |
| `squares` | `build_adagrad`, `build_rmsprop` | `adagrad`, `rmsprop` |
| `scheduling` | `schedule_learning_rate` | - |

Each algorithm is one class; the two kinds of builder differ only in where
the hyperparameters live (TFF's: in the state, for `get_hparams` /
`set_hparams`; ours: constants of the graph) and in their state's keys.
"""

from canonical.learning.optimizers.adafactor import build_adafactor
from canonical.learning.optimizers.base import check_weights_gradients_match
from canonical.learning.optimizers.base import handle_indexed_slices_gradients
from canonical.learning.optimizers.base import LEARNING_RATE_KEY
from canonical.learning.optimizers.base import Optimizer
from canonical.learning.optimizers.moments import adam
from canonical.learning.optimizers.moments import build_adam
from canonical.learning.optimizers.moments import build_adamw
from canonical.learning.optimizers.moments import build_yogi
from canonical.learning.optimizers.scheduling import schedule_learning_rate
from canonical.learning.optimizers.sgdm import build_sgdm
from canonical.learning.optimizers.sgdm import sgd
from canonical.learning.optimizers.squares import adagrad
from canonical.learning.optimizers.squares import build_adagrad
from canonical.learning.optimizers.squares import build_rmsprop
from canonical.learning.optimizers.squares import rmsprop

__all__ = [
    'LEARNING_RATE_KEY', 'Optimizer', 'adagrad', 'adam', 'build_adafactor',
    'build_adagrad',
    'build_adam', 'build_adamw', 'build_rmsprop', 'build_sgdm', 'build_yogi',
    'check_weights_gradients_match', 'handle_indexed_slices_gradients',
    'rmsprop', 'schedule_learning_rate', 'sgd',
]
