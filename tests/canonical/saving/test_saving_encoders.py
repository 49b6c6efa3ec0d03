"""Every form our builders make loads under the default op allowlist and runs alike.

Federated averaging with each ready-made encoder on both the broadcast and the
mean (error feedback for the sparsifying ones): the XLA-compiled kernels, the
stateless random ops and the dataset loop all survive save and load.
"""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
from canonical.learning import models
from canonical.saving import form_file
import encoders as te

_ENCODERS = {
    'identity': te.encoders.identity,
    'uniform_quantization': lambda: te.encoders.uniform_quantization(bits=8),
    'hadamard_quantization': lambda: te.encoders.hadamard_quantization(bits=2),
    'top_k': lambda: te.encoders.top_k(fraction=0.05),
    'random_k': lambda: te.encoders.random_k(fraction=0.1),
    'sign': te.encoders.sign,
    'drive': te.encoders.drive,
    'subsampled_drive': lambda: te.encoders.subsampled_drive(0.5),
    'adaptive_quantization': lambda: te.encoders.adaptive_quantization(bits=4),
    'half_precision': te.encoders.half_precision,
}
_ERROR_FEEDBACK = ('top_k', 'random_k', 'sign')


@pytest.fixture(scope='module')
def model():
  return learning.KerasFunctionalModel.from_keras(models.small_8x8, seed=0)


def _clients():
  rng = np.random.default_rng(1)
  return [tf.data.Dataset.from_tensor_slices(
      (rng.uniform(size=(n, 8, 8, 1)).astype(np.float32),
       rng.integers(0, 4, n).astype(np.int32))).batch(8) for n in (8, 16)]


def _encoder_fn(wrap, make):
  def build(spec):
    if spec.shape.num_elements() > 100:
      return wrap(make(), spec)
    return wrap(te.encoders.identity(), spec)
  return build


@pytest.mark.parametrize('kind', sorted(_ENCODERS))
def test_fedavg_form_with_encoder_loads_and_runs_alike(model, kind):
  make = _ENCODERS[kind]
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      server_optimizer_fn=lambda: learning.adam(0.01),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model, _encoder_fn(te.encoders.as_simple_encoder, make)),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, _encoder_fn(te.encoders.as_gather_encoder, make),
          error_feedback=kind in _ERROR_FEEDBACK))
  form = cf.compile(process)
  loaded = form_file.from_bytes(form_file.to_bytes(form), where=kind)
  assert loaded.encoders == form.encoders
  clients = _clients()
  expected = cf.run_round(form, form.initialize(), clients, merge_seed=1)
  actual = cf.run_round(loaded, loaded.initialize(), clients, merge_seed=1)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
