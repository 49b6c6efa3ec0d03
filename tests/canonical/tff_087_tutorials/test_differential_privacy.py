"""TFF 0.87's "Federated Learning with Differential Privacy", written as its
user writes it: DP-FedAvg with adaptive clipping
(`tff.learning.model_update_aggregator.dp_aggregator` in
`build_unweighted_fed_avg`), trained at several noise multipliers with
Poisson-sampled clients, then `dp_accounting` calibrating the clients per
round for (2, 1e-5)-DP.

The tutorial downloads EMNIST (`tff.simulation.datasets.emnist.load_data`),
which is refused here (nothing is downloaded at run time): the same program
runs on `TestClientData` of made-up 28x28 digits, for a few rounds.

Three of its lines predate TFF 0.87 and fail there too, so this is written
as a TFF 0.87 user must write it: `client_optimizer_fn=lambda:
tf.keras.optimizers.SGD(0.01)` (TFF 0.87 raises AttributeError: 'function'
object has no attribute 'initialize'; here it is accepted, see the last
test) becomes `tff.learning.optimizers.build_sgdm(0.01)`;
`tff.learning.build_federated_evaluation`, gone from TFF 0.87 (and from
here: AttributeError), becomes `tff.learning.algorithms.build_fed_eval`;
pandas' `DataFrame.append` (gone from pandas 2) becomes a list of rows.

DP noise here comes from stateless random ops seeded by the round (the
aggregator's state holds a round counter where TFF's holds its `dp_event`),
so noisy numbers are not TFF's; noise-free rounds are, number for number.
"""

import collections

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff


def _emnist_like(num_clients, seed):
  rng = np.random.default_rng(seed)
  clients = {}
  for i in range(num_clients):
    labels = rng.integers(0, 10, size=12).astype(np.int32)
    pixels = (rng.random((12, 28, 28)) * 0.2).astype(np.float32)
    pixels[np.arange(12), labels * 2, :] += 0.8  # A row per class.
    clients[f'f{i:04d}_00'] = collections.OrderedDict(label=labels,
                                                      pixels=pixels)
  return tff.simulation.datasets.TestClientData(clients)


def get_emnist_dataset():
  emnist_train = _emnist_like(12, seed=0)
  emnist_test = _emnist_like(3, seed=1)

  def element_fn(element):
    return collections.OrderedDict(
        x=tf.expand_dims(element['pixels'], -1), y=element['label'])

  def preprocess_train_dataset(dataset):
    # Use buffer_size same as the maximum client dataset size,
    # 418 for Federated EMNIST
    return (dataset.map(element_fn)
            .shuffle(buffer_size=418)
            .repeat(1)
            .batch(32, drop_remainder=False))

  def preprocess_test_dataset(dataset):
    return dataset.map(element_fn).batch(128, drop_remainder=False)

  emnist_train = emnist_train.preprocess(preprocess_train_dataset)
  emnist_test = preprocess_test_dataset(
      emnist_test.create_tf_dataset_from_all_clients())
  return emnist_train, emnist_test


train_data, test_data = get_emnist_dataset()


