"""TFF 0.87's "Implementing Custom Aggregations", its programs written as a
TFF user writes them, with only the import line changed: an
`UnweightedAggregationFactory` made minimal, then stateful with
measurements, then for structured values, then delegating to an inner
factory. Values and type signatures are the ones TFF 0.87 prints for the
same programs. Beyond the tutorial, the factory plugs into `MeanFactory` and
federated averaging, and that round compiles to a form."""

import collections

import keras
import numpy as np
import tensorflow as tf

import canonical as tff

client_data = [1.0, 2.0, 5.0]


class MinimalExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):

  def create(self, value_type):

    @tff.federated_computation()
    def initialize_fn():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(initialize_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      scaled_value = tff.federated_map(
          tff.tensorflow.computation(lambda x: x * 2.0), value)
      summed_value = tff.federated_sum(scaled_value)
      unscaled_value = tff.federated_map(
          tff.tensorflow.computation(lambda x: x / 2.0), summed_value)
      measurements = tff.federated_value((), tff.SERVER)
      return tff.templates.MeasuredProcessOutput(
          state=state, result=unscaled_value, measurements=measurements)

    return tff.templates.AggregationProcess(initialize_fn, next_fn)


class StatefulExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):

  def create(self, value_type):

    @tff.federated_computation()
    def initialize_fn():
      return tff.federated_value(0.0, tff.SERVER)

    @tff.federated_computation(initialize_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      new_state = tff.federated_map(
          tff.tensorflow.computation(lambda x: x + 1.0), state)
      state_at_clients = tff.federated_broadcast(new_state)
      scaled_value = tff.federated_map(
          tff.tensorflow.computation(lambda x, y: x * y),
          (value, state_at_clients))
      summed_value = tff.federated_sum(scaled_value)
      unscaled_value = tff.federated_map(
          tff.tensorflow.computation(lambda x, y: x / y),
          (summed_value, new_state))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=unscaled_value, measurements=summed_value)

    return tff.templates.AggregationProcess(initialize_fn, next_fn)


@tff.tensorflow.computation()
def scale(value, factor):
  return tf.nest.map_structure(lambda x: x * factor, value)


@tff.tensorflow.computation()
def unscale(value, factor):
  return tf.nest.map_structure(lambda x: x / factor, value)


@tff.tensorflow.computation()
def add_one(value):
  return value + 1.0


class StructuredExampleTaskFactory(
    tff.aggregators.UnweightedAggregationFactory):

  def create(self, value_type):

    @tff.federated_computation()
    def initialize_fn():
      return tff.federated_value(0.0, tff.SERVER)

    @tff.federated_computation(initialize_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      new_state = tff.federated_map(add_one, state)
      state_at_clients = tff.federated_broadcast(new_state)
      scaled_value = tff.federated_map(scale, (value, state_at_clients))
      summed_value = tff.federated_sum(scaled_value)
      unscaled_value = tff.federated_map(unscale, (summed_value, new_state))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=unscaled_value, measurements=summed_value)

    return tff.templates.AggregationProcess(initialize_fn, next_fn)


class ExampleTaskFactory(tff.aggregators.UnweightedAggregationFactory):

  def __init__(self, inner_factory=None):
    if inner_factory is None:
      inner_factory = tff.aggregators.SumFactory()
    self._inner_factory = inner_factory

  def create(self, value_type):
    inner_process = self._inner_factory.create(value_type)

    @tff.federated_computation()
    def initialize_fn():
      my_state = tff.federated_value(0.0, tff.SERVER)
      inner_state = inner_process.initialize()
      return tff.federated_zip((my_state, inner_state))

    @tff.federated_computation(initialize_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      my_state, inner_state = state
      my_new_state = tff.federated_map(add_one, my_state)
      my_state_at_clients = tff.federated_broadcast(my_new_state)
      scaled_value = tff.federated_map(scale, (value, my_state_at_clients))

      # Delegation to an inner factory, returning values placed at SERVER.
      inner_output = inner_process.next(inner_state, scaled_value)

      unscaled_value = tff.federated_map(
          unscale, (inner_output.result, my_new_state))

      new_state = tff.federated_zip((my_new_state, inner_output.state))
      measurements = tff.federated_zip(
          collections.OrderedDict(
              scaled_value=inner_output.result,
              example_task=inner_output.measurements))

      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=unscaled_value, measurements=measurements)

    return tff.templates.AggregationProcess(initialize_fn, next_fn)


