"""TFF's `FinalizerProcess`: what the server does with the aggregated update,
as a measured process, and `build_apply_optimizer_finalizer`, a server
optimizer's step.

`next(state@SERVER, weights@SERVER, update@SERVER)` returns
`MeasuredProcessOutput(state@SERVER, new weights@SERVER,
measurements@SERVER)`, the new weights of the weights' type.
"""

import collections

import tensorflow as tf

from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning import model_fns
from canonical.learning.model import ModelWeights
from canonical.learning.templates import checks
from canonical.templates import measured


class FinalizerProcess(checks.WithHparams, measured.MeasuredProcess):
  """TFF's `FinalizerProcess(initialize_fn, next_fn, *, get_hparams_fn=None,
  set_hparams_fn=None)`: federated computations typed as above; the
  optional hparams functions are tf_computations `(S -> H)` and
  `(<S, H> -> S)` on the state's member type."""

  def __init__(self, initialize_fn, next_fn, *, get_hparams_fn=None,
               set_hparams_fn=None):
    where = checks.located('FinalizerProcess')
    block = checks.block(initialize_fn, next_fn,
                         ('the model weights', 'the update'), where)
    params, output = block.parameters, block.output
    for param, what in ((params[1], 'second parameter (the model weights)'),
                        (params[2], 'third parameter (the update)')):
      checks.placed(param, ft.SERVER, where, f'next_fn\'s {what}')
    checks.placed(output.result, ft.SERVER, where,
                  'the result of next_fn\'s MeasuredProcessOutput')
    if not measured.fits(params[1], output.result):
      raise errors.FederatedError(
          f'{where}: next_fn returns new weights of type '
          f'{measured.describe_type(output.result)}, but takes weights of '
          f'type {params[1]}: they must be the same.')
    self._get_hparams, self._set_hparams = checks.hparams_functions(
        get_hparams_fn, set_hparams_fn, block.state, where)
    super().__init__(block.initialize, block.next, next_is_multi_arg=True)


def reject_non_finite_update(state, update):
  """TFF's default `should_reject_update`: whether `update` holds a NaN or
  an infinity, and `OrderedDict(update_non_finite=1 or 0)` (int32)."""
  del state
  finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(u))
                          for u in tf.nest.flatten(update)])
  non_finite = 1 - tf.cast(finite, tf.int32)
  return tf.logical_not(finite), collections.OrderedDict(
      update_non_finite=non_finite)


def build_apply_optimizer_finalizer(
    optimizer_fn, model_weights_type,
    should_reject_update=reject_non_finite_update):
  """TFF's finalizer taking one step of `optimizer_fn` (a
  `tff.learning.optimizers.Optimizer`) on the trainable weights along the
  update, unless `should_reject_update(optimizer state, update)` says to
  reject it (then weights and optimizer state stay as they were). Its state
  is the optimizer's; its hparams the optimizer's hyperparameters.
  `model_weights_type` is the unplaced type of `ModelWeights`."""
  where = 'build_apply_optimizer_finalizer'
  optimizer = model_fns.optimizer_of(optimizer_fn, f'{where}: optimizer_fn')
  weights_type = _model_weights_member(model_weights_type, where)
  trainable_type = weights_type.trainable

  def initial_state():
    return optimizer.initialize(trainable_type)

  init_tf = specs.tf_computation(initial_state)
  state_type = specs.plain(init_tf.result_spec)

  def step(optimizer_state, weights, update):
    trainable = tuple(weights.trainable)
    new_state, new_trainable = optimizer.next(optimizer_state, trainable,
                                              tuple(update))
    reject, measurements = should_reject_update(new_state, update)
    if measurements is None:
      measurements = collections.OrderedDict()
    keep = _chooser(reject)
    new_trainable = tf.nest.map_structure(keep, trainable,
                                          tuple(new_trainable))
    new_state = tf.nest.map_structure(keep, optimizer_state, new_state)
    return (new_state, ModelWeights(new_trainable, weights.non_trainable),
            measurements)

  step_tf = specs.tf_computation(step, state_type, weights_type,
                                 trainable_type)

  @computations.federated_computation()
  def init_fn():
    return intrinsics.federated_eval(init_tf, ft.SERVER)

  @computations.federated_computation(
      ft.server(state_type), ft.server(weights_type),
      ft.server(trainable_type))
  def next_fn(state, weights, update):
    stepped = intrinsics.federated_map(step_tf, (state, weights, update))
    return measured.MeasuredProcessOutput(stepped[0], stepped[1],
                                          stepped[2])

  get_hparams = specs.tf_computation(optimizer.get_hparams, state_type)
  set_hparams = specs.tf_computation(optimizer.set_hparams, state_type,
                                     specs.plain(get_hparams.result_spec))
  return FinalizerProcess(init_fn, next_fn, get_hparams_fn=get_hparams,
                          set_hparams_fn=set_hparams)


def _chooser(reject):
  """`keep(old, new)`: old where `reject` (a bool, or a bool tensor)."""
  if isinstance(reject, bool):
    return lambda old, new: old if reject else new
  reject = tf.convert_to_tensor(reject)
  return lambda old, new: tf.where(reject, old, new)


def _model_weights_member(model_weights_type, where):
  if isinstance(model_weights_type, ft.FederatedType):
    raise errors.InvalidTypeError(
        f'{where}: model_weights_type must be unplaced, got '
        f'{model_weights_type}.')
  member = ft.to_member(model_weights_type, where)
  if not isinstance(member, ModelWeights):
    raise errors.InvalidTypeError(
        f'{where}: model_weights_type must be a tff.learning.models.'
        f'ModelWeights of types, got {measured.describe_type(member)}.')
  return specs.plain(member)
