"""TFF 0.87's forms beyond the compiler's own: `MapReduceForm` built from
TFF's ten pieces, `BroadcastForm` and `DistributeAggregateForm` with their
ways back to a computation, and local processing as one tf_computation.
Types and values were printed by TFF 0.87 for the same programs (the
test context for the secure sum); where ours differs a comment says how."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
import canonical as tff

mr = tff.backends.mapreduce
F = np.float32
READINGS = [[F(60), F(70)], [F(80)], [F(50), F(90), F(100)]]
CONTEXT = collections.OrderedDict(max_temperature=np.float32)
COUNT = collections.OrderedDict(num_total=np.int32)


@tff.tensorflow.computation(np.float32)
def prepare(state):
  return collections.OrderedDict(max_temperature=state)


@tff.tensorflow.computation(tff.SequenceType(np.float32), CONTEXT)
def work(data, context):
  above = data.reduce(np.int32(0), lambda c, x: c + tf.cast(
      x > context['max_temperature'], tf.int32))
  total = data.reduce(np.int32(0), lambda c, x: c + 1)
  return (collections.OrderedDict(num_readings=total),
          collections.OrderedDict(above=above), (), ())


@tff.tensorflow.computation
def zero():
  return collections.OrderedDict(num_total=np.int32(0))


@tff.tensorflow.computation(COUNT,
                            collections.OrderedDict(num_readings=np.int32))
def accumulate(a, u):
  return collections.OrderedDict(num_total=a['num_total'] + u['num_readings'])


@tff.tensorflow.computation(COUNT, COUNT)
def merge(a, b):
  return collections.OrderedDict(num_total=a['num_total'] + b['num_total'])


@tff.tensorflow.computation(COUNT)
def report(a):
  return a


@tff.tensorflow.computation
def bitwidth():
  return collections.OrderedDict(above=np.int32(8))


@tff.tensorflow.computation
def no_secure_sum():
  return ()


@tff.tensorflow.computation(
    np.float32, (COUNT, collections.OrderedDict(above=np.int32), (), ()))
def update(state, aggregates):
  counted, secure, _, _ = aggregates
  ratio = tf.cast(secure['above'], tf.float32) / tf.cast(
      counted['num_total'], tf.float32)
  return state + 1.0, collections.OrderedDict(ratio_over_threshold=ratio)


ROUND_TYPE = tff.FunctionType(
    tff.StructType([
        ('state', tff.FederatedType(np.float32, tff.SERVER)),
        ('data', tff.FederatedType(tff.SequenceType(np.float32),
                                   tff.CLIENTS))]),
    tff.StructType([
        tff.FederatedType(np.float32, tff.SERVER),
        tff.FederatedType(collections.OrderedDict(
            ratio_over_threshold=np.float32), tff.SERVER)]))
ROUND_TEXT = ('(<state=float32@SERVER,data={float32*}@CLIENTS> -> '
              '<float32@SERVER,<ratio_over_threshold=float32>@SERVER>)')


def _temperature_form(**overrides):
  pieces = dict(type_signature=ROUND_TYPE, prepare=prepare, work=work,
                zero=zero, accumulate=accumulate, merge=merge, report=report,
                secure_sum_bitwidth=bitwidth,
                secure_sum_max_input=no_secure_sum,
                secure_modular_sum_modulus=no_secure_sum, update=update)
  pieces.update(overrides)
  return mr.MapReduceForm(*pieces.values())


def test_a_map_reduce_form_built_from_tffs_pieces_runs_its_round():
  mrf = _temperature_form()
  assert isinstance(mrf, mr.MapReduceForm)
  assert isinstance(mrf, tff.CanonicalForm)
  # As TFF 0.87 prints and gives them.
  assert str(mrf.type_signature) == ROUND_TEXT
  assert (mrf.server_state_label, mrf.client_data_label) == ('state', 'data')
  assert mrf.securely_aggregates_tensors
  assert mrf.secure_sum_bitwidth() == {'above': 8}
  comp = mr.get_computation_for_map_reduce_form(mrf)
  assert str(comp.type_signature) == ROUND_TEXT
  state, output = comp(F(75.0), READINGS)
  assert (state, output['ratio_over_threshold']) == (76.0, 0.5)  # TFF 0.87
  # The form runs as any form: its secure sum under masks.
  datasets = [tf.data.Dataset.from_tensor_slices(r) for r in READINGS]
  state, output = tff.run_round(mrf, F(75.0), datasets, secure_seed=3)
  assert (float(state), float(output['ratio_over_threshold'])) == (76.0, 0.5)


@pytest.mark.slow
def test_a_map_reduce_form_runs_on_beam(tmp_path):
  mrf = _temperature_form()
  path = tff.save(mrf, str(tmp_path / 'form.pb'))
  loaded = tff.load(path)
  assert isinstance(loaded, mr.MapReduceForm)
  assert str(loaded.type_signature) == ROUND_TEXT
  result = beam_runner.run(
      path, {f'c{i}': tf.data.Dataset.from_tensor_slices(r)
             for i, r in enumerate(READINGS)},
      rounds=1, clients_per_round=3, output_dir=str(tmp_path / 'run'),
      seed=0)
  # From the form's initialize (zeros: TFF's form has none): 1 of 6 readings
  # is not above 0.
  local_state, local_output = tff.run_round(
      mrf, mrf.initialize(), [tf.data.Dataset.from_tensor_slices(r)
                              for r in READINGS], secure_seed=1)
  assert float(result.state) == float(local_state) == 1.0
  assert result.outcomes[-1]['metrics'] == {
      'ratio_over_threshold': pytest.approx(
          float(local_output['ratio_over_threshold']))}


def test_pieces_that_do_not_connect_are_refused_by_name():

  @tff.tensorflow.computation(np.int32)
  def prepare_int(state):
    return collections.OrderedDict(max_temperature=tf.cast(state, tf.float32))

  with pytest.raises(TypeError, match='do not connect'):
    _temperature_form(prepare=prepare_int)
  with pytest.raises(TypeError, match='work must return <U, bitwidth'):
    _temperature_form(work=merge)
  with pytest.raises(TypeError, match='type_signature is'):
    _temperature_form(type_signature=tff.FunctionType(
        ROUND_TYPE.parameter, ROUND_TYPE.parameter))
  with pytest.raises(TypeError, match='zero must be a typed'):
    _temperature_form(zero=lambda: 0)


@tff.tensorflow.computation(np.float32)
def plus_one(x):
  return x + 1.0


@tff.tensorflow.computation(np.float32, np.float32)
def scale(context, x):
  return x * context


def test_a_broadcast_form_gives_back_its_computation():
  bf = mr.BroadcastForm(plus_one, scale, server_data_label='server_data',
                        client_data_label='client_data')
  comp = mr.get_computation_for_broadcast_form(bf)
  # As TFF 0.87 prints it and computes.
  assert str(comp.type_signature) == (
      '(<server_data=float32@SERVER,client_data={float32}@CLIENTS> -> '
      '{float32}@CLIENTS)')
  assert list(comp(F(2.0), [F(5.0), F(1.0)])) == [15.0, 3.0]
  again = mr.get_broadcast_form_for_computation(comp)
  assert again.client_processing(again.compute_server_context(F(2.0)),
                                 F(5.0)) == 15.0
  with pytest.raises(TypeError, match='takes the context as int32'):
    mr.BroadcastForm(plus_one, tff.tensorflow.computation(
        lambda c, x: x, np.int32, np.float32))
  with pytest.raises(AttributeError):
    bf.client_processing = scale  # Read-only, as TFF's.


@tff.tensorflow.computation(np.float32, np.float32)
def times(x, s):
  return x * s


@tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                           tff.FederatedType(np.float32, tff.CLIENTS))
def next_round(state, data):
  s = tff.federated_broadcast(state)
  scaled = tff.federated_map(times, (data, s))
  return tff.federated_sum(scaled), tff.federated_mean(data)


def test_a_distribute_aggregate_form_runs_the_round():
  daf = mr.get_distribute_aggregate_form_for_computation(next_round)
  assert isinstance(daf, mr.DistributeAggregateForm)
  text = '(<state=float32@SERVER,data={float32}@CLIENTS> -> '
  assert str(daf.type_signature) == (
      text + '<float32@SERVER,float32@SERVER>)')  # As TFF 0.87's.
  lines = []
  daf.summary(print_fn=lines.append)
  assert [line.split(':')[0].strip() for line in lines] == [
      'server_prepare', 'server_to_client_broadcast', 'client_work',
      'client_to_server_aggregation', 'server_result']
  # TFF 0.87: (<float32@SERVER> -> <float32@CLIENTS>); here one federated
  # value per parameter.
  assert str(daf.server_to_client_broadcast.type_signature) == (
      '(<float32>@SERVER -> <float32>@CLIENTS)')
  comp = mr.get_computation_for_distribute_aggregate_form(daf)
  assert str(comp.type_signature) == text + (
      '<float32@SERVER,float32@SERVER>)')
  assert tuple(comp(F(1.0), [F(1.0), F(2.0)])) == (3.0, 1.5)  # TFF 0.87.
  # The rebuilt round compiles to the same form.
  assert tff.run_round(mr.get_map_reduce_form_for_computation(comp),
                       F(1.0), [F(1.0), F(2.0)]) == (3.0, 1.5)


@pytest.mark.slow
def test_a_learning_round_as_a_distribute_aggregate_form():

  def model_fn():
    keras_model = tf.keras.Sequential(
        [tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, 2], tf.float32),
                    tf.TensorSpec([None, 1], tf.float32)))

  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  daf = mr.get_distribute_aggregate_form_for_computation(process.next)
  # TFF 0.87's rebuilt round, its result named by the round.
  assert str(daf.server_result.type_signature).split(' -> ')[1].startswith(
      '<state=')
  comp = mr.get_computation_for_distribute_aggregate_form(daf)
  data = [tf.data.Dataset.from_tensors((np.full([2, 2], c, F),
                                        np.ones([2, 1], F)))
          for c in (1.0, 2.0)]
  state = process.initialize()
  expected = process.next(state, data)
  got_state, got_metrics = comp(state, data)
  for got, want in zip(tf.nest.flatten((got_state, got_metrics)),
                       tf.nest.flatten((expected.state, expected.metrics))):
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_form_keeping_client_state_has_no_distribute_aggregate_form():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                             tff.FederatedType(np.float32, tff.CLIENTS),
                             tff.FederatedType(np.int32, tff.CLIENTS))
  def counting(state, data, count):
    return state, tff.federated_sum(data), tff.federated_map(
        tff.tensorflow.computation(lambda c: c + 1, np.int32), count)

  process = tff.templates.IterativeProcess(
      tff.tensorflow.computation(lambda: F(0.0)), counting,
      client_state_initializer=tff.tensorflow.computation(
          lambda: np.int32(0)))
  with pytest.raises(tff.FederatedError, match='client state'):
    mr.get_computation_for_map_reduce_form(mr.compile(process))


def test_local_processing_becomes_one_tf_computation():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER))
  def local(x):
    return tff.federated_map(plus_one, tff.federated_map(plus_one, x))

  config = tf.compat.v1.ConfigProto()
  extracted = mr.consolidate_and_extract_local_processing(local, config)
  assert str(extracted.type_signature) == '(float32 -> float32)'  # TFF 0.87
  assert extracted(F(2.0)) == 4.0
  assert mr.parse_tff_to_tf(local, config)(F(0.0)) == 2.0
  assert mr.parse_tff_to_tf(plus_one, config) is plus_one
  with pytest.raises(tff.FederatedError, match='federated_broadcast'):
    mr.consolidate_and_extract_local_processing(next_round, config)
  with pytest.raises(TypeError, match='ConfigProto'):
    mr.parse_tff_to_tf(local, None)


def test_grappler_defaults_are_tffs():
  # TFF 0.87's default is a ConfigProto; a ConfigProto has no effect here.
  assert isinstance(mr.form_utils.GRAPPLER_DEFAULT_CONFIG,
                    tf.compat.v1.ConfigProto)
  mrf = mr.get_map_reduce_form_for_computation(next_round)
  assert tff.run_round(mrf, F(1.0), [F(1.0), F(2.0)]) == (3.0, 1.5)
