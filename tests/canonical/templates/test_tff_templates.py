"""TensorFlow Federated 0.87's `tff.templates` as a TFF user writes them:
`IterativeProcess` by keywords with a `next` returning only the state,
`MeasuredProcess` and `MeasuredProcessOutput`, `AggregationProcess`,
`EstimationProcess` with `report` and `map`.

The type signatures asserted are the ones TFF 0.87 prints for the same
computations (checked by hand against TFF 0.87 in its own venv).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.executors import reference
from canonical.templates import measured_process

from tensor_asserts import assert_same

F = tf.TensorSpec([], tf.float32)
F2 = tf.TensorSpec([2], tf.float32)


def _both_ways(process, state, data):
  """One round by the reference executor and by the compiled form; they
  agree; returns the reference's (state, metrics)."""
  expected = reference.run_round(process, state, data)
  form = tff.compile(process)
  assert_same(tff.run_round(form, state, data), expected, exact=False)
  return expected


@tff.federated_computation()
def _zero_at_server():
  return tff.federated_value(0.0, tff.SERVER)


@tff.tf_computation(F, F)
def _add(a, b):
  return a + b


@tff.federated_computation(tff.type_at_server(F), tff.type_at_clients(F))
def _add_the_sum(state, data):
  return tff.federated_map(_add, (state, tff.federated_sum(data)))


# ----------------------------------------------------------------------------
# IterativeProcess


def test_a_next_returning_only_the_state_runs_and_compiles():
  process = tff.templates.IterativeProcess(initialize_fn=_zero_at_server,
                                           next_fn=_add_the_sum)
  assert str(process.initialize.type_signature) == '( -> float32@SERVER)'
  assert str(process.next.type_signature) == (
      '(<state=float32@SERVER,data={float32}@CLIENTS> -> float32@SERVER)')
  assert str(process.state_type) == 'float32@SERVER'
  state = process.initialize()
  state = process.next(state, [1.0, 2.0])  # Only the state comes back.
  state = process.next(state, [3.0])
  assert float(state) == 6.0
  # In a form the round has empty metrics.
  new_state, metrics = _both_ways(process, np.float32(6.0), [1.0, 4.0])
  assert float(new_state) == 11.0 and metrics == ()
  form = tff.compile(process)
  assert float(form.initialize()) == 0.0


def test_the_old_positional_form_and_its_keywords_still_work():
  counter = tff.tf_computation(lambda: tf.constant(0.0))

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_clients(F))
  def next_fn(state, data):
    return (tff.federated_map(_add, (state, tff.federated_sum(data))),
            tff.federated_mean(data))

  process = tff.IterativeProcess(counter, next_fn, encoders={'x': 'none'})
  assert process.encoders == {'x': 'none'}
  state, metrics = process.next(process.initialize(), [1.0, 3.0])
  assert (float(state), float(metrics)) == (4.0, 2.0)
  assert str(process.initialize.type_signature) == '( -> float32)'


def test_next_is_multi_arg_is_checked():
  with pytest.raises(tff.FederatedError, match='next_is_multi_arg=False'):
    tff.templates.IterativeProcess(_zero_at_server, _add_the_sum,
                                   next_is_multi_arg=False)
  with pytest.raises(tff.Error, match='must be None or a bool'):
    tff.templates.IterativeProcess(_zero_at_server, _add_the_sum,
                                   next_is_multi_arg='yes')
  process = tff.templates.IterativeProcess(_zero_at_server, _add_the_sum,
                                           next_is_multi_arg=True)
  assert float(process.next(process.initialize(), [2.0])) == 2.0


def test_a_process_initialize_composes_into_another_initialize():
  inner = tff.templates.IterativeProcess(_zero_at_server, _add_the_sum)

  @tff.federated_computation()
  def initialize_fn():
    return tff.federated_zip((inner.initialize(),
                              tff.federated_value(1, tff.SERVER)))

  assert str(initialize_fn.type_signature) == '( -> <float32,int32>@SERVER)'
  assert initialize_fn() == (0.0, 1)


# ----------------------------------------------------------------------------
# MeasuredProcess


@tff.tf_computation(F)
def _plus_one(x):
  return x + 1.0


def _counting_process():
  """A measured process over SERVER values: counts its calls, returns the
  value doubled and measures the count."""

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_server(F))
  def next_fn(state, value):
    count = tff.federated_map(_plus_one, state)
    doubled = tff.federated_map(_add, (value, value))
    return tff.templates.MeasuredProcessOutput(
        state=count, result=doubled,
        measurements=tff.federated_zip(collections.OrderedDict(calls=count)))

  return tff.templates.MeasuredProcess(_zero_at_server, next_fn)


def test_a_measured_process_returns_its_output():
  process = _counting_process()
  assert str(process.next.type_signature) == (
      '(<state=float32@SERVER,value=float32@SERVER> -> <state=float32@SERVER,'
      'result=float32@SERVER,measurements=<calls=float32>@SERVER>)')
  output = process.next(process.initialize(), 3.0)
  assert isinstance(output, tff.templates.MeasuredProcessOutput)
  output = process.next(output.state, output.result)
  assert float(output.result) == 12.0
  assert output.measurements == collections.OrderedDict(calls=2.0)
  assert str(process.state_type) == 'float32@SERVER'
  assert not isinstance(process, tff.templates.IterativeProcess)