def test_the_factories_tff_ships_are_weighted_or_not():
  assert isinstance(tff.aggregators.MeanFactory(),
                    tff.aggregators.WeightedAggregationFactory)
  assert isinstance(tff.aggregators.SumFactory(),
                    tff.aggregators.UnweightedAggregationFactory)
  assert isinstance(ExampleTaskFactory(),
                    tff.aggregators.UnweightedAggregationFactory)


def test_minimal_implementation():
  factory = MinimalExampleTaskFactory()
  aggregation_process = factory.create(tff.TensorType(np.float32))
  assert str(aggregation_process.initialize.type_signature) == (
      '( -> <>@SERVER)')
  assert str(aggregation_process.next.type_signature) == (
      '(<state=<>@SERVER,value={float32}@CLIENTS> -> <state=<>@SERVER,'
      'result=float32@SERVER,measurements=<>@SERVER>)')
  state = aggregation_process.initialize()
  output = aggregation_process.next(state, client_data)
  assert isinstance(output, tff.templates.MeasuredProcessOutput)
  assert output.result == 8.0
  assert output.state == () and output.measurements == ()


def test_statefulness_and_measurements():
  factory = StatefulExampleTaskFactory()
  aggregation_process = factory.create(tff.TensorType(np.float32))
  assert str(aggregation_process.initialize.type_signature) == (
      '( -> float32@SERVER)')
  assert str(aggregation_process.next.type_signature) == (
      '(<state=float32@SERVER,value={float32}@CLIENTS> -> <state=float32@'
      'SERVER,result=float32@SERVER,measurements=float32@SERVER>)')
  state = aggregation_process.initialize()
  results, measurements = [], []
  for _ in range(3):
    output = aggregation_process.next(state, client_data)
    state = output.state
    results.append(output.result)
    measurements.append(output.measurements)
  assert results == [8.0, 8.0, 8.0]
  assert measurements == [8.0, 16.0, 24.0]  # 8.0 * the round number.
  assert state == 3.0


def test_structured_types():
  structured_client_data = [[[1.0, 2.0], [3.0, 4.0, 5.0]],
                            [[1.0, 1.0], [3.0, 0.0, -5.0]]]
  factory = StructuredExampleTaskFactory()
  aggregation_process = factory.create(
      tff.to_type([(np.float32, (2,)), (np.float32, (3,))]))
  assert str(aggregation_process.next.type_signature) == (
      '(<state=float32@SERVER,value={<float32[2],float32[3]>}@CLIENTS> -> '
      '<state=float32@SERVER,result=<float32[2],float32[3]>@SERVER,'
      'measurements=<float32[2],float32[3]>@SERVER>)')
  state = aggregation_process.initialize()
  output = aggregation_process.next(state, structured_client_data)
  np.testing.assert_array_equal(output.result[0], [2.0, 3.0])
  np.testing.assert_array_equal(output.result[1], [6.0, 4.0, 0.0])


def test_inner_aggregations_with_the_default_sum():
  factory = ExampleTaskFactory()
  aggregation_process = factory.create(tff.TensorType(np.float32))
  assert str(aggregation_process.initialize.type_signature) == (
      '( -> <float32,<>>@SERVER)')
  assert str(aggregation_process.next.type_signature) == (
      '(<state=<float32,<>>@SERVER,value={float32}@CLIENTS> -> <state=<'
      'float32,<>>@SERVER,result=float32@SERVER,measurements=<scaled_value='
      'float32,example_task=<>>@SERVER>)')
  state = aggregation_process.initialize()
  assert state == (0.0, ())

  output = aggregation_process.next(state, client_data)
  assert output.result == 8.0
  assert output.measurements == collections.OrderedDict(
      scaled_value=8.0, example_task=())

  output = aggregation_process.next(output.state, client_data)
  assert output.result == 8.0
  assert output.measurements == collections.OrderedDict(
      scaled_value=16.0, example_task=())
  assert output.state == (2.0, ())


