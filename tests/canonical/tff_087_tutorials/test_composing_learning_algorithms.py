"""TFF 0.87's "Composing Learning Algorithms", written as its user writes it:
FedAvg with gradient clipping, from TFF's distributor, aggregator and
finalizer and the tutorial's own client work.

What differs from the tutorial, line by line, and why:
- `import tensorflow_federated as tff` is `import canonical as tff`.
- EMNIST (`tff.simulation.datasets.emnist.load_data()`, a download) is
  made-up 28x28 digits in a `TestClientData`, preprocessed as the tutorial
  preprocesses EMNIST.

Everything else (the model from `functional_model_from_keras` with an
OrderedDict of metric constructors, `predict_on_batch` and `loss` in the
client update, `initial_weights` and `input_spec`, the client work
process, the blocks, their composition, the state and metrics, the round)
is the tutorial's code.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff


@tf.function
def client_update(
    model: tff.learning.models.FunctionalModel,
    dataset: tf.data.Dataset,
    initial_weights: tff.learning.models.ModelWeights,
    client_optimizer: tff.learning.optimizers.Optimizer,
):
  """Performs training (using the initial server model weights) on the client's dataset."""
  # Keep track of the number of examples.
  num_examples = 0.0
  # Use the client_optimizer to update the local model.
  trainable_weights, non_trainable_weights = (
      initial_weights.trainable,
      initial_weights.non_trainable,
  )
  optimizer_state = client_optimizer.initialize(
      tf.nest.map_structure(lambda x: tf.TensorSpec, trainable_weights)
  )
  for batch in dataset:
    x, y = batch
    with tf.GradientTape() as tape:
      tape.watch(trainable_weights)
      logits = model.predict_on_batch(
          model_weights=(trainable_weights, non_trainable_weights),
          x=x,
          training=True,
      )
      num_examples += tf.cast(tf.shape(y)[0], tf.float32)
      loss = model.loss(output=logits, label=y)

    # Compute the corresponding gradient
    grads = tape.gradient(loss, trainable_weights)

    # Compute the gradient norm and clip
    gradient_norm = tf.linalg.global_norm(grads)
    if gradient_norm > 1:
      grads = tf.nest.map_structure(lambda x: x / gradient_norm, grads)

    # Apply the gradient using a client optimizer.
    optimizer_state, trainable_weights = client_optimizer.next(
        optimizer_state, trainable_weights, grads
    )

  # Compute the difference between the initial weights and the client weights
  client_update = tf.nest.map_structure(
      tf.subtract, trainable_weights, initial_weights[0]
  )

  return tff.learning.templates.ClientResult(
      update=client_update, update_weight=num_examples
  )


def build_gradient_clipping_client_work(
    model: tff.learning.models.FunctionalModel,
    optimizer: tff.learning.optimizers.Optimizer,
) -> tff.learning.templates.ClientWorkProcess:
  """Creates a client work process that uses gradient clipping."""
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec))
  model_weights_type = tff.types.to_type(
      tf.nest.map_structure(
          lambda arr: tff.types.TensorType(shape=arr.shape, dtype=arr.dtype),
          tff.learning.models.ModelWeights(*model.initial_weights),
      )
  )

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.tensorflow.computation(model_weights_type, data_type)
  def client_update_computation(model_weights, dataset):
    return client_update(model, dataset, model_weights, optimizer)

  @tff.federated_computation(
      initialize_fn.type_signature.result,
      tff.FederatedType(model_weights_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS),
  )
  def next_fn(state, model_weights, client_dataset):
    client_result = tff.federated_map(
        client_update_computation, (model_weights, client_dataset)
    )
    # Return empty measurements, though a more complete algorithm might
    # measure something here.
    measurements = tff.federated_value((), tff.SERVER)
    return tff.templates.MeasuredProcessOutput(
        state, client_result, measurements
    )

  return tff.learning.templates.ClientWorkProcess(initialize_fn, next_fn)


