"""TFF 0.87's "Federated Learning for Text Generation", its cells written as
a TFF user writes them, with only the import line changed.

What differs from the tutorial's cells, and why:
- `load_model` downloads a pre-trained Keras model (refused here: nothing is
  downloaded at run time). It is replaced by a model of the same layers
  (character embedding, GRU, dense logits over the vocabulary), small, with
  made-up weights; its GRU is not stateful (with the stateful one, TFF 0.87
  itself trains differently from run to run).
- `shakespeare.load_data()` (a download) is made-up text in a
  `TestClientData` under the tutorial's own client ids; 2 rounds where the
  tutorial runs 5; `BUFFER_SIZE` is 1 (no shuffle) so that a run repeats.
- `client_optimizer_fn=lambda: tf.keras.optimizers.SGD(learning_rate=0.5)`
  is refused by TFF 0.87 itself ('function' object has no attribute
  'initialize'): it is `tff.learning.optimizers.build_sgdm(0.5)`, as TFF
  0.87's users write it.
- Left out: the `!pip install` cell.

Two of its Keras lines fail under Keras 3 (TensorFlow 2.21's Keras, which
this project runs on), not in this runtime: `model.reset_states()` in
`generate_text` (Keras 3 has no `Model.reset_states`; the tests show it),
and `tf.keras.models.clone_model(keras_model)` in `create_tff_model`: Keras
3 compiles the clone as the original was, and `from_keras_model` refuses a
compiled model (TFF 0.87's too), so the clone is made from the model's
config (`tf.keras.Model.from_config(keras_model.get_config())`).

The tutorial's `FlattenedCategoricalAccuracy` reshapes predictions to
`[-1, len(vocab), 1]`: Keras 2's `SparseCategoricalAccuracy` took the
argmax over the vocabulary of that (a real accuracy: 0.000 on the made-up
weights in TFF 0.87), Keras 3's takes it over the trailing axis of size 1,
so it counts the labels equal to 0 (0.048 here, where the loss is TFF's
4.686 to the digit). The GRU's seed generator state, a Keras 3 variable but
not a weight, is a call-local variable of the model (as a metric's are), so
the weights are the tutorial's `trainable_weights` / `non_trainable_weights`.
"""



import collections
import functools
import os
import time

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

np.random.seed(0)

# Test that TFF is working:
tff.federated_computation(lambda: 'Hello, World!')()

# A fixed vocabularly of ASCII chars that occur in the works of Shakespeare and Dickens:
vocab = list('dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r')

# Creating a mapping from unique characters to indices
char2idx = {u:i for i, u in enumerate(vocab)}
idx2char = np.array(vocab)

def load_model(batch_size):
  # Stands in for the download: the same layers, small, made-up weights.
  inputs = tf.keras.Input(shape=[None], batch_size=batch_size, dtype=tf.int64)
  x = tf.keras.layers.Embedding(len(vocab), 8)(inputs)
  x = tf.keras.layers.GRU(16, return_sequences=True)(x)
  outputs = tf.keras.layers.Dense(len(vocab))(x)
  model = tf.keras.Model(inputs, outputs)
  rng = np.random.RandomState(7)
  model.set_weights([rng.normal(0, 0.3, w.shape).astype(np.float32)
                     for w in model.get_weights()])
  return model


def generate_text(model, start_string):
  # From https://www.tensorflow.org/tutorials/sequences/text_generation
  num_generate = 200
  input_eval = [char2idx[s] for s in start_string]
  input_eval = tf.expand_dims(input_eval, 0)
  text_generated = []
  temperature = 1.0

  model.reset_states()
  for i in range(num_generate):
    predictions = model(input_eval)
    predictions = tf.squeeze(predictions, 0)
    predictions = predictions / temperature
    predicted_id = tf.random.categorical(
        predictions, num_samples=1)[-1, 0].numpy()
    input_eval = tf.expand_dims([predicted_id], 0)
    text_generated.append(idx2char[predicted_id])

  return (start_string + ''.join(text_generated))

def _made_up_shakespeare(seed):
  rng = np.random.RandomState(seed)
  words = ['thou', 'art', 'my', 'lord', 'and', 'the', 'king', 'shall',
           'not', 'be', 'so', 'fair', 'a', 'day', 'of', 'love']
  clients = {}
  for name in ['THE_TRAGEDY_OF_KING_LEAR_KING',
               'ALL_S_WELL_THAT_ENDS_WELL_CELIA',
               'MUCH_ADO_ABOUT_NOTHING_OTHELLO']:
    snippets = [' '.join(rng.choice(words, 450)) + '.' for _ in range(2)]
    clients[name] = collections.OrderedDict(snippets=snippets)
  return tff.simulation.datasets.TestClientData(clients)


train_data, test_data = _made_up_shakespeare(1), _made_up_shakespeare(2)


# Input pre-processing parameters
SEQ_LENGTH = 100
BATCH_SIZE = 8
BUFFER_SIZE = 1  # For dataset shuffling

# Construct a lookup table to map string chars to indexes,
# using the vocab loaded above:
table = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(
        keys=vocab, values=tf.constant(list(range(len(vocab))),
                                       dtype=tf.int64)),
    default_value=0)


