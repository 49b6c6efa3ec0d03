"""TFF 0.87's baseline tasks (`tff.simulation.baselines`) and MNIST models
(`tff.simulation.models.mnist`) on TFF's synthetic data. Element types,
batches, token ids and the models' weight shapes are TFF 0.87's, recorded
from it for the same calls; weights differ (Keras 3 draws them), so a
round's numbers are checked for training, not against TFF's."""

import collections
import hashlib

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.simulation.baselines import emnist as emnist_baseline
from canonical.simulation.baselines import shakespeare as shakespeare_baseline
from canonical.simulation.baselines import stackoverflow as so_baseline
from canonical.simulation.models import mobilenet_v2
from canonical.simulation.models import resnet

B = tff.simulation.baselines
SPEC = B.ClientSpec(num_epochs=1, batch_size=2, shuffle_buffer_size=1)

TASKS = {
    'emnist_cnn_dropout': lambda: B.emnist.create_character_recognition_task(
        SPEC, model_id='cnn_dropout', only_digits=True,
        use_synthetic_data=True),
    'emnist_2nn': lambda: B.emnist.create_character_recognition_task(
        SPEC, model_id='2nn', use_synthetic_data=True),
    'cifar_resnet18': lambda: B.cifar100.create_image_classification_task(
        SPEC, use_synthetic_data=True),
    'landmark': lambda: B.landmark.create_landmark_classification_task(
        SPEC, use_synthetic_data=True, debug_seed=1),
    'emnist_autoencoder': lambda: B.emnist.create_autoencoder_task(
        SPEC, use_synthetic_data=True),
    'shakespeare': lambda: B.shakespeare.create_character_prediction_task(
        SPEC, sequence_length=10, use_synthetic_data=True),
    'so_word': lambda: B.stackoverflow.create_word_prediction_task(
        SPEC, sequence_length=5, vocab_size=30, use_synthetic_data=True),
    'so_tag': lambda: B.stackoverflow.create_tag_prediction_task(
        SPEC, word_vocab_size=30, tag_vocab_size=8, use_synthetic_data=True),
}


def _spec(shape, dtype):
  return tf.TensorSpec(shape, dtype)


# TFF 0.87's element types and the batches of two clients it samples
# (sample_train_clients(2, replace=True, random_seed=3)).
EXPECTED = {
    'emnist_cnn_dropout': ((_spec([None, 28, 28, 1], tf.float32),
                            _spec([None], tf.int32)), [5, 5]),
    'emnist_2nn': ((_spec([None, 28, 28, 1], tf.float32),
                    _spec([None], tf.int32)), [5, 5]),
    'cifar_resnet18': ((_spec([None, 24, 24, 3], tf.float32),
                        _spec([None], tf.int64)), [3, 3]),
    'landmark': ((_spec([None, 128, 128, 3], tf.float32),
                  _spec([None, 1], tf.int64)), [2, 2]),
    'emnist_autoencoder': ((_spec([None, 784], tf.float32),
                            _spec([None, 784], tf.float32)), [5, 5]),
    'shakespeare': ((_spec([None, 10], tf.int64),
                     _spec([None, 10], tf.int64)), [2, 6]),
    'so_word': ((_spec([None, 5], tf.int64), _spec([None, 5], tf.int64)),
                [1, 2]),
    'so_tag': ((_spec([None, 30], tf.float32), _spec([None, 8], tf.float32)),
               [1, 2]),
}


def _first_batch(task, client_id=None):
  data = task.datasets.train_data.preprocess(
      task.datasets.train_preprocess_fn)
  return next(iter(data.create_tf_dataset_for_client(
      client_id or data.client_ids[0])))


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(TASKS))
def test_a_task_on_synthetic_data_has_tffs_elements(name):
  task = TASKS[name]()
  spec, batches = EXPECTED[name]
  assert task.datasets.element_type_structure == spec
  sampled = task.datasets.sample_train_clients(2, replace=True,
                                               random_seed=3)
  assert [sum(1 for _ in d) for d in sampled] == batches
  model = task.model_fn()
  assert model.input_spec == spec


