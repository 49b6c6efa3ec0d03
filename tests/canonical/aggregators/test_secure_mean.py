"""The compressed secure mean: integers through secure sums, decoded once.

`aggregators.build_secure_mean_process` rotates, clips and stochastically rounds
each client's update to `bits`-bit levels that add exactly under the masks;
the server's decoded mean is within a level of the true mean, counts each
client once, and its range adapts to what the clip cuts.
"""

import numpy as np
import pytest
import tensorflow as tf

from beam_runner import testing
import canonical as cf
from canonical import aggregators
from canonical.executors import local as local_runner

import example_processes
import tff_087_examples as example

SPEC = {'kernel': tf.TensorSpec([40, 10], tf.float32),
        'bias': tf.TensorSpec([10], tf.float32)}


def _process(**kwargs):
  mean = aggregators.build_secure_mean_process(SPEC, **kwargs)
  return example_processes.mean_process(mean, SPEC)


def _clients(n, scale, seed=0):
  return example_processes.weighted_clients(SPEC, n, scale, seed)


def _true_mean(clients):
  counted = [v for v, w in clients if w > 0]
  return {k: np.mean([v[k] for v in counted], axis=0) for k in SPEC}


@pytest.mark.parametrize('rotate', [True, False])
def test_the_mean_is_within_a_level_of_the_unweighted_mean(rotate):
  process = _process(bits=8, clip=0.05, rotate=rotate)
  form = cf.compile(process)
  clients = _clients(9, 0.01)
  state = form.initialize()
  step = 2 * 0.05 / 255
  new_state, mean = local_runner.run_round(form, state, clients)
  true = _true_mean(clients)
  for key in SPEC:
    error = np.abs(np.asarray(mean[key]) - true[key]).max()
    assert error < step, (key, error)
    # The weights (1..49) are not used: the weighted mean is elsewhere.
    weighted = np.average([v[key] for v, _ in clients], axis=0,
                          weights=[w for _, w in clients])
    assert np.abs(weighted - true[key]).max() > error
  assert int(new_state[0]) == 1


def test_a_client_of_weight_zero_is_not_counted():
  form = cf.compile(_process(bits=8, clip=0.05))
  clients = _clients(6, 0.01)
  clients[2] = ({k: np.full(s.shape, 0.04, np.float32)
                 for k, s in SPEC.items()}, np.float32(0))
  _, mean = local_runner.run_round(form, form.initialize(), clients)
  true = _true_mean(clients)
  assert np.abs(np.asarray(mean['kernel']) - true['kernel']).max() < 0.1 / 255


def test_the_range_follows_the_clipped_fraction():
  form = cf.compile(_process(bits=8, clip=0.05, clipped_target=0.01))
  state = form.initialize()
  for _ in range(2):  # Values far inside the range: it narrows.
    state, _ = local_runner.run_round(form, state, _clients(4, 0.001))
  assert float(state[1]) < 0.05
  narrowed = float(state[1])
  state, _ = local_runner.run_round(form, state, _clients(4, 1.0))
  assert float(state[1]) > 2 * narrowed  # Most coordinates cut: it widens.


def test_compiled_runs_equal_the_reference_on_beam_too():
  process = _process(bits=6, clip=0.02)
  data = {f'c{i}': client for i, client in enumerate(_clients(6, 0.01))}
  testing.assert_rounds_match(process, data, rounds=2, clients_per_round=4,
                              rtol=0, atol=0, clients_per_element=2)


@pytest.mark.parametrize('kwargs, message', [
    ({'bits': 0}, 'bits must be an int in \\[1, 16\\]'),
    ({'bits': 17}, 'bits must be an int in \\[1, 16\\]'),
    ({'clip': 0.0}, 'clip must be a positive number'),
    ({'clip': float('inf')}, 'clip must be a positive number'),
    ({'clipped_target': 1.0}, 'clipped_target must be in \\(0, 1\\)'),
])
def test_bad_arguments_are_refused(kwargs, message):
  with pytest.raises(ValueError, match=message):
    aggregators.build_secure_mean_process(SPEC, **kwargs)


def test_the_process_describes_its_tensors():
  process = aggregators.build_secure_mean_process(SPEC, bits=4)
  assert process.encoded_bits == 4 * (400 + 10)
  assert 'Hadamard-rotated, 4-bit stochastic levels' in repr(
      process.encoders[0])


def test_the_factory_serves_tffs_fed_avg_through_secure_sums():
  """`SecureMeanFactory` is a TFF weighted factory: its process is the older
  block's, and TFF's FedAvg takes it as its model aggregator, its update
  then going through secure sums."""
  made = aggregators.SecureMeanFactory(bits=8, clip=0.05)
  process = made.create(SPEC, tf.TensorSpec([], tf.float32))
  assert isinstance(process, cf.templates.AggregationProcess)
  assert process.is_weighted and not process.has_client_state
  clients = _clients(5, 0.03)
  values, weights = [v for v, _ in clients], [w for _, w in clients]
  output = process.next(process.initialize(), values, weights)
  older = aggregators.build_secure_mean_process(SPEC, bits=8, clip=0.05)
  state, mean = older.next(older.initialize(), values, weights)
  for a, b in zip(tf.nest.flatten((output.state, output.result)),
                  tf.nest.flatten((state, mean))):
    np.testing.assert_array_equal(a, b)
  fed_avg = cf.learning.algorithms.build_weighted_fed_avg(
      example.model_fn, cf.learning.optimizers.build_sgdm(0.1),
      model_aggregator=aggregators.SecureMeanFactory(bits=8))
  assert cf.compile(fed_avg).has_secure_sums