def to_ids(x):
  s = tf.reshape(x['snippets'], shape=[1])
  chars = tf.strings.bytes_split(s).values
  ids = table.lookup(chars)
  return ids


def split_input_target(chunk):
  input_text = tf.map_fn(lambda x: x[:-1], chunk)
  target_text = tf.map_fn(lambda x: x[1:], chunk)
  return (input_text, target_text)


def preprocess(dataset):
  return (
      # Map ASCII chars to int64 indexes using the vocab
      dataset.map(to_ids)
      # Split into individual chars
      .unbatch()
      # Form example sequences of SEQ_LENGTH +1
      .batch(SEQ_LENGTH + 1, drop_remainder=True)
      # Shuffle and form minibatches
      .shuffle(BUFFER_SIZE).batch(BATCH_SIZE, drop_remainder=True)
      # And finally split into (input, target) tuples,
      # each of length SEQ_LENGTH.
      .map(split_input_target))

# Here the play is "The Tragedy of King Lear" and the character is "King".
raw_example_dataset = train_data.create_tf_dataset_for_client(
    'THE_TRAGEDY_OF_KING_LEAR_KING')


example_dataset = preprocess(raw_example_dataset)


class FlattenedCategoricalAccuracy(tf.keras.metrics.SparseCategoricalAccuracy):

  def __init__(self, name='accuracy', dtype=tf.float32):
    super().__init__(name, dtype=dtype)

  def update_state(self, y_true, y_pred, sample_weight=None):
    y_true = tf.reshape(y_true, [-1, 1])
    y_pred = tf.reshape(y_pred, [-1, len(vocab), 1])
    return super().update_state(y_true, y_pred, sample_weight)

def test_hello_world():
  # Test that TFF is working:
  assert tff.federated_computation(lambda: 'Hello, World!')() == (
      b'Hello, World!')


def test_generate_text_stops_at_keras_3s_missing_reset_states():
  # Text generation requires a batch_size=1 model.
  keras_model_batch1 = load_model(batch_size=1)
  with pytest.raises(AttributeError, match='reset_states'):
    print(generate_text(keras_model_batch1,
                        'What of TensorFlow Federated, you ask? '))


def test_the_preprocessed_data(capsys):
  # To allow for future extensions, each entry x
  # is an OrderedDict with a single key 'snippets' which contains the text.
  for x in raw_example_dataset.take(2):
    print(x['snippets'])
  assert capsys.readouterr().out.startswith(
      "tf.Tensor(b'the fair a not love be fair")  # As TFF 0.87's.
  print(example_dataset.element_spec)
  # As TFF 0.87 prints it:
  assert capsys.readouterr().out == (
      '(TensorSpec(shape=(8, 100), dtype=tf.int64, name=None), '
      'TensorSpec(shape=(8, 100), dtype=tf.int64, name=None))\n')
  assert sum(1 for _ in example_dataset) == 4


def compiled_keras_model():
  BATCH_SIZE = 8  # The training and eval batch size for the rest of this tutorial.
  keras_model = load_model(batch_size=BATCH_SIZE)
  keras_model.compile(
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=[FlattenedCategoricalAccuracy()])

  return keras_model


def test_the_keras_model_evaluates(capsys):
  keras_model = compiled_keras_model()
  # Confirm that loss is much lower on Shakespeare than on random data
  loss, accuracy = keras_model.evaluate(example_dataset.take(5), verbose=0)
  print(
      'Evaluating on an example Shakespeare character: {a:3f}'.format(a=accuracy))

  # As a sanity check, we can construct some completely random data, where we expect
  # the accuracy to be essentially random:
  random_guessed_accuracy = 1.0 / len(vocab)
  print('Expected accuracy for random guessing: {a:.3f}'.format(
      a=random_guessed_accuracy))
  random_indexes = np.random.randint(
      low=0, high=len(vocab), size=1 * BATCH_SIZE * (SEQ_LENGTH + 1))
  data = collections.OrderedDict(
      snippets=tf.constant(
          ''.join(np.array(vocab)[random_indexes]), shape=[1, 1]))
  random_dataset = preprocess(tf.data.Dataset.from_tensor_slices(data))
  loss, accuracy = keras_model.evaluate(random_dataset, steps=10, verbose=0)
  print('Evaluating on completely random data: {a:.3f}'.format(a=accuracy))
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith('Evaluating on an example Shakespeare character: ')
  assert out[1] == 'Expected accuracy for random guessing: 0.012'
  assert out[2].startswith('Evaluating on completely random data: ')


def build_fed_avg(keras_model):
  # Clone the keras_model inside `create_tff_model()`, which TFF will
  # call to produce a new copy of the model inside the graph that it will 
  # serialize. Note: we want to construct all the necessary objects we'll need 
  # _inside_ this method.
  def create_tff_model():
    # TFF uses an `input_spec` so it knows the types and shapes
    # that your model expects.
    input_spec = example_dataset.element_spec
    # Keras 3's clone_model compiles the clone as the original was; TFF
    # 0.87's from_keras_model refuses a compiled model (and so here).
    keras_model_clone = tf.keras.Model.from_config(keras_model.get_config())
    return tff.learning.models.from_keras_model(
        keras_model_clone,
        input_spec=input_spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[FlattenedCategoricalAccuracy()])
  # This command builds all the TensorFlow graphs and serializes them: 
  fed_avg = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn=create_tff_model,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.5))
  return fed_avg