def test_a_measured_process_must_return_its_output():

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_server(F))
  def pair(state, value):
    return state, value

  with pytest.raises(tff.FederatedError, match='MeasuredProcessOutput'):
    tff.templates.MeasuredProcess(_zero_at_server, pair)

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_server(F))
  def other_state(state, value):
    return tff.templates.MeasuredProcessOutput(
        tff.federated_value(1, tff.SERVER), value, state)

  with pytest.raises(tff.FederatedError, match='returns a state of type'):
    tff.templates.MeasuredProcess(_zero_at_server, other_state)

  @tff.federated_computation()
  def int_state():
    return tff.federated_value(0, tff.SERVER)

  with pytest.raises(tff.FederatedError, match='initialize_fn returns'):
    tff.templates.MeasuredProcess(int_state, pair)


def test_the_building_block_of_federated_averaging_keeps_its_signature():
  """Before TFF's, the name took (initialize, next, value_spec, ...)."""

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_clients(F2),
                             tff.type_at_clients(F))
  def mean_next(state, value, weight):
    return state, tff.federated_mean(value, weight)

  block = tff.templates.MeasuredProcess(
      tff.tf_computation(lambda: tf.constant(0.0)), mean_next, F2,
      name='mean')
  assert isinstance(block, measured_process.MeasuredProcess)
  assert block.value_spec == F2 and not block.has_client_state


# ----------------------------------------------------------------------------
# AggregationProcess


@tff.federated_computation()
def _no_state():
  return tff.federated_value((), tff.SERVER)


def test_an_aggregation_process_checks_its_placements():

  @tff.federated_computation(_no_state.type_signature.result,
                             tff.type_at_clients(F), tff.type_at_clients(F))
  def weighted_sum(state, value, weight):
    return tff.templates.MeasuredProcessOutput(
        state, tff.federated_mean(value, weight),
        tff.federated_value((), tff.SERVER))

  process = tff.templates.AggregationProcess(_no_state, weighted_sum)
  assert process.is_weighted
  assert isinstance(process, tff.templates.MeasuredProcess)
  output = process.next(process.initialize(), np.float32([1.0, 4.0]),
                        np.float32([3.0, 1.0]))
  assert float(output.result) == 1.75 and output.measurements == ()

  @tff.federated_computation(_no_state.type_signature.result,
                             tff.type_at_server(F))
  def at_server(state, value):
    return tff.templates.MeasuredProcessOutput(state, value, state)

  with pytest.raises(tff.FederatedError, match='must be placed at CLIENTS'):
    tff.templates.AggregationProcess(_no_state, at_server)

  @tff.federated_computation(_no_state.type_signature.result,
                             tff.type_at_clients(F))
  def result_at_clients(state, value):
    return tff.templates.MeasuredProcessOutput(state, value, state)

  with pytest.raises(tff.FederatedError, match='result of next_fn'):
    tff.templates.AggregationProcess(_no_state, result_at_clients)

  @tff.federated_computation(tff.type_at_server(()), tff.type_at_clients(F))
  def summed(state, value):
    return tff.templates.MeasuredProcessOutput(
        state, tff.federated_sum(value), state)

  with pytest.raises(tff.FederatedError, match='must be a federated_comp'):
    tff.templates.AggregationProcess(tff.tf_computation(lambda: ()), summed)
  assert not tff.templates.AggregationProcess(_no_state, summed).is_weighted


# ----------------------------------------------------------------------------
# EstimationProcess


@tff.federated_computation(tff.type_at_server(F))
def _report(state):
  return tff.federated_map(_plus_one, state)


def _max_of_clients():
  """Estimates the largest client value seen so far; reports it plus one."""

  @tff.tf_computation(F, F)
  def bigger(a, b):
    return tf.maximum(a, b)

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_clients(F))
  def next_fn(state, value):
    return tff.federated_map(bigger, (state, tff.federated_max(value)))

  return tff.templates.EstimationProcess(_zero_at_server, next_fn, _report)


def test_an_estimation_process_reports_and_maps():
  process = _max_of_clients()
  state = process.next(process.initialize(), [2.0, 5.0, 1.0])
  assert float(state) == 5.0
  assert float(process.report(state)) == 6.0
  assert str(process.report.type_signature) == (
      '(float32@SERVER -> float32@SERVER)')
  doubled = process.map(tff.federated_computation(
      lambda x: tff.federated_map(_add, (x, x)), tff.type_at_server(F)))
  assert float(doubled.report(state)) == 12.0
  # A tf_computation maps too (TFF takes federated computations only).
  assert float(process.map(_plus_one).report(state)) == 7.0
  assert isinstance(doubled, tff.templates.EstimationProcess)


def test_an_estimation_process_compiles_with_empty_metrics():
  process = _max_of_clients()
  assert isinstance(process, tff.templates.IterativeProcess)
  state, metrics = _both_ways(process, np.float32(1.0), [3.0, -2.0])
  assert float(state) == 3.0 and metrics == ()


def test_an_estimation_process_report_must_take_the_state():
  with pytest.raises(tff.FederatedError, match='report_fn must take'):
    tff.templates.EstimationProcess(
        _zero_at_server, _max_of_clients().next,
        tff.federated_computation(lambda x: x, tff.type_at_clients(F)))
  with pytest.raises(tff.FederatedError, match='map_fn must take'):
    _max_of_clients().map(tff.federated_computation(
        lambda x: x, tff.type_at_server(tf.int32)))
