"""TFF's `ClientWorkProcess`: what the clients do with the model they are
sent, as a measured process.

`next(state@SERVER, weights@CLIENTS, data@CLIENTS)` returns
`MeasuredProcessOutput(state@SERVER, ClientResult(update, update_weight)
@CLIENTS, measurements@SERVER)`; the state (the client optimizer's
hyperparameters, say) stays at the server and is broadcast by `next` if the
clients need it.
"""

from typing import Any, NamedTuple

import tensorflow as tf

from canonical import errors
from canonical.core import types as ft
from canonical.learning.templates import checks
from canonical.templates import measured


class ClientResult(NamedTuple):
  """What a client's work sends for aggregation: its update and weight."""
  update: Any
  update_weight: Any


class ClientWorkProcess(checks.WithHparams, measured.MeasuredProcess):
  """TFF's `ClientWorkProcess(initialize_fn, next_fn, *, get_hparams_fn=None,
  set_hparams_fn=None)`: both federated computations, typed as above; the
  optional hparams functions are tf_computations `(S -> H)` and
  `(<S, H> -> S)` on the state's member type."""

  def __init__(self, initialize_fn, next_fn, *, get_hparams_fn=None,
               set_hparams_fn=None):
    where = checks.located('ClientWorkProcess')
    block = checks.block(initialize_fn, next_fn,
                         ('the model weights', 'the client data'), where)
    params, output = block.parameters, block.output
    checks.placed(params[1], ft.CLIENTS, where,
                  "next_fn's second parameter (the model weights)")
    checks.placed(params[2], ft.CLIENTS, where,
                  "next_fn's third parameter (the client data)")
    if not _is_data(params[2].member):
      raise errors.FederatedError(
          f'{where}: next_fn\'s third parameter (the client data) must be a '
          f'sequence or a structure of sequences, it is {params[2]}.')
    checks.placed(output.result, ft.CLIENTS, where,
                  'the result of next_fn\'s MeasuredProcessOutput')
    if not isinstance(checks.member(output.result), ClientResult):
      raise errors.FederatedError(
          f'{where}: the result of next_fn\'s MeasuredProcessOutput must be '
          'a tff.learning.templates.ClientResult(update, update_weight) '
          f'at CLIENTS, it is {measured.describe_type(output.result)}.')
    self._get_hparams, self._set_hparams = checks.hparams_functions(
        get_hparams_fn, set_hparams_fn, block.state, where)
    super().__init__(block.initialize, block.next, next_is_multi_arg=True)


def _is_data(member):
  leaves = tf.nest.flatten(member)
  return bool(leaves) and all(isinstance(leaf, tf.data.DatasetSpec)
                              for leaf in leaves)
