"""Aggregation processes built for a model's weights.

The builders of `canonical.aggregators` take the spec of the values they move;
these take a model instead (TFF's `tff.learning.framework` names, as the
compression tutorial calls them): the broadcast moves all the model's weights,
the means its trainable weights' deltas.
"""

from canonical import aggregators
from canonical.learning import model_fns


def _trainable(model_fn, who):
  return model_fns.functional_model_of(model_fn, who).weights_spec.trainable


def build_encoded_broadcast_process_from_model(model_fn, encoder_fn):
  """`build_encoded_broadcast_process` for the model's weights (trainable and
  not)."""
  model = model_fns.functional_model_of(
      model_fn, 'build_encoded_broadcast_process_from_model')
  return aggregators.build_encoded_broadcast_process(model.weights_spec,
                                                     encoder_fn)


def build_encoded_mean_process_from_model(model_fn, encoder_fn,
                                          error_feedback=False):
  """`build_encoded_mean_process` for the model's trainable weights (its
  deltas)."""
  return aggregators.build_encoded_mean_process(
      _trainable(model_fn, 'build_encoded_mean_process_from_model'),
      encoder_fn, error_feedback=error_feedback)


def build_dp_mean_process_from_model(model_fn, **kwargs):
  """`build_dp_mean_process` for the model's trainable weights."""
  return aggregators.build_dp_mean_process(
      _trainable(model_fn, 'build_dp_mean_process_from_model'), **kwargs)


def build_secure_mean_process_from_model(model_fn, **kwargs):
  """`build_secure_mean_process` for the model's trainable weights."""
  return aggregators.build_secure_mean_process(
      _trainable(model_fn, 'build_secure_mean_process_from_model'), **kwargs)


def build_dp_secure_mean_process_from_model(model_fn, **kwargs):
  """`build_dp_secure_mean_process` for the model's trainable weights."""
  return aggregators.build_dp_secure_mean_process(
      _trainable(model_fn, 'build_dp_secure_mean_process_from_model'),
      **kwargs)
