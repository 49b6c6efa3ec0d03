"""TensorFlow Federated 0.87's `chain_measured_processes` and
`concatenate_measured_processes`, as a TFF user writes them; the numbers and
type signatures were printed by TFF 0.87 for the same programs."""

import collections

import numpy as np
import pytest

import canonical as tff

A = tff.aggregators
F = tff.TensorType(np.float32)
F3 = tff.TensorType(np.float32, [3])
FLOATS = [np.array([0.1, -0.2, 0.3], np.float32),
          np.array([1.0, 2.0, -2.0], np.float32),
          np.array([30.0, -40.0, 0.0], np.float32)]


@tff.tensorflow.computation(np.float32, np.float32)
def _mul(x, y):
  return x * y


@tff.tensorflow.computation(np.float32)
def _plus_one(x):
  return x + 1.0


@tff.federated_computation()
def _scale_init():
  return tff.federated_value(2.0, tff.SERVER)


@tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                           tff.FederatedType(np.float32, tff.CLIENTS))
def _scale_next(state, value):
  scaled = tff.federated_map(_mul, (value, tff.federated_broadcast(state)))
  return tff.templates.MeasuredProcessOutput(
      state=tff.federated_map(_plus_one, state), result=scaled,
      measurements=tff.federated_sum(value))


def _scale():
  """Scales client values by the round's factor (2, 3, ...) at CLIENTS."""
  return tff.templates.MeasuredProcess(_scale_init, _scale_next)


def test_a_chain_feeds_each_result_to_the_next_as_tff_087():
  chain = tff.templates.chain_measured_processes(collections.OrderedDict(
      scale=_scale(), sum=A.SumFactory().create(F)))
  assert isinstance(chain, tff.templates.MeasuredProcess)
  assert str(chain.next.type_signature) == (
      '(<state=<scale=float32,sum=<>>@SERVER,values={float32}@CLIENTS> -> '
      '<state=<scale=float32,sum=<>>@SERVER,result=float32@SERVER,'
      'measurements=<scale=float32,sum=<>>@SERVER>)')
  assert str(chain.initialize.type_signature) == (
      '( -> <scale=float32,sum=<>>@SERVER)')
  state = chain.initialize()
  # TFF 0.87: results 16 and 24, measurements (scale=8, sum=()).
  for expected, factor in ((16.0, 3.0), (24.0, 4.0)):
    output = chain.next(state, [1.0, 2.0, 5.0])
    assert float(output.result) == expected
    assert output.measurements == collections.OrderedDict(scale=8.0, sum=())
    assert output.state == collections.OrderedDict(scale=factor, sum=())
    state = output.state


def _parts():
  return collections.OrderedDict(
      s=A.SumFactory().create(F), m=A.UnweightedMeanFactory().create(F3),
      h=A.HadamardTransformFactory(seed=12345).create(F3))


_UMEAN = [10.366666793823242, -12.733333587646484, -0.5666666626930237]
_SUM = [31.099998474121094, -38.20000076293945, -1.6999998092651367]


def _check_concatenated(output, round_number):
  # TFF 0.87, with the Hadamard seed (12345, 0).
  assert list(output.result) == ['s', 'm', 'h']
  assert float(output.result['s']) == 8.0
  np.testing.assert_allclose(output.result['m'], _UMEAN, rtol=1e-6)
  np.testing.assert_allclose(output.result['h'], _SUM, rtol=1e-6, atol=2e-6)
  assert output.measurements == collections.OrderedDict(
      s=(), m=collections.OrderedDict(mean_value=(), mean_count=()),
      h=collections.OrderedDict(hd=()))
  np.testing.assert_array_equal(output.state['h'][1], [12345, round_number])


def test_a_concatenation_runs_the_parts_side_by_side_as_tff_087():
  concatenated = tff.templates.concatenate_measured_processes(_parts())
  # TFF 0.87 takes the values as <s={float32}@CLIENTS,...>; here they are
  # one CLIENTS value.
  assert str(concatenated.next.type_signature) == (
      '(<state=<s=<>,m=<<>,<>>,h=<<>,int64[2]>>@SERVER,values={<s=float32,'
      'm=float32[3],h=float32[3]>}@CLIENTS> -> <state=<s=<>,m=<<>,<>>,h=<<>,'
      'int64[2]>>@SERVER,result=<s=float32@SERVER,m=float32[3]@SERVER,'
      'h=float32[3]@SERVER>,measurements=<s=<>,m=<mean_value=<>,mean_count='
      '<>>,h=<hd=<>>>@SERVER>)')
  assert str(concatenated.initialize.type_signature) == (
      '( -> <s=<>,m=<<>,<>>,h=<<>,int64[2]>>@SERVER)')
  state = concatenated.initialize()
  for number in (1, 2):  # TFF's form of the values: a list per name.
    output = concatenated.next(state, collections.OrderedDict(
        s=[1.0, 2.0, 5.0], m=FLOATS, h=FLOATS))
    _check_concatenated(output, number)
    state = output.state
  # Ours: one value per client.
  output = concatenated.next(concatenated.initialize(), [
      collections.OrderedDict(s=s, m=v, h=v)
      for s, v in zip((1.0, 2.0, 5.0), FLOATS)])
  _check_concatenated(output, 1)


def test_a_concatenation_composes_into_a_round_that_compiles():
  concatenated = tff.templates.concatenate_measured_processes(_parts())

  @tff.federated_computation(
      concatenated.state_type,
      tff.type_at_clients(collections.OrderedDict(s=F, v=F3)))
  def next_fn(state, data):
    output = concatenated.next(state, collections.OrderedDict(
        s=data['s'], m=data['v'], h=data['v']))  # TFF's form, zipped here.
    return output.state, (output.result, output.measurements)

  process = tff.IterativeProcess(concatenated.initialize, next_fn)
  form = tff.compile(process)
  clients = [collections.OrderedDict(s=np.float32(s), v=v)
             for s, v in zip((1.0, 2.0, 5.0), FLOATS)]
  state, (result, measurements) = tff.run_round(form, form.initialize(),
                                                clients)
  _check_concatenated(tff.templates.MeasuredProcessOutput(
      state, result, measurements), 1)


def test_compositions_refuse_what_they_cannot_compose():
  with pytest.raises(tff.Error, match='non-empty OrderedDict'):
    tff.templates.chain_measured_processes([_scale()])
  with pytest.raises(tff.Error, match="'m' must be a MeasuredProcess"):
    tff.templates.concatenate_measured_processes(
        collections.OrderedDict(m=A.SumFactory()))
  with pytest.raises(tff.Error, match="the next of 'again' takes .*CLIENTS"):
    tff.templates.chain_measured_processes(collections.OrderedDict(
        sum=A.SumFactory().create(F), again=A.SumFactory().create(F)))
  with pytest.raises(tff.Error, match="'m'.*must take \\(state, value\\)"):
    tff.templates.concatenate_measured_processes(collections.OrderedDict(
        m=A.MeanFactory().create(F, F)))


@tff.federated_computation(tff.type_at_server(F), tff.type_at_server(F))
def _server_next(state, value):
  return tff.templates.MeasuredProcessOutput(state, value, state)


def test_a_concatenation_of_values_at_two_placements_is_refused():
  at_server = tff.templates.MeasuredProcess(_scale_init, _server_next)
  with pytest.raises(tff.Error, match='different placements'):
    tff.templates.concatenate_measured_processes(collections.OrderedDict(
        a=at_server, b=A.SumFactory().create(F)))
