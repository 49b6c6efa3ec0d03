"""`encoder_fn(tf.TensorSpec)`, as users give it to the encoded aggregations
(the broadcast's `SimpleEncoder`s, the sums' `GatherEncoder`s), applied to
every tensor of a value and checked."""

import tensorflow as tf

from canonical import errors
from encoders.core import simple_encoder


def encoders_for(value_spec, encoder_fn, kind, who):
  """`encoder_fn(spec)` for every tensor of `value_spec`, checked; a flat tuple."""
  encoders = []
  for index, spec in enumerate(tf.nest.flatten(value_spec)):
    encoder = encoder_fn(spec)
    if not isinstance(encoder, kind):
      helper = ('as_simple_encoder' if kind is simple_encoder.SimpleEncoder
                else 'as_gather_encoder')
      raise errors.InvalidTypeError(
          f'{who}: encoder_fn returned {type(encoder).__name__} for tensor '
          f'{index} ({spec.shape}, {spec.dtype.name}); it must return '
          f'te.encoders.{helper}(encoder, spec).')
    built_for = encoder.input_tensorspec
    if built_for.shape != spec.shape or built_for.dtype != spec.dtype:
      raise errors.InvalidValueError(
          f'{who}: encoder_fn returned an encoder built for {built_for} for '
          f'tensor {index}, which is {spec}; build it with the spec it is given.')
    encoders.append(encoder)
  return tuple(encoders)
