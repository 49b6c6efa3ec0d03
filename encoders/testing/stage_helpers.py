"""Free functions of tensor_encoding's `test_utils`: inputs and stage kinds.

`BaseEncodingStageTest` uses `is_adaptive_stage` and
`aggregate_state_update_tensors`; stage tests call all three through
`test_utils`, which re-exports them.
"""

import numpy as np
import tensorflow as tf

from encoders.core import encoding_stage


def get_tensor_with_random_shape(expected_num_elements=10,
                                 source_fn=tf.random.uniform):
  """A 1-D tensor whose length is unknown statically and random when run.

  Draws `2 * expected_num_elements` values with `source_fn(shape)` and keeps
  each with probability 1/2. In graph mode the static shape is `[None]`;
  eagerly the tensor is concrete (its length still random).
  """
  size = 2 * expected_num_elements
  values = source_fn([size])
  keep = tf.random.uniform([size]) < 0.5
  return tf.boolean_mask(values, keep)


def is_adaptive_stage(stage):
  """Whether `stage` is adaptive (True) or a plain stage (False).

  Raises:
    TypeError: `stage` is neither kind of encoding stage.
  """
  if isinstance(stage, encoding_stage.AdaptiveEncodingStageInterface):
    return True
  if isinstance(stage, encoding_stage.EncodingStageInterface):
    return False
  raise TypeError('Expected an EncodingStageInterface or an '
                  'AdaptiveEncodingStageInterface, got '
                  f'{type(stage).__name__}.')


_NUMPY_AGGREGATIONS = {
    encoding_stage.StateAggregationMode.SUM:
        lambda stacked: np.sum(stacked, axis=0, dtype=stacked.dtype),
    encoding_stage.StateAggregationMode.MIN:
        lambda stacked: np.min(stacked, axis=0),
    encoding_stage.StateAggregationMode.MAX:
        lambda stacked: np.max(stacked, axis=0),
    encoding_stage.StateAggregationMode.STACK:
        lambda stacked: stacked,
}


def aggregate_state_update_tensors(stage, state_update_tensors):
  """Aggregates many encoders' state updates in numpy, as the stage asks.

  The reference meaning of `state_update_aggregation_modes`: SUM, MIN and MAX
  reduce across encoders element-wise (SUM keeps the dtype), STACK stacks the
  values along a new leading axis.

  Args:
    stage: an `AdaptiveEncodingStageInterface`.
    state_update_tensors: list with one dict of numpy values per encoder, as
      its `encode` returned them.

  Returns:
    A dict: state update key -> aggregated numpy value.

  Raises:
    TypeError: `stage` is not adaptive.
    ValueError: `state_update_tensors` is empty.
  """
  if not is_adaptive_stage(stage):
    raise TypeError('aggregate_state_update_tensors needs an '
                    'AdaptiveEncodingStageInterface, got '
                    f'{type(stage).__name__}.')
  modes = stage.state_update_aggregation_modes
  if modes and not state_update_tensors:
    raise ValueError('No state update tensors to aggregate.')
  return {
      key: _NUMPY_AGGREGATIONS[mode](
          np.stack([np.asarray(updates[key]) for updates in
                    state_update_tensors]))
      for key, mode in modes.items()
  }