@pytest.mark.slow
def test_federated_training(capsys):
  keras_model = compiled_keras_model()
  fed_avg = build_fed_avg(keras_model)
  state = fed_avg.initialize()
  result = fed_avg.next(state, [example_dataset.take(5)])
  state = result.state
  train_metrics = result.metrics['client_work']['train']
  print('loss={l:.3f}, accuracy={a:.3f}'.format(
      l=train_metrics['loss'], a=train_metrics['accuracy']))
  def data(client, source=train_data):
    return preprocess(source.create_tf_dataset_for_client(client)).take(5)


  clients = [
      'ALL_S_WELL_THAT_ENDS_WELL_CELIA', 'MUCH_ADO_ABOUT_NOTHING_OTHELLO',
  ]

  train_datasets = [data(client) for client in clients]

  # We concatenate the test datasets for evaluation with Keras by creating a 
  # Dataset of Datasets, and then identity flat mapping across all the examples.
  test_dataset = tf.data.Dataset.from_tensor_slices(
      [data(client, test_data) for client in clients]).flat_map(lambda x: x)

  NUM_ROUNDS = 2

  # The state of the FL server, containing the model and optimization state.
  state = fed_avg.initialize()

  # Load our pre-trained Keras model weights into the global model state.
  pre_trained_weights = tff.learning.models.ModelWeights(
      trainable=[v.numpy() for v in keras_model.trainable_weights],
      non_trainable=[v.numpy() for v in keras_model.non_trainable_weights]
  )
  state = fed_avg.set_model_weights(state, pre_trained_weights)


  def keras_evaluate(state, round_num):
    # Take our global model weights and push them back into a Keras model to
    # use its standard `.evaluate()` method.
    keras_model = load_model(batch_size=BATCH_SIZE)
    keras_model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[FlattenedCategoricalAccuracy()])
    model_weights = fed_avg.get_model_weights(state)
    model_weights.assign_weights_to(keras_model)
    loss, accuracy = keras_model.evaluate(example_dataset, steps=2, verbose=0)
    print('\tEval: loss={l:.3f}, accuracy={a:.3f}'.format(l=loss, a=accuracy))


  for round_num in range(NUM_ROUNDS):
    print('Round {r}'.format(r=round_num))
    keras_evaluate(state, round_num)
    result = fed_avg.next(state, train_datasets)
    state = result.state
    train_metrics = result.metrics['client_work']['train']
    print('\tTrain: loss={l:.3f}, accuracy={a:.3f}'.format(
        l=train_metrics['loss'], a=train_metrics['accuracy']))

  print('Final evaluation')
  keras_evaluate(state, NUM_ROUNDS + 1)
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith('loss=')
  # The pre-trained weights, evaluated by Keras: TFF 0.87's loss to the digit
  # (its accuracy is Keras 2's metric; see the module's docstring).
  assert out[1:3] == ['Round 0', '\tEval: loss=4.686, accuracy=0.048']
  assert out[-2] == 'Final evaluation'
  train_metrics = result.metrics['client_work']['train']
  assert train_metrics['num_examples'] == 64  # As in TFF 0.87.
  assert train_metrics['num_batches'] == 8
  # TFF 0.87 trains only the embedding and dense layers of this model: after
  # its first round the GRU's weights are those of the fresh clone (kernel
  # |w| summing to 62.4 where the pre-trained ones sum to 88.8, bias all
  # zeros), and they stay so; its train losses are 4.516 then 4.323. Here
  # every layer trains from the pre-trained weights, so the losses fall
  # faster, and the GRU's weights move from the pre-trained ones (by less than half
  # their size), not back to zeros.
  train_losses = [float(line.split('loss=')[1].split(',')[0])
                  for line in out if line.startswith('\tTrain')]
  eval_losses = [float(line.split('loss=')[1].split(',')[0])
                 for line in out if line.startswith('\tEval')]
  assert train_losses[1] < train_losses[0] < 4.516
  assert eval_losses[2] < eval_losses[1] < eval_losses[0]
  gru_bias = fed_avg.get_model_weights(state).trainable[3]
  moved = np.linalg.norm(gru_bias - pre_trained_weights.trainable[3])
  assert 1e-3 < moved < np.linalg.norm(pre_trained_weights.trainable[3]) / 2


def test_the_process_compiles():
  fed_avg = build_fed_avg(compiled_keras_model())
  form = tff.compile(fed_avg)
  train_datasets = [
      preprocess(train_data.create_tf_dataset_for_client(client)).take(5)
      for client in train_data.client_ids[:2]]
  state, metrics = tff.run_round(form, form.initialize(), train_datasets)
  assert int(metrics['client_work']['train']['num_examples']) == 64