def my_model_fn():
  model = tf.keras.models.Sequential([
      tf.keras.layers.Reshape(input_shape=(28, 28, 1), target_shape=(28 * 28,)),
      tf.keras.layers.Dense(200, activation=tf.nn.relu),
      tf.keras.layers.Dense(200, activation=tf.nn.relu),
      tf.keras.layers.Dense(10)])
  return tff.learning.models.from_keras_model(
      keras_model=model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=test_data.element_spec,
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


total_clients = len(train_data.client_ids)


def train(rounds, noise_multiplier, clients_per_round, data_frame):
  # Using the `dp_aggregator` here turns on differential privacy with adaptive
  # clipping.
  aggregation_factory = tff.learning.model_update_aggregator.dp_aggregator(
      noise_multiplier, clients_per_round)

  # We use Poisson subsampling which gives slightly tighter privacy guarantees
  # compared to having a fixed number of clients per round. The actual number
  # of clients per round is stochastic with mean clients_per_round.
  sampling_prob = clients_per_round / total_clients

  # Build a federated averaging process.
  # Typically a non-adaptive server optimizer is used because the noise in the
  # updates can cause the second moment accumulators to become very large
  # prematurely.
  learning_process = tff.learning.algorithms.build_unweighted_fed_avg(
      my_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.01),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          1.0, momentum=0.9),
      model_aggregator=aggregation_factory)

  eval_process = tff.learning.algorithms.build_fed_eval(my_model_fn)

  def evaluate(model_weights):
    eval_state = eval_process.set_model_weights(eval_process.initialize(),
                                                model_weights)
    output = eval_process.next(eval_state, [test_data])
    return output.metrics['client_work']['eval']['current_round_metrics']

  # Training loop.
  state = learning_process.initialize()
  for round in range(rounds):  # pylint: disable=redefined-builtin
    if round % 5 == 0:
      model_weights = learning_process.get_model_weights(state)
      metrics = evaluate(model_weights)
      data_frame.append({'Round': round,
                         'NoiseMultiplier': noise_multiplier,
                         **metrics})

    # Sample clients for a round. Note that if your dataset is large and
    # sampling_prob is small, it would be faster to use gap sampling.
    x = np.random.uniform(size=total_clients)
    sampled_clients = [
        train_data.client_ids[i] for i in range(total_clients)
        if x[i] < sampling_prob]
    sampled_train_data = [
        train_data.create_tf_dataset_for_client(client)
        for client in sampled_clients]

    # Use selected clients for update.
    result = learning_process.next(state, sampled_train_data)
    state = result.state
    metrics = result.metrics

  model_weights = learning_process.get_model_weights(state)
  metrics = evaluate(model_weights)
  data_frame.append({'Round': rounds,
                     'NoiseMultiplier': noise_multiplier,
                     **metrics})

  return data_frame, result


def test_emnist_download_is_refused_by_name():
  # Unless TFF's cached file is on the machine: nothing is downloaded.
  with pytest.raises(tff.errors.Error, match='downloads nothing'):
    tff.simulation.datasets.emnist.load_data(
        only_digits=True, cache_dir='/nonexistent')


def test_the_dp_aggregator_is_unweighted_dp_with_adaptive_zeroing():
  factory = tff.learning.model_update_aggregator.dp_aggregator(0.5, 6)
  assert isinstance(factory, tff.aggregators.UnweightedAggregationFactory)
  assert (tff.learning.model_update_aggregator.dp_aggregator is
          tff.learning.dp_aggregator)


def test_training_at_several_noise_multipliers():
  np.random.seed(0)
  data_frame = []
  results = {}
  rounds = 4
  clients_per_round = 6
  for noise_multiplier in [0.0, 0.5]:
    data_frame, results[noise_multiplier] = train(
        rounds, noise_multiplier, clients_per_round, data_frame)

  assert [(row['Round'], row['NoiseMultiplier']) for row in data_frame] == [
      (0, 0.0), (4, 0.0), (0, 0.5), (4, 0.5)]
  for row in data_frame:
    assert row['num_examples'] == 36  # The test set, 3 clients of 12.
  no_noise = [row['loss'] for row in data_frame[:2]]
  assert no_noise[-1] < no_noise[0], no_noise

  metrics = results[0.5].metrics
  assert list(metrics) == ['distributor', 'client_work', 'aggregator',
                           'finalizer']
  aggregator = metrics['aggregator']
  assert list(aggregator) == ['zeroing', 'zeroing_norm', 'zeroed_count']
  assert list(aggregator['zeroing']) == ['dp_query_metrics', 'dp']
  clip = aggregator['zeroing']['dp_query_metrics']['clip']
  assert 0.0 < clip < 1.0  # Adapting from its initial 0.1.


