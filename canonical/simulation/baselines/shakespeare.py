"""TFF's Shakespeare baseline (`tff.simulation.baselines.shakespeare`):
next-character prediction with a two-layer LSTM, on Shakespeare read by
`tff.simulation.datasets.shakespeare` (or its synthetic version).

Characters become TFF's token ids: 0 pads, 1..86 are TFF's vocabulary,
then out-of-vocabulary, beginning and end of a snippet.
"""

import functools

import keras
import tensorflow as tf

from canonical import errors
from canonical.learning import models as learning_models
from canonical.simulation.baselines import keras_metrics
from canonical.simulation.baselines import task as task_lib
from canonical.simulation.datasets import shakespeare as shakespeare_data
from canonical.simulation.datasets import tff_synthetic_data

CHAR_VOCAB = list(tff_synthetic_data.SHAKESPEARE_CHAR_VOCAB)
VOCAB_LENGTH = len(CHAR_VOCAB) + 4  # With padding, oov, bos and eos.
DEFAULT_SEQUENCE_LENGTH = 80  # McMahan et al., AISTATS 2017.
_DEFAULT_SHUFFLE_BUFFER_SIZE = 50


def get_special_tokens():
  """`(pad, oov, bos, eos)` token ids."""
  size = len(CHAR_VOCAB)
  return 0, size + 1, size + 2, size + 3


def create_recurrent_model(vocab_size, sequence_length, mask_zero=True):
  """An embedding of 8, two LSTMs of 256 (he_normal) returning sequences,
  and logits over `vocab_size`."""
  if vocab_size < 1 or sequence_length < 1:
    raise errors.InvalidValueError(
        'vocab_size and sequence_length must be positive integers, got '
        f'{vocab_size} and {sequence_length}.')
  lstm = functools.partial(keras.layers.LSTM, units=256,
                           kernel_initializer='he_normal',
                           return_sequences=True, stateful=False)
  return keras.Sequential([
      keras.Input(shape=(sequence_length,)),
      keras.layers.Embedding(input_dim=vocab_size, output_dim=8,
                             mask_zero=mask_zero),
      lstm(), lstm(),
      keras.layers.Dense(vocab_size),
  ])


def _tokenizer(split_length):
  """snippet -> its token ids between bos and eos, padded with 0 to a
  multiple of `split_length`."""
  _, _, bos, eos = get_special_tokens()
  table = tf.lookup.StaticVocabularyTable(
      tf.lookup.KeyValueTensorInitializer(
          CHAR_VOCAB, tf.range(len(CHAR_VOCAB), dtype=tf.int64)),
      num_oov_buckets=1)

  def tokenize(example):
    tokens = table.lookup(tf.strings.bytes_split(example['snippets'])) + 1
    tokens = tf.concat([[bos], tokens, [eos]], 0)
    padding = (-tf.shape(tokens)[0]) % split_length
    return tf.concat([tokens, tf.zeros(padding, tf.int64)], 0)

  return tokenize


def _split_target(sequences):
  return sequences[:, :-1], sequences[:, 1:]


def create_preprocess_fn(spec, sequence_length=DEFAULT_SEQUENCE_LENGTH):
  """Dataset of snippets -> batches of (characters, next characters), each
  `sequence_length` tokens."""
  if sequence_length < 1:
    raise errors.InvalidValueError(
        f'sequence_length must be a positive integer, got {sequence_length}.')

  def preprocess_fn(dataset):
    dataset = task_lib.shuffle_repeat_take(dataset, spec,
                                           _DEFAULT_SHUFFLE_BUFFER_SIZE)
    tokenize = _tokenizer(sequence_length + 1)
    return (dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
            .unbatch().batch(sequence_length + 1, drop_remainder=True)
            .batch(spec.batch_size)
            .map(_split_target, num_parallel_calls=tf.data.AUTOTUNE))

  return preprocess_fn


def create_character_prediction_task_from_datasets(
    train_client_spec, eval_client_spec, sequence_length, train_data,
    test_data) -> task_lib.BaselineTask:
  """The character prediction task on given Shakespeare-like data."""
  if sequence_length < 1:
    raise errors.InvalidValueError(
        f'sequence_length must be a positive integer, got {sequence_length}.')
  eval_client_spec = eval_client_spec or task_lib.ClientSpec(
      num_epochs=1, batch_size=32, shuffle_buffer_size=1)
  task_datasets = task_lib.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data,
      train_preprocess_fn=create_preprocess_fn(train_client_spec,
                                               sequence_length),
      eval_preprocess_fn=create_preprocess_fn(eval_client_spec,
                                              sequence_length))
  pad, _, _, _ = get_special_tokens()

  def model_fn():
    return learning_models.from_keras_model(
        create_recurrent_model(VOCAB_LENGTH, sequence_length),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=task_datasets.element_type_structure,
        metrics=[keras_metrics.NumTokensCounter(masked_tokens=[pad]),
                 keras_metrics.MaskedCategoricalAccuracy(masked_tokens=[pad])])

  return task_lib.BaselineTask(task_datasets, model_fn)


def create_character_prediction_task(
    train_client_spec: task_lib.ClientSpec,
    eval_client_spec: task_lib.ClientSpec | None = None,
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    cache_dir: str | None = None,
    use_synthetic_data: bool = False) -> task_lib.BaselineTask:
  """TFF's Shakespeare next-character prediction: sparse categorical
  cross-entropy on logits; metrics the tokens counted and the accuracy,
  padding left out. Evaluation batches of 32 by default."""
  if use_synthetic_data:
    train = test = shakespeare_data.get_synthetic()
  else:
    train, test = shakespeare_data.load_data(cache_dir=cache_dir)
  return create_character_prediction_task_from_datasets(
      train_client_spec, eval_client_spec, sequence_length, train, test)