# TFF 0.87's first training batch (no shuffling: shuffle_buffer_size=1).
def test_character_and_word_tokens_are_tffs():
  preprocess = shakespeare_baseline.create_preprocess_fn(SPEC, 10)
  data = tff.simulation.datasets.shakespeare.get_synthetic()
  x, y = next(iter(preprocess(data.create_tf_dataset_for_client(
      'THE_TRAGEDY_OF_KING_LEAR_MACBETH'))))
  assert x.numpy().tolist() == [[88, 9, 64, 46, 23, 79, 89, 0, 0, 0],
                                [88, 32, 2, 65, 45, 41, 89, 0, 0, 0]]
  assert y.numpy().tolist() == [[9, 64, 46, 23, 79, 89, 0, 0, 0, 0],
                                [32, 2, 65, 45, 41, 89, 0, 0, 0, 0]]
  vocab = list(tff.simulation.datasets.stackoverflow
               .get_synthetic_word_counts())[:30]
  preprocess = so_baseline.create_word_preprocess_fn(SPEC, vocab, 5)
  so_data = tff.simulation.datasets.stackoverflow.get_synthetic()
  x, y = next(iter(preprocess(so_data.create_tf_dataset_for_client(
      'synthetic_1'))))
  assert x.numpy().tolist() == [[32, 6, 10, 11, 12], [32, 26, 27, 28, 29]]
  assert y.numpy().tolist() == [[6, 10, 11, 12, 13], [26, 27, 28, 29, 8]]
  tags = list(tff.simulation.datasets.stackoverflow
              .get_synthetic_tag_counts())[:8]
  preprocess = so_baseline.create_tag_preprocess_fn(SPEC, vocab, tags)
  x, y = next(iter(preprocess(so_data.create_tf_dataset_for_client(
      'synthetic_1'))))
  nonzero = {i: round(float(v), 4) for i, v in enumerate(x[1]) if v}
  assert nonzero == {7: 0.1667, 10: 0.1667, 25: 0.1667, 26: 0.1667,
                     27: 0.1667, 28: 0.1667}
  assert round(float(tf.reduce_sum(x[0])), 4) == 1.0
  assert y.numpy().tolist() == [[0.0] * 8, [1.0] * 4 + [0.0] * 4]


def _shapes_digest(model):
  shapes = [list(w.shape) for w in model.trainable_weights]
  return (len(shapes), int(sum(np.prod(s) for s in shapes)),
          hashlib.sha256(str(shapes).encode()).hexdigest()[:16])


# TFF 0.87's trainable weights: how many, their size, the sha256 of their
# shapes in order.
@pytest.mark.slow
@pytest.mark.parametrize('make, expected', [
    (lambda: emnist_baseline.create_conv_dropout_model(True),
     (8, 1199882, 'aae6cd15000e6f2d')),
    (lambda: emnist_baseline.create_original_fedavg_cnn_model(False),
     (8, 1690046, '621a1a3173bc47fc')),
    (lambda: emnist_baseline.create_two_hidden_layer_model(False),
     (6, 209662, '42d0be703230967d')),
    (emnist_baseline.create_autoencoder_model,
     (16, 2837314, 'ee431018d973160f')),
    (lambda: shakespeare_baseline.create_recurrent_model(
        shakespeare_baseline.VOCAB_LENGTH, 10),
     (9, 820522, '018d33184630da84')),
    (lambda: so_baseline.create_recurrent_model(34),
     (8, 2126538, '480c10a887b9250a')),
    (lambda: resnet.create_resnet18((24, 24, 3), 100),
     (62, 11227812, 'aece8fb7dae26de9')),
    (lambda: mobilenet_v2.create_mobilenet_v2((128, 128, 3), num_groups=8,
                                              num_classes=2028),
     (158, 4821740, '12a05adbb07cb399')),
])
def test_the_models_have_tffs_weights(make, expected):
  assert _shapes_digest(make()) == expected


@pytest.mark.slow
def test_a_task_trains_in_federated_averaging():
  task = B.emnist.create_character_recognition_task(
      B.ClientSpec(num_epochs=2, batch_size=5, shuffle_buffer_size=1),
      model_id='2nn', only_digits=True, use_synthetic_data=True,
      debug_seed=3)
  process = tff.learning.algorithms.build_weighted_fed_avg(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05))
  state = process.initialize()
  losses = []
  for round_number in range(3):
    clients = task.datasets.sample_train_clients(2, random_seed=round_number)
    result = process.next(state, clients)
    state = result.state
    train = result.metrics['client_work']['train']
    losses.append(float(train['loss']))
    assert train['num_examples'] == 40  # 2 clients x 10 digits x 2 epochs.
  assert losses[-1] < losses[0]
  form = tff.compile(process)
  assert form.client_data_spec.element_spec == (
      task.datasets.element_type_structure)