def test_inner_aggregations_with_an_example_task_inside():
  # Each factory multiplies by the round number: together by 1, 4, 9, ...
  factory = ExampleTaskFactory(ExampleTaskFactory())
  aggregation_process = factory.create(tff.TensorType(np.float32))
  assert str(aggregation_process.initialize.type_signature) == (
      '( -> <float32,<float32,<>>>@SERVER)')
  state = aggregation_process.initialize()

  output = aggregation_process.next(state, client_data)
  assert output.result == 8.0
  assert output.measurements == collections.OrderedDict(
      scaled_value=8.0,
      example_task=collections.OrderedDict(scaled_value=8.0,
                                           example_task=()))

  output = aggregation_process.next(output.state, client_data)
  assert output.result == 8.0
  assert output.measurements == collections.OrderedDict(
      scaled_value=16.0,
      example_task=collections.OrderedDict(scaled_value=32.0,
                                           example_task=()))
  assert output.state == (2.0, (2.0, ()))


def test_the_factory_composes_inside_a_weighted_mean():
  factory = tff.aggregators.MeanFactory(ExampleTaskFactory())
  aggregation_process = factory.create(tff.TensorType(np.float32),
                                       tff.TensorType(np.float32))
  assert str(aggregation_process.next.type_signature) == (
      '(<state=<value_sum_process=<float32,<>>,weight_sum_process=<>>@SERVER,'
      'value={float32}@CLIENTS,weight={float32}@CLIENTS> -> <state=<'
      'value_sum_process=<float32,<>>,weight_sum_process=<>>@SERVER,'
      'result=float32@SERVER,measurements=<mean_value=<scaled_value=float32,'
      'example_task=<>>,mean_weight=<>>@SERVER>)')
  output = aggregation_process.next(aggregation_process.initialize(),
                                    client_data, [1.0, 1.0, 2.0])
  assert output.result == 3.25  # (1 + 2 + 2 * 5) / 4
  assert output.measurements == collections.OrderedDict(
      mean_value=collections.OrderedDict(scaled_value=13.0, example_task=()),
      mean_weight=())


def _learning_data():
  rng = np.random.default_rng(0)
  datasets = []
  for _ in range(3):
    x = rng.normal(size=(6, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32).reshape(-1, 1)
    datasets.append(tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(3))
  return datasets


def test_the_factory_parameterizes_federated_averaging_and_compiles():
  data = _learning_data()

  def model_fn():
    keras_model = keras.models.Sequential([
        keras.layers.InputLayer(input_shape=(4,)),
        keras.layers.Dense(2, kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=data[0].element_spec,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  def build(model_aggregator):
    return tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
        model_aggregator=model_aggregator)

  learning_process = build(tff.aggregators.MeanFactory(ExampleTaskFactory()))
  plain_process = build(tff.aggregators.MeanFactory())
  output = learning_process.next(learning_process.initialize(), data)
  plain = plain_process.next(plain_process.initialize(), data)
  # Scaling by the round number and back is the plain weighted mean.
  for got, want in zip(
      learning_process.get_model_weights(output.state).trainable,
      plain_process.get_model_weights(plain.state).trainable):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  aggregator = output.metrics['aggregator']
  assert list(aggregator) == ['mean_value', 'mean_weight']
  assert list(aggregator['mean_value']) == ['scaled_value', 'example_task']

  form = tff.backends.mapreduce.get_map_reduce_form_for_computation(
      learning_process.next)
  state = tff.backends.mapreduce.get_state_initialization_computation(
      learning_process.initialize)()
  state, metrics = tff.run_round(form, state, data)
  for got, want in zip(learning_process.get_model_weights(state).trainable,
                       plain_process.get_model_weights(plain.state).trainable):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  assert metrics['aggregator']['mean_value']['example_task'] == ()