def _emnist_like_train_data():
  """Made-up 28x28 digits, 30 per client, as EMNIST's elements are."""
  rng = np.random.default_rng(7)
  clients = {}
  for i in range(12):
    labels = rng.integers(0, 10, size=30).astype(np.int32)
    pixels = (rng.random((30, 28, 28)) * 0.2).astype(np.float32)
    pixels[np.arange(30), labels * 2, :] += 0.8  # A row per class.
    clients[f'f{i:04d}_00'] = collections.OrderedDict(
        label=labels, pixels=pixels)
  return tff.simulation.datasets.TestClientData(clients)


emnist_train = _emnist_like_train_data()

NUM_CLIENTS = 10
BATCH_SIZE = 20


def preprocess(dataset):

  def batch_format_fn(element):
    """Flatten a batch of EMNIST data and return a (features, label) tuple."""
    return (tf.reshape(element['pixels'], [-1, 784]),
            tf.reshape(element['label'], [-1, 1]))

  return dataset.batch(BATCH_SIZE).map(batch_format_fn)


client_ids = sorted(emnist_train.client_ids)[:NUM_CLIENTS]
federated_train_data = [preprocess(emnist_train.create_tf_dataset_for_client(x))
  for x in client_ids
]

initializer = tf.keras.initializers.GlorotNormal(seed=0)
keras_model = tf.keras.models.Sequential([
    tf.keras.layers.Input(shape=(784,)),
    tf.keras.layers.Dense(10, kernel_initializer=initializer),
    tf.keras.layers.Softmax(),
])

tff_model = tff.learning.models.functional_model_from_keras(
    keras_model,
    loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(),
    input_spec=federated_train_data[0].element_spec,
    metrics_constructor=collections.OrderedDict(
        accuracy=tf.keras.metrics.SparseCategoricalAccuracy
    ),
)

client_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=0.01)
server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)


@tff.tensorflow.computation
def initial_model_weights_fn():
  return tff.learning.models.ModelWeights(*tff_model.initial_weights)


model_weights_type = initial_model_weights_fn.type_signature.result

distributor = tff.learning.templates.build_broadcast_process(model_weights_type)
client_work = build_gradient_clipping_client_work(tff_model, client_optimizer)

# TFF aggregators use a factory pattern, which create an aggregator
# based on the output type of the client work. This also uses a float (the number
# of examples) to govern the weight in the average being computed.)
aggregator_factory = tff.aggregators.MeanFactory()
aggregator = aggregator_factory.create(
    model_weights_type.trainable, tff.TensorType(np.float32)
)
finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
    server_optimizer, model_weights_type
)

fed_avg_with_clipping = tff.learning.templates.compose_learning_process(
    initial_model_weights_fn,
    distributor,
    client_work,
    aggregator,
    finalizer
)

STATE_TYPE = (
    '<global_model_weights=<trainable=<float32[784,10],float32[10]>,'
    'non_trainable=<>>,distributor=<>,client_work=<>,aggregator='
    '<value_sum_process=<>,weight_sum_process=<>>,finalizer='
    '<learning_rate=float32>>@SERVER')


def test_the_composed_process_has_tffs_type_signature():
  assert str(fed_avg_with_clipping.next.type_signature) == (
      f'(<state={STATE_TYPE},client_data={{<float32[?,784],int32[?,1]>*}}'
      f'@CLIENTS> -> <state={STATE_TYPE},metrics=<distributor=<>,'
      'client_work=<>,aggregator=<mean_value=<>,mean_weight=<>>,'
      'finalizer=<update_non_finite=int32>>@SERVER>)')


def test_the_state_has_a_part_per_building_block():
  state = fed_avg_with_clipping.initialize()
  assert isinstance(state, tff.learning.templates.LearningAlgorithmState)
  assert state.client_work == ()
  # The finalizer's state is its server optimizer's (the tutorial's text,
  # "how many iterations have occurred", is of an older TFF).
  assert state.finalizer == collections.OrderedDict(learning_rate=1.0)


