"""Weighted mean processes for the older federated averaging builder
(`build_federated_averaging_process`), plain or encoded: TFF's factories
(`MeanFactory` over a `SumFactory` or an `EncodedSumFactory`), seen as the
older building block.

The older block's `next(state, value, weight[, residual])` returns `(state,
mean[, residual])`; the factory's process does the work. A total weight of
zero (every client dropped) gives a zero mean rather than NaN, so the server
model stays finite (`no_nan_division`).
"""

import tensorflow as tf

from canonical.aggregators import encoder_fns
from canonical.aggregators import encoded as encoded_lib
from canonical.aggregators import mean_factory
from canonical.core import computations
from canonical.core import specs
from canonical.core import types as ft
from canonical.templates import aggregation_process
from canonical.templates import measured
from canonical.templates import measured_process
from encoders.core import gather_encoder

WEIGHT_SPEC = tf.TensorSpec([], tf.float32)
# Names this module had (tests/data/names_before_layout.json), kept.
COUNT_SPEC = encoded_lib.COUNT_SPEC
tf_computation = specs.tf_computation
federated_computation = computations.federated_computation
# What a private mean's process says of a round, for accounting.
ACCOUNTING = ('noise_multiplier', 'clip', 'sensitivity')


def older_block(factory, value_spec, name):
  """The older `MeasuredProcess` running `factory`'s weighted process. The
  process's encoders (or `Treatment`s) and accounting attributes
  (`ACCOUNTING`), where it has them, are the block's too; `block.factory`
  is `factory`, for the older builders that compose TFF's."""
  process = factory.create(value_spec, WEIGHT_SPEC)

  def step(state, value, weight, client_state=None):
    output = aggregation_process.call_next(process, state, value, weight,
                                           client_state=client_state)
    client_state = measured.client_state_of(output)
    if client_state is None:
      return output.state, output.result
    return output.state, output.result, client_state

  next_fn = aggregation_process.next_computation(
      step, [('state', process.next.parameter_types[0]),
             ('value', ft.clients(value_spec)),
             ('weight', ft.clients(WEIGHT_SPEC))],
      process.client_state_type, name=name)
  block = measured_process.MeasuredProcess(
      process.initialize, next_fn, value_spec,
      measured_process.encoders_of(process),
      client_state_initializer=process.client_state_initializer, name=name)
  block.factory = factory
  for attribute in ACCOUNTING:
    if hasattr(process, attribute):
      setattr(block, attribute, getattr(process, attribute))
  return block


def build_weighted_mean_process(value_spec):
  """The plain weighted mean: sum of `value * weight` over the sum of
  weights (`MeanFactory(no_nan_division=True)`). No state."""
  value_spec = specs.check_value_spec(value_spec,
                                      'build_weighted_mean_process')
  return older_block(mean_factory.MeanFactory(no_nan_division=True),
                     value_spec, 'weighted_mean')


def build_encoded_mean_process(value_spec, encoder_fn, error_feedback=False):
  """A weighted mean of values like `value_spec`, each tensor encoded on its
  own: `MeanFactory(EncodedSumFactory(encoder_fn, error_feedback=...),
  no_nan_division=True)`. Each client encodes `value * weight`; the weights
  are summed beside; the server divides the decoded sum by their total.

  `encoder_fn(tf.TensorSpec)` returns `te.encoders.as_gather_encoder(...)`.
  With `error_feedback=True` each client keeps a residual per tensor (what
  its lossy encodings have dropped so far, in units of `value * weight`) as
  client state: `next` takes it as a fourth argument and returns the new one
  third, and `client_state_initializer` makes zeros.
  """
  who = 'build_encoded_mean_process'
  value_spec = specs.check_value_spec(value_spec, who)
  # The encoder_fn is checked here, so that errors name this builder.
  encoder_fns.encoders_for(value_spec, encoder_fn,
                           gather_encoder.GatherEncoder, who)
  factory = mean_factory.MeanFactory(
      encoded_lib.EncodedSumFactory(encoder_fn,
                                    error_feedback=error_feedback),
      no_nan_division=True)
  name = ('encoded_mean_with_error_feedback' if error_feedback else
          'encoded_mean')
  return older_block(factory, value_spec, name)