def test_noise_free_dp_fedavg_is_tffs():
  rng = np.random.default_rng(0)
  data = []
  for _ in range(3):
    x = rng.normal(size=(6, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32).reshape(-1, 1)
    data.append(tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=x, y=y)).batch(3))

  def model_fn():
    keras_model = tf.keras.models.Sequential([
        tf.keras.layers.InputLayer(input_shape=(4,)),
        tf.keras.layers.Dense(2, kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=data[0].element_spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  learning_process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=tff.learning.dp_aggregator(
          noise_multiplier=0.0, clients_per_round=3))
  state = learning_process.initialize()
  clips = []
  for _ in range(2):
    result = learning_process.next(state, data)
    state = result.state
    clips.append(result.metrics['aggregator']['zeroing']['dp_query_metrics'][
        'clip'])
  np.testing.assert_allclose(clips, [0.1105, 0.1221], atol=1e-4)
  train_metrics = result.metrics['client_work']['train']
  np.testing.assert_allclose(
      [train_metrics['sparse_categorical_accuracy'], train_metrics['loss']],
      [0.7222, 0.628], atol=1e-4)
  kernel, bias = learning_process.get_model_weights(state).trainable
  np.testing.assert_allclose(
      kernel, [[-0.1154, 0.1154], [0.0292, -0.0292], [-0.0208, 0.0208],
               [0.0122, -0.0122]], atol=1e-4)
  np.testing.assert_allclose(bias, [0.022, -0.022], atol=1e-4)

  # The DP round compiles, and its form runs the first round as next() does.
  form = tff.compile(learning_process)
  state, metrics = tff.run_round(form, form.initialize(), data)
  assert float(metrics['aggregator']['zeroing']['dp_query_metrics'][
      'clip']) == pytest.approx(0.1105, abs=1e-4)


def test_calibrating_clients_per_round_with_dp_accounting():
  total_clients = 3383  # pylint: disable=redefined-outer-name
  noise_to_clients_ratio = 0.01
  target_delta = 1e-5
  target_eps = 2
  rounds = 100

  # No-arg callable that returns a fresh accountant.
  make_fresh_accountant = dp_accounting.rdp.RdpAccountant

  # Create function that takes expected clients per round and returns a
  # dp_accounting.DpEvent representing the full training process.
  def make_event_from_param(clients_per_round):
    q = clients_per_round / total_clients
    noise_multiplier = clients_per_round * noise_to_clients_ratio
    gaussian_event = dp_accounting.GaussianDpEvent(noise_multiplier)
    sampled_event = dp_accounting.PoissonSampledDpEvent(q, gaussian_event)
    composed_event = dp_accounting.SelfComposedDpEvent(sampled_event, rounds)
    return composed_event

  # Create object representing the search range [1, 3383].
  bracket_interval = dp_accounting.ExplicitBracketInterval(1, total_clients)

  # Perform search for smallest clients_per_round achieving the target privacy.
  clients_per_round = dp_accounting.calibrate_dp_mechanism(
      make_fresh_accountant, make_event_from_param, target_eps, target_delta,
      bracket_interval, discrete=True)

  noise_multiplier = clients_per_round * noise_to_clients_ratio
  assert (f'To get ({target_eps}, {target_delta})-DP, use {clients_per_round} '
          f'clients with noise multiplier {noise_multiplier}.') == (
              'To get (2, 1e-05)-DP, use 120 clients with noise multiplier '
              '1.2.')


def test_the_tutorials_keras_optimizer_lines_are_accepted_here():
  # TFF 0.87 refuses these (they predate it); here they build the same
  # process as the 0.87 optimizers above.
  learning_process = tff.learning.algorithms.build_unweighted_fed_avg(
      my_model_fn,
      client_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.01),
      server_optimizer_fn=lambda: tf.keras.optimizers.SGD(1.0, momentum=0.9),
      model_aggregator=tff.learning.model_update_aggregator.dp_aggregator(
          0.5, 6))
  assert 'finalizer=<velocity=' in str(
      learning_process.initialize.type_signature)
  with pytest.raises(AttributeError):
    getattr(tff.learning, 'build_federated_evaluation')
