"""An encoded broadcast as TFF's `model_distributor` (our extension of TFF's
API): `tff.learning.templates.build_encoded_broadcast_process(weights_type,
encoder_fn)` makes a `DistributionProcess`; TFF's FedAvg with it sends the
encoded model (the form's broadcast bits are the encoders') and learns the
older builder's model with the same encoded broadcast, bit for bit."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
from encoders import encoders as te
import tff_087_examples as example


def four_bits(spec):
  if spec.shape.num_elements() > 3:
    return te.as_simple_encoder(te.uniform_quantization(bits=4), spec)
  return te.as_simple_encoder(te.identity(), spec)


def _three_rounds(process):
  form = tff.compile(process)
  state = form.initialize()
  for _ in range(3):
    state = tff.run_round(form, state, example.client_data())[0]
  return form, state


def test_tffs_fed_avg_sends_the_encoded_model_as_the_older_builder_does():
  model = example.functional_model()
  distributor = tff.learning.templates.build_encoded_broadcast_process(
      tff.learning.models.weights_type_from_model(model), four_bits)
  assert isinstance(distributor, tff.learning.templates.DistributionProcess)
  ours, ours_state = _three_rounds(algorithms.build_weighted_fed_avg(
      model, tff.learning.optimizers.build_sgdm(0.5),
      tff.learning.optimizers.build_sgdm(1.0),
      model_distributor=distributor))
  older, older_state = _three_rounds(
      algorithms.build_federated_averaging_process(
          model, client_optimizer_fn=lambda: learning.sgd(0.5),
          broadcast_process=framework.build_encoded_broadcast_process_from_model(
              model, four_bits)))
  plain, _ = _three_rounds(algorithms.build_weighted_fed_avg(
      model, tff.learning.optimizers.build_sgdm(0.5)))
  assert plain.broadcast_bits == 15 * 32  # The kernel and bias as float32.
  assert ours.broadcast_bits == older.broadcast_bits < 0.5 * 15 * 32
  for a, b in zip(tf.nest.flatten(ours_state.global_model_weights),
                  tf.nest.flatten(older_state.global_model_weights)):
    np.testing.assert_array_equal(a, b)


def test_the_form_says_what_each_tensor_goes_through():
  """A composed process's form names the encoder of each tensor, broadcast
  and aggregated, through the factories that wrap the encoded sum (as the
  older builder's forms do): `python -m canonical inspect` shows them."""
  model = example.functional_model()
  weights_type = tff.learning.models.weights_type_from_model(model)

  def two_bits(spec):
    if spec.shape.num_elements() > 3:
      return te.as_gather_encoder(te.uniform_quantization(bits=2), spec)
    return te.as_gather_encoder(te.identity(), spec)

  form = tff.compile(algorithms.build_weighted_fed_avg(
      model, tff.learning.optimizers.build_sgdm(0.5),
      model_distributor=tff.learning.templates.build_encoded_broadcast_process(
          weights_type, four_bits),
      model_aggregator=tff.aggregators.clipping_factory(
          1.0, tff.aggregators.MeanFactory(
              tff.aggregators.EncodedSumFactory(two_bits)))))
  older = tff.compile(algorithms.build_federated_averaging_process(
      model, client_optimizer_fn=lambda: learning.sgd(0.5),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model, four_bits),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, two_bits)))
  assert form.encoders == older.encoders
  assert sorted(form.encoders) == [
      'aggregation[0] float32[4, 3]', 'aggregation[1] float32[3]',
      'broadcast[0] float32[4, 3]', 'broadcast[1] float32[3]']
  assert 'uniform_quantization' in form.encoders['aggregation[0] float32[4, 3]']
  plain = tff.compile(algorithms.build_weighted_fed_avg(
      model, tff.learning.optimizers.build_sgdm(0.5)))
  assert not plain.encoders


def test_a_placed_type_is_refused():
  with pytest.raises(errors.Error, match='placed type'):
    tff.learning.templates.build_encoded_broadcast_process(
        tff.FederatedType(np.float32, tff.SERVER), four_bits)