def test_a_round_runs_and_reports_each_blocks_measurements():
  state = fed_avg_with_clipping.initialize()
  learning_process_output = fed_avg_with_clipping.next(
      state, federated_train_data)
  assert isinstance(learning_process_output,
                    tff.learning.templates.LearningProcessOutput)
  assert learning_process_output.state.finalizer == collections.OrderedDict(
      learning_rate=1.0)
  assert learning_process_output.metrics == collections.OrderedDict(
      distributor=(), client_work=(),
      aggregator=collections.OrderedDict(mean_value=(), mean_weight=()),
      finalizer=collections.OrderedDict(update_non_finite=0))
  before = fed_avg_with_clipping.get_model_weights(state)
  after = fed_avg_with_clipping.get_model_weights(
      learning_process_output.state)
  assert not np.allclose(after.trainable[0], before.trainable[0])


def _training_loss(weights):
  sums = [tff.learning.evaluate(tff_model, weights, data)
          for data in federated_train_data]
  return (sum(float(s['loss_sum']) for s in sums) /
          sum(float(s['num_examples']) for s in sums))


def test_the_tutorials_update_sign_moves_the_model_up_the_loss():
  # The tutorial's clients send trained minus initial weights, which the
  # server optimizer descends: the model moves against what the clients
  # learned, here as in TFF 0.87 (checked there on small data: the same
  # steps, of the opposite sign to FedAvg's).
  state = fed_avg_with_clipping.initialize()
  losses = [_training_loss(fed_avg_with_clipping.get_model_weights(state))]
  for _ in range(2):
    state = fed_avg_with_clipping.next(state, federated_train_data).state
    losses.append(
        _training_loss(fed_avg_with_clipping.get_model_weights(state)))
  assert losses[0] < losses[1] < losses[2]


def test_the_composed_process_compiles_and_its_form_runs_the_same_round():
  form = tff.compile(fed_avg_with_clipping)
  state, metrics = tff.run_round(form, form.initialize(),
                                 federated_train_data)
  local = fed_avg_with_clipping.next(fed_avg_with_clipping.initialize(),
                                     federated_train_data)
  np.testing.assert_allclose(
      state.global_model_weights.trainable[0],
      local.state.global_model_weights.trainable[0], atol=1e-6)
  assert int(metrics['finalizer']['update_non_finite']) == 0


def test_two_rounds_of_the_tutorials_process_give_tff_087s_weights():
  # The same Keras model with fixed weights (Keras 2's and 3's GlorotNormal
  # draw differently), composed from the tutorial's own blocks; the numbers
  # come from TFF 0.87 running the same program on the same data.
  rng = np.random.default_rng(3)
  model = tf.keras.models.Sequential([
      tf.keras.layers.Input(shape=(784,)),
      tf.keras.layers.Dense(10),
      tf.keras.layers.Softmax(),
  ])
  model.set_weights([rng.normal(size=(784, 10)).astype(np.float32) * 0.05,
                     rng.normal(size=(10,)).astype(np.float32) * 0.1])
  functional = tff.learning.models.functional_model_from_keras(
      model, loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(),
      input_spec=federated_train_data[0].element_spec,
      metrics_constructor=collections.OrderedDict(
          accuracy=tf.keras.metrics.SparseCategoricalAccuracy))

  @tff.tensorflow.computation
  def initial_weights_fn():
    return tff.learning.models.ModelWeights(*functional.initial_weights)

  weights_type = initial_weights_fn.type_signature.result
  process = tff.learning.templates.compose_learning_process(
      initial_weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      build_gradient_clipping_client_work(functional, client_optimizer),
      tff.aggregators.MeanFactory().create(weights_type.trainable,
                                           tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(
          server_optimizer, weights_type))
  state = process.initialize()
  for _ in range(2):
    state = process.next(state, federated_train_data).state
  weights = process.get_model_weights(state)
  np.testing.assert_allclose(weights.trainable[1], [
      -0.006820703856647015, -0.1721605360507965, -0.002476182533428073,
      -0.14567148685455322, -0.1100655123591423, 0.07951772212982178,
      0.07515362650156021, -0.10668721050024033, -0.23661352694034576,
      0.055209800601005554], atol=1e-6)
  assert float(np.sum(weights.trainable[0])) == pytest.approx(
      2.2801849842071533, abs=1e-4)
  assert float(np.sum(np.abs(weights.trainable[0]))) == pytest.approx(
      315.870849609375, rel=1e-6)
