"""TFF 0.87's `tff.learning.templates`: a learning process composed of a
distributor, a client work, an aggregator and a finalizer, as TFF's users
compose one. The expected numbers were printed by TensorFlow Federated 0.87
for the same model, data and blocks."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from tff_087_examples import client_data
from tff_087_examples import functional_model
from tff_087_examples import INPUT_SPEC
from tff_087_examples import model_fn

# TFF 0.87, two rounds of build_weighted_fed_avg(client sgdm 0.1, server sgdm
# 1.0) from zero weights: the kernel's first row and the bias (as recorded
# in test_tff_087_fed_avg.py), and one round with uniform client weights.
TFF_WEIGHTED = [
    ([-0.115, 0.0685, 0.0465], [0.1213, -0.0369, -0.0844]),
    ([-0.2132, 0.1287, 0.0845], [0.2245, -0.0658, -0.1587]),
]
TFF_UNIFORM = ([-0.1019, 0.0644, 0.0375], [0.1134, -0.033, -0.0805])

# TFF 0.87, two rounds of the tutorial's gradient-clipping client work
# (client sgdm 0.1, server sgdm 1.0) on `clipping_data()`: the clip acts on
# every batch but the first of round 2 (gradient norm 0.95).
TFF_CLIPPED = [
    ([-0.092406, 0.058399, 0.034007], [0.069556, -0.014066, -0.05549]),
    ([-0.183347, 0.116363, 0.066985], [0.137368, -0.026358, -0.11101]),
]

@tff.tensorflow.computation
def initial_model_weights_fn():
  return tff.learning.models.ModelWeights.from_model(model_fn())


WEIGHTS_TYPE = initial_model_weights_fn.type_signature.result


def _fed_avg_blocks(client_weighting=None, client_learning_rate=0.1):
  distributor = tff.learning.templates.build_broadcast_process(WEIGHTS_TYPE)
  client_work = tff.learning.templates.build_model_delta_client_work(
      model_fn, tff.learning.optimizers.build_sgdm(client_learning_rate),
      client_weighting or tff.learning.ClientWeighting.NUM_EXAMPLES)
  aggregator = tff.aggregators.MeanFactory().create(
      WEIGHTS_TYPE.trainable, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0), WEIGHTS_TYPE)
  return distributor, client_work, aggregator, finalizer


def _compose(*blocks):
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn, *blocks)


def _first_row_and_bias(weights):
  kernel, bias = weights.trainable
  return np.asarray(kernel)[0], np.asarray(bias)


def _assert_weights(process, state, expected):
  row, bias = _first_row_and_bias(process.get_model_weights(state))
  np.testing.assert_allclose(row, expected[0], atol=1e-4)
  np.testing.assert_allclose(bias, expected[1], atol=1e-4)


def _rounds(process, data, count):
  state, outputs = process.initialize(), []
  for _ in range(count):
    output = process.next(state, data)
    state = output.state
    outputs.append(output)
  return outputs


def test_tffs_default_blocks_compose_into_build_weighted_fed_avg():
  composed = _compose(*_fed_avg_blocks())
  built = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  assert str(composed.next.type_signature) == str(built.next.type_signature)
  data = client_data()
  for ours, theirs, expected in zip(_rounds(composed, data, 2),
                                    _rounds(built, data, 2), TFF_WEIGHTED):
    _assert_weights(composed, ours.state, expected)
    tf.nest.map_structure(np.testing.assert_array_equal, ours.state,
                          theirs.state, check_types=False)
    assert ours.metrics == theirs.metrics
  assert set(ours.metrics) == {'distributor', 'client_work', 'aggregator',
                               'finalizer'}
  assert ours.metrics['client_work']['train']['num_examples'] == 8
  assert ours.metrics['finalizer'] == collections.OrderedDict(
      update_non_finite=0)


def test_the_state_is_tffs_learning_algorithm_state():
  process = _compose(*_fed_avg_blocks())
  state = process.initialize()
  assert isinstance(state, tff.learning.templates.LearningAlgorithmState)
  assert state.distributor == ()
  assert state.client_work == collections.OrderedDict(
      learning_rate=pytest.approx(0.1))
  assert state.aggregator == collections.OrderedDict(
      value_sum_process=(), weight_sum_process=())
  assert state.finalizer == collections.OrderedDict(
      learning_rate=pytest.approx(1.0))
  assert process.get_hparams(state) == collections.OrderedDict(
      client_work=collections.OrderedDict(learning_rate=pytest.approx(0.1)),
      finalizer=collections.OrderedDict(learning_rate=pytest.approx(1.0)))


def test_set_hparams_sets_the_client_and_server_learning_rates():
  process = _compose(*_fed_avg_blocks())
  state = process.initialize()
  hparams = process.get_hparams(state)
  hparams['client_work']['learning_rate'] = np.float32(0.0)
  still = process.set_hparams(state, hparams)
  assert float(still.client_work['learning_rate']) == 0.0
  output = process.next(still, client_data())
  np.testing.assert_array_equal(  # Clients that do not move send nothing.
      process.get_model_weights(output.state).trainable[1], np.zeros(3))


def test_uniform_client_weighting_counts_every_client_the_same():
  process = _compose(*_fed_avg_blocks(tff.learning.ClientWeighting.UNIFORM))
  (output,) = _rounds(process, client_data(), 1)
  _assert_weights(process, output.state, TFF_UNIFORM)


def test_the_functional_client_work_trains_as_the_model_delta_one():
  blocks = list(_fed_avg_blocks())
  functional = tff.learning.templates.build_functional_model_delta_client_work(
      model=functional_model(),
      optimizer=tff.learning.optimizers.build_sgdm(0.1),
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)
  assert functional.get_hparams(()) == collections.OrderedDict()
  blocks[1] = functional
  process = _compose(*blocks)
  assert process.initialize().client_work == ()
  (output,) = _rounds(process, client_data(), 1)
  _assert_weights(process, output.state, TFF_WEIGHTED[0])


def test_a_composed_process_compiles_and_its_form_runs_the_same_rounds():
  process = _compose(*_fed_avg_blocks())
  form = tff.compile(process)
  data = client_data()
  state = form.initialize()
  for local in _rounds(process, data, 2):
    state, metrics = tff.run_round(form, state, data)
    np.testing.assert_allclose(
        state.global_model_weights.trainable[0],
        local.state.global_model_weights.trainable[0], atol=1e-6)
    assert float(metrics['client_work']['train']['loss']) == pytest.approx(
        float(local.metrics['client_work']['train']['loss']))


# The tutorial's client work, written against our FunctionalModel: TFF's
# `model.predict_on_batch` and `model.loss` are `loss_and_metrics` here.
# The update is initial minus trained weights, which the server optimizer
# descends (the tutorial's own sends trained minus initial: see
# tests/canonical/tff_087_tutorials/test_composing_learning_algorithms.py).
@tf.function
def clipped_client_update(model, dataset, initial_weights, client_optimizer):
  num_examples = 0.0
  trainable_weights, non_trainable_weights = (
      initial_weights.trainable, initial_weights.non_trainable)
  optimizer_state = client_optimizer.initialize(
      tf.nest.map_structure(tf.TensorSpec.from_tensor, trainable_weights))
  for batch in dataset:
    x, y = batch
    with tf.GradientTape() as tape:
      tape.watch(trainable_weights)
      loss = model.loss_and_metrics(
          tff.learning.models.ModelWeights(trainable_weights,
                                           non_trainable_weights),
          (x, y), training=True).loss
      num_examples += tf.cast(tf.shape(y)[0], tf.float32)
    grads = tape.gradient(loss, trainable_weights)
    gradient_norm = tf.linalg.global_norm(grads)
    if gradient_norm > 1:
      grads = tf.nest.map_structure(lambda g: g / gradient_norm, grads)
    optimizer_state, trainable_weights = client_optimizer.next(
        optimizer_state, trainable_weights, grads)
  client_update = tf.nest.map_structure(tf.subtract, initial_weights[0],
                                        trainable_weights)
  return tff.learning.templates.ClientResult(
      update=client_update, update_weight=num_examples)


def build_gradient_clipping_client_work(model, optimizer):
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(model.batch_spec))
  model_weights_type = tff.types.to_type(tf.nest.map_structure(
      lambda arr: tff.types.TensorType(shape=arr.shape, dtype=arr.dtype),
      tff.learning.models.ModelWeights(*model.initial_model_weights)))

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.tensorflow.computation(model_weights_type, data_type)
  def client_update_computation(model_weights, dataset):
    return clipped_client_update(model, dataset, model_weights, optimizer)

  @tff.federated_computation(
      initialize_fn.type_signature.result,
      tff.FederatedType(model_weights_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, model_weights, client_dataset):
    client_result = tff.federated_map(client_update_computation,
                                      (model_weights, client_dataset))
    measurements = tff.federated_value((), tff.SERVER)
    return tff.templates.MeasuredProcessOutput(state, client_result,
                                               measurements)

  return tff.learning.templates.ClientWorkProcess(initialize_fn, next_fn)


def clipping_data():
  rng = np.random.default_rng(0)

  def dataset(n):
    x = (1.5 * rng.normal(size=(n, 4))).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32).reshape(-1, 1)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)

  return [dataset(5), dataset(3)]


def _clipping_process():
  data = clipping_data()
  model = tff.learning.models.functional_model_from_keras(
      tf.keras.models.Sequential([
          tf.keras.layers.Input(shape=(4,)),
          tf.keras.layers.Dense(3, kernel_initializer='zeros')]),
      loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True),
      input_spec=data[0].element_spec)
  blocks = list(_fed_avg_blocks())
  blocks[1] = build_gradient_clipping_client_work(
      model, tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  return model, _compose(*blocks), data


def _mean_loss(model, weights, data):
  sums = [tff.learning.evaluate(model, weights, d) for d in data]
  return (sum(float(s['loss_sum']) for s in sums) /
          sum(float(s['num_examples']) for s in sums))


def test_a_custom_client_work_takes_tffs_clipped_steps_and_trains():
  model, process, data = _clipping_process()
  outputs = _rounds(process, data, 6)
  for output, expected in zip(outputs, TFF_CLIPPED):
    _assert_weights(process, output.state, expected)
  assert outputs[0].metrics == collections.OrderedDict(
      distributor=(), client_work=(),
      aggregator=collections.OrderedDict(mean_value=(), mean_weight=()),
      finalizer=collections.OrderedDict(update_non_finite=0))
  initial = _mean_loss(model, model.initial_model_weights, data)
  trained = _mean_loss(
      model, process.get_model_weights(outputs[-1].state), data)
  assert trained < 0.8 * initial


def test_a_custom_client_work_compiles_saves_and_loads(tmp_path):
  _, process, data = _clipping_process()
  tff.save(tff.compile(process), str(tmp_path / 'form.pb'))
  form = tff.load(str(tmp_path / 'form.pb'))
  state, metrics = tff.run_round(form, form.initialize(), data)
  np.testing.assert_allclose(
      np.asarray(state.global_model_weights.trainable[1]),
      TFF_CLIPPED[0][1], atol=1e-4)
  assert int(metrics['finalizer']['update_non_finite']) == 0


def _counting_distributor():
  """A distributor that counts its rounds, and measures the count."""

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(0, tff.SERVER)

  add_one = tff.tensorflow.computation(lambda n: n + 1, tf.int32)

  @tff.federated_computation(tff.FederatedType(tf.int32, tff.SERVER),
                             tff.FederatedType(WEIGHTS_TYPE, tff.SERVER))
  def next_fn(state, weights):
    count = tff.federated_map(add_one, state)
    return tff.templates.MeasuredProcessOutput(
        count, tff.federated_broadcast(weights),
        tff.federated_zip(collections.OrderedDict(rounds=count)))

  return tff.learning.templates.DistributionProcess(init_fn, next_fn)


def test_each_blocks_state_is_kept_and_measured():
  blocks = list(_fed_avg_blocks())
  blocks[0] = _counting_distributor()
  outputs = _rounds(_compose(*blocks), client_data(), 2)
  assert [o.state.distributor for o in outputs] == [1, 2]
  assert outputs[1].metrics['distributor'] == collections.OrderedDict(
      rounds=2)
  _assert_weights(_compose(*blocks), outputs[1].state, TFF_WEIGHTED[1])


def test_build_weighted_fed_avg_takes_a_model_distributor():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(0.1),
      model_distributor=_counting_distributor())
  (output,) = _rounds(process, client_data(), 1)
  assert output.state.distributor == 1
  _assert_weights(process, output.state, TFF_WEIGHTED[0])


def _nan_client_work():
  """Client work whose every client sends a NaN update."""
  data_type = tff.SequenceType(INPUT_SPEC)

  @tff.tensorflow.computation(WEIGHTS_TYPE, data_type)
  def nan_update(weights, dataset):
    del dataset
    return tff.learning.templates.ClientResult(
        update=tf.nest.map_structure(lambda w: w + np.nan,
                                     weights.trainable),
        update_weight=tf.constant(1.0))

  @tff.federated_computation
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(WEIGHTS_TYPE, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, data):
    return tff.templates.MeasuredProcessOutput(
        state, tff.federated_map(nan_update, (weights, data)),
        tff.federated_value((), tff.SERVER))

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)


def test_a_non_finite_update_is_rejected_by_the_finalizer():
  blocks = list(_fed_avg_blocks())
  blocks[1] = _nan_client_work()
  (output,) = _rounds(_compose(*blocks), client_data(), 1)
  assert output.metrics['finalizer'] == collections.OrderedDict(
      update_non_finite=1)
  np.testing.assert_array_equal(
      output.state.global_model_weights.trainable[0], np.zeros([4, 3]))


def test_should_reject_update_decides_and_measures():

  def reject_large(state, update):
    del state
    norm = tf.linalg.global_norm(update)
    return norm > 0.1, collections.OrderedDict(norm=norm)

  blocks = list(_fed_avg_blocks())
  blocks[3] = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0), WEIGHTS_TYPE,
      should_reject_update=reject_large)
  (output,) = _rounds(_compose(*blocks), client_data(), 1)
  assert output.metrics['finalizer']['norm'] > 0.1
  np.testing.assert_array_equal(
      output.state.global_model_weights.trainable[1], np.zeros(3))


def test_an_unweighted_aggregator_is_refused():
  distributor, client_work, _, finalizer = _fed_avg_blocks()
  unweighted = tff.aggregators.UnweightedMeanFactory().create(
      WEIGHTS_TYPE.trainable)
  with pytest.raises(TypeError, match='model_update_aggregator must be '
                     'weighted'):
    _compose(distributor, client_work, unweighted, finalizer)


def test_blocks_that_do_not_fit_are_named():
  distributor, client_work, aggregator, _ = _fed_avg_blocks()
  other_weights = tff.learning.models.ModelWeights(
      (tf.TensorSpec([2], tf.float32),), ())
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0), other_weights)
  with pytest.raises(TypeError, match='the finalizer takes the weights as '
                     r'<trainable=<float32\[2\]>'):
    _compose(distributor, client_work, aggregator, finalizer)


def test_a_block_of_the_wrong_kind_is_named():
  distributor, client_work, aggregator, finalizer = _fed_avg_blocks()
  with pytest.raises(TypeError, match='client_work must be a '
                     'ClientWorkProcess'):
    _compose(distributor, aggregator, aggregator, finalizer)
  with pytest.raises(TypeError, match='initial_model_weights_fn must be a '
                     'tf_computation with no parameter'):
    tff.learning.templates.compose_learning_process(
        lambda: None, distributor, client_work, aggregator, finalizer)


def test_a_client_work_must_return_a_client_result_at_clients():

  @tff.federated_computation
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  data_type = tff.SequenceType(INPUT_SPEC)
  weigh = tff.tensorflow.computation(lambda w: w.trainable, WEIGHTS_TYPE)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(WEIGHTS_TYPE, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, data):
    del data
    return tff.templates.MeasuredProcessOutput(
        state, tff.federated_map(weigh, weights),
        tff.federated_value((), tff.SERVER))

  with pytest.raises(TypeError, match='ClientResult'):
    tff.learning.templates.ClientWorkProcess(init_fn, next_fn)


def test_a_distributor_must_deliver_to_the_clients():

  @tff.federated_computation
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(WEIGHTS_TYPE, tff.SERVER))
  def next_fn(state, weights):
    return tff.templates.MeasuredProcessOutput(
        state, weights, tff.federated_value((), tff.SERVER))

  with pytest.raises(TypeError, match='result of next_fn.*must be placed at '
                     'CLIENTS'):
    tff.learning.templates.DistributionProcess(init_fn, next_fn)


def test_the_optimizer_finalizer_takes_model_weights_only():
  with pytest.raises(TypeError, match='ModelWeights'):
    tff.learning.templates.build_apply_optimizer_finalizer(
        tff.learning.optimizers.build_sgdm(1.0), WEIGHTS_TYPE.trainable)
  with pytest.raises(TypeError, match='client_weighting'):
    tff.learning.templates.build_model_delta_client_work(
        model_fn, tff.learning.optimizers.build_sgdm(0.1), 'NUM_EXAMPLES')