# TFF 0.87's metrics of each task's round, in TFF's order.
@pytest.mark.slow
@pytest.mark.parametrize('name, metrics', [
    ('so_tag', ['precision', 'recall_at_5', 'loss', 'num_examples',
                'num_batches']),
    ('shakespeare', ['num_tokens', 'accuracy', 'loss', 'num_examples',
                     'num_batches']),
    ('so_word', [
        'num_tokens', 'accuracy', 'accuracy_without_out_of_vocab',
        'accuracy_without_out_of_vocab_or_end_of_sentence', 'loss',
        'num_examples', 'num_batches']),
])
def test_a_task_with_keras_metrics_trains(name, metrics):
  task = TASKS[name]()
  process = tff.learning.algorithms.build_weighted_fed_avg(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  result = process.next(process.initialize(),
                        task.datasets.sample_train_clients(2, random_seed=1))
  train = result.metrics['client_work']['train']
  assert list(train) == metrics
  assert train['num_examples'] > 0 and np.isfinite(train['loss'])


def test_task_datasets_summary_and_samples_are_tffs():
  task = B.emnist.create_character_recognition_task(
      B.ClientSpec(num_epochs=2, batch_size=3, max_elements=5,
                   shuffle_buffer_size=1),
      model_id='2nn', only_digits=True, use_synthetic_data=True)
  lines = []
  task.datasets.summary(print_fn=lines.append)
  assert lines == [  # As TFF 0.87 prints it.
      'Split |Dataset Type |Number of Clients |',
      '========================================',
      'Train |Federated    |2                 |',
      'Test  |Federated    |2                 |',
      '________________________________________',
      'Train Preprocess Function: True', 'Eval Preprocess Function: True']
  sampled = task.datasets.sample_train_clients(3, replace=True,
                                               random_seed=5)
  # Batches of 3 and 2 (5 elements), in either order: as in TFF, the
  # batches' parallel map is not deterministic without a debug seed.
  assert [sorted(int(y.shape[0]) for _, y in d) for d in sampled] == [
      [2, 3]] * 3
  test = list(task.datasets.get_centralized_test_data())
  assert [y.numpy().tolist() for _, y in test] == [list(range(10)) * 2]


def test_client_spec_and_task_inputs_are_checked():
  assert B.ClientSpec(num_epochs=2.0, batch_size=3).num_epochs == 2
  with pytest.raises(ValueError, match='batch_size must be positive'):
    B.ClientSpec(num_epochs=1, batch_size=0)
  with pytest.raises(TypeError, match='num_epochs must be an integer'):
    B.ClientSpec(num_epochs='2', batch_size=1)
  with pytest.raises(ValueError, match="model_id must be one of"):
    B.emnist.create_character_recognition_task(SPEC, model_id='rnn',
                                               use_synthetic_data=True)
  with pytest.raises(ValueError, match='between 1 and 32'):
    B.cifar100.create_image_classification_task(SPEC, crop_height=40,
                                                use_synthetic_data=True)
  data = tff.simulation.datasets.emnist.get_synthetic()
  with pytest.raises(TypeError, match='train_data must be a ClientData'):
    B.BaselineTaskDatasets(data.create_tf_dataset_for_client('synthetic1'),
                           data)
  datasets = B.BaselineTaskDatasets(data, data)

  def wrong_model():
    return tff.learning.models.from_keras_model(
        emnist_baseline.create_two_hidden_layer_model(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=(tf.TensorSpec([None, 28, 28, 1], tf.float32),
                    tf.TensorSpec([None], tf.int32)))

  with pytest.raises(ValueError, match='input spec differ'):
    B.BaselineTask(datasets, wrong_model)


def test_mnist_models_are_tffs():
  mnist = tff.simulation.models.mnist
  model = mnist.create_keras_model(compile_model=True)
  assert [list(w.shape) for w in model.trainable_weights] == [
      [5, 5, 1, 32], [32], [5, 5, 32, 64], [64], [3136, 1024], [1024],
      [1024, 10], [10]]
  assert model.output_shape == (None, 10)
  data = mnist.keras_dataset_from_emnist(
      tff.simulation.datasets.emnist.get_synthetic()
      .create_tf_dataset_for_client('synthetic1'))
  assert data.element_spec == collections.OrderedDict(
      x=tf.TensorSpec([784], tf.float32), y=tf.TensorSpec([], tf.int32))
  simple = mnist.create_simple_keras_model(learning_rate=0.5)
  assert [list(w.shape) for w in simple.trainable_weights] == [[784, 10],
                                                              [10]]
  assert float(simple.optimizer.learning_rate) == 0.5
  history = simple.fit(data.map(lambda e: (e['x'], e['y'])).batch(5),
                       epochs=1, verbose=0)
  assert set(history.history) >= {'loss', 'sparse_categorical_accuracy',
                                  'num_examples'}
