"""TFF's Stack Overflow baselines (`tff.simulation.baselines.stackoverflow`):
next-word prediction with an LSTM, and tag prediction by logistic
regression on bags of words, on Stack Overflow read by
`tff.simulation.datasets.stackoverflow` (or its synthetic version).
"""

import dataclasses

import keras
import tensorflow as tf

from canonical import errors
from canonical.learning import models as learning_models
from canonical.simulation.baselines import keras_metrics
from canonical.simulation.baselines import task as task_lib
from canonical.simulation.datasets import stackoverflow as stackoverflow_data

DEFAULT_SEQUENCE_LENGTH = 20
DEFAULT_SHUFFLE_BUFFER_SIZE = 1000
DEFAULT_TAG_VOCAB_SIZE = 500
DEFAULT_WORD_VOCAB_SIZE = 10000


def _positive(name, value):
  if value < 1:
    raise errors.InvalidValueError(
        f'{name} must be a positive integer, got {value}.')


def _vocabulary_table(vocab, num_oov_buckets):
  return tf.lookup.StaticVocabularyTable(
      tf.lookup.KeyValueTensorInitializer(
          vocab, tf.range(len(vocab), dtype=tf.int64)),
      num_oov_buckets=num_oov_buckets)


# Next-word prediction.


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
  """Token ids around the vocabulary's (1..vocab_size): padding 0, then the
  out-of-vocabulary buckets, beginning and end of a sentence."""
  padding: int
  out_of_vocab: list
  beginning_of_sentence: int
  end_of_sentence: int

  def get_number_of_special_tokens(self):
    return 3 + len(self.out_of_vocab)


def get_special_tokens(vocab_size, num_out_of_vocab_buckets=1):
  return SpecialTokens(
      padding=0,
      out_of_vocab=[vocab_size + 1 + n
                    for n in range(num_out_of_vocab_buckets)],
      beginning_of_sentence=vocab_size + num_out_of_vocab_buckets + 1,
      end_of_sentence=vocab_size + num_out_of_vocab_buckets + 2)


def _word_ids(vocab, max_sequence_length, num_out_of_vocab_buckets):
  """post -> bos, its first `max_sequence_length` words' ids and, if the
  post was shorter, eos."""
  special = get_special_tokens(len(vocab), num_out_of_vocab_buckets)
  table = _vocabulary_table(vocab, num_out_of_vocab_buckets)

  def to_ids(example):
    words = tf.strings.split(tf.reshape(example['tokens'], [1]),
                             sep=' ').values[:max_sequence_length]
    ids = table.lookup(words) + 1
    ids = tf.cond(tf.size(ids) < max_sequence_length,
                  lambda: tf.concat([ids, [special.end_of_sentence]], 0),
                  lambda: ids)
    return tf.concat([[special.beginning_of_sentence], ids], 0)

  return to_ids


def create_word_preprocess_fn(spec, vocab,
                              sequence_length=DEFAULT_SEQUENCE_LENGTH,
                              num_out_of_vocab_buckets=1):
  """Dataset of posts -> batches of (words, next words), padded to
  `sequence_length`."""
  if not vocab:
    raise errors.InvalidValueError('vocab must be non-empty.')
  _positive('sequence_length', sequence_length)
  _positive('num_out_of_vocab_buckets', num_out_of_vocab_buckets)

  def preprocess_fn(dataset):
    to_ids = _word_ids(vocab, sequence_length, num_out_of_vocab_buckets)
    dataset = task_lib.shuffle_repeat_take(dataset, spec,
                                           DEFAULT_SHUFFLE_BUFFER_SIZE)
    return (dataset.map(to_ids, num_parallel_calls=tf.data.AUTOTUNE)
            .padded_batch(spec.batch_size,
                          padded_shapes=[sequence_length + 1])
            .map(lambda chunk: (chunk[:, :-1], chunk[:, 1:]),
                 num_parallel_calls=tf.data.AUTOTUNE))

  return preprocess_fn


class TransposableEmbedding(keras.layers.Layer):
  """Logits from an embedding's own matrix (shared input and output
  embedding)."""

  def __init__(self, embedding_layer):
    super().__init__()
    self._embedding_layer = embedding_layer

  def call(self, inputs):
    return tf.matmul(inputs, self._embedding_layer.embeddings,
                     transpose_b=True)


def create_recurrent_model(vocab_size, embedding_size=96, num_lstm_layers=1,
                           lstm_size=670, shared_embedding=False):
  """An embedding of `embedding_size` (masking 0), `num_lstm_layers` LSTMs
  of `lstm_size` each projected back to `embedding_size`, and logits over
  `vocab_size`."""
  for name, value in (('vocab_size', vocab_size),
                      ('embedding_size', embedding_size),
                      ('num_lstm_layers', num_lstm_layers),
                      ('lstm_size', lstm_size)):
    _positive(name, value)
  inputs = keras.Input(shape=(None,))
  embedding = keras.layers.Embedding(input_dim=vocab_size,
                                     output_dim=embedding_size,
                                     mask_zero=True)
  projected = embedding(inputs)
  for _ in range(num_lstm_layers):
    processed = keras.layers.LSTM(lstm_size, return_sequences=True)(projected)
    projected = keras.layers.Dense(embedding_size)(processed)
  if shared_embedding:
    logits = TransposableEmbedding(embedding)(projected)
  else:
    logits = keras.layers.Dense(vocab_size)(projected)
  return keras.Model(inputs=inputs, outputs=logits)


def create_word_prediction_task_from_datasets(
    train_client_spec, eval_client_spec, sequence_length, vocab,
    num_out_of_vocab_buckets, train_data, test_data,
    validation_data) -> task_lib.BaselineTask:
  """The next-word prediction task on given Stack Overflow-like data."""
  _positive('sequence_length', sequence_length)
  _positive('vocabulary size', len(vocab))
  _positive('num_out_of_vocab_buckets', num_out_of_vocab_buckets)
  eval_client_spec = eval_client_spec or task_lib.ClientSpec(
      num_epochs=1, batch_size=64, shuffle_buffer_size=1)

  def preprocess(spec):
    return create_word_preprocess_fn(spec, vocab, sequence_length,
                                     num_out_of_vocab_buckets)

  task_datasets = task_lib.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data,
      validation_data=validation_data,
      train_preprocess_fn=preprocess(train_client_spec),
      eval_preprocess_fn=preprocess(eval_client_spec))
  special = get_special_tokens(len(vocab), num_out_of_vocab_buckets)
  pad, oov, eos = (special.padding, special.out_of_vocab,
                   special.end_of_sentence)
  extended_vocab_size = len(vocab) + special.get_number_of_special_tokens()

  def model_fn():
    return learning_models.from_keras_model(
        create_recurrent_model(extended_vocab_size),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=task_datasets.element_type_structure,
        metrics=[
            keras_metrics.NumTokensCounter(masked_tokens=[pad]),
            keras_metrics.MaskedCategoricalAccuracy(
                name='accuracy', masked_tokens=[pad]),
            keras_metrics.MaskedCategoricalAccuracy(
                name='accuracy_without_out_of_vocab',
                masked_tokens=[pad] + oov),
            # The beginning of a sentence is never a label.
            keras_metrics.MaskedCategoricalAccuracy(
                name='accuracy_without_out_of_vocab_or_end_of_sentence',
                masked_tokens=[pad, eos] + oov),
        ])

  return task_lib.BaselineTask(task_datasets, model_fn)


def _data(cache_dir, use_synthetic_data):
  """`(train, validation, test)`."""
  if use_synthetic_data:
    synthetic = stackoverflow_data.get_synthetic()
    return synthetic, synthetic, synthetic
  return stackoverflow_data.load_data(cache_dir=cache_dir)


def create_word_prediction_task(
    train_client_spec: task_lib.ClientSpec,
    eval_client_spec: task_lib.ClientSpec | None = None,
    sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
    vocab_size: int = DEFAULT_WORD_VOCAB_SIZE,
    num_out_of_vocab_buckets: int = 1, cache_dir: str | None = None,
    use_synthetic_data: bool = False) -> task_lib.BaselineTask:
  """TFF's Stack Overflow next-word prediction over the `vocab_size` most
  used words: sparse categorical cross-entropy on logits; metrics the
  tokens counted and three accuracies leaving out padding, then
  out-of-vocabulary words, then the end of a sentence too."""
  _positive('vocab_size', vocab_size)
  train, validation, test = _data(cache_dir, use_synthetic_data)
  counts = (stackoverflow_data.get_synthetic_word_counts()
            if use_synthetic_data else
            stackoverflow_data.load_word_counts(vocab_size=vocab_size))
  vocab = list(counts)[:vocab_size]
  return create_word_prediction_task_from_datasets(
      train_client_spec, eval_client_spec, sequence_length, vocab,
      num_out_of_vocab_buckets, train, test, validation)


# Tag prediction.


def _bag_of_words_and_tags(word_vocab, tag_vocab):
  """post -> (word frequencies over the vocabulary, multi-hot tags)."""
  words_table = _vocabulary_table(word_vocab, 1)
  tags_table = _vocabulary_table(tag_vocab, 1)
  word_count, tag_count = len(word_vocab), len(tag_vocab)

  def to_ids(example):
    sentence = tf.strings.join([example['tokens'], example['title']],
                               separator=' ')
    words = words_table.lookup(tf.strings.split(sentence))
    sums = tf.reduce_sum(tf.one_hot(words, word_count), axis=0)
    frequencies = tf.math.divide_no_nan(sums, tf.reduce_sum(sums))
    tags = tags_table.lookup(tf.strings.split(example['tags'], sep='|'))
    tags = tf.reduce_sum(tf.one_hot(tags, tag_count + 1), axis=0)
    return frequencies, tags[:tag_count]

  return to_ids


def create_tag_preprocess_fn(spec, word_vocab, tag_vocab):
  """Dataset of posts -> batches of (bag of words, tags)."""
  if not word_vocab or not tag_vocab:
    raise errors.InvalidValueError('word_vocab and tag_vocab must be '
                                   'non-empty.')

  def preprocess_fn(dataset):
    dataset = task_lib.shuffle_repeat_take(dataset, spec,
                                           DEFAULT_SHUFFLE_BUFFER_SIZE)
    return dataset.map(_bag_of_words_and_tags(word_vocab, tag_vocab),
                       num_parallel_calls=tf.data.AUTOTUNE).batch(
                           spec.batch_size)

  return preprocess_fn


def create_tag_prediction_task_from_datasets(
    train_client_spec, eval_client_spec, word_vocab, tag_vocab, train_data,
    test_data, validation_data) -> task_lib.BaselineTask:
  """The tag prediction task on given Stack Overflow-like data."""
  eval_client_spec = eval_client_spec or task_lib.ClientSpec(
      num_epochs=1, batch_size=100, shuffle_buffer_size=1)
  task_datasets = task_lib.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data,
      validation_data=validation_data,
      train_preprocess_fn=create_tag_preprocess_fn(
          train_client_spec, word_vocab, tag_vocab),
      eval_preprocess_fn=create_tag_preprocess_fn(
          eval_client_spec, word_vocab, tag_vocab))

  def model_fn():
    keras_model = keras.Sequential([
        keras.Input(shape=(len(word_vocab),)),
        keras.layers.Dense(len(tag_vocab), activation='sigmoid')])
    return learning_models.from_keras_model(
        keras_model,
        loss=keras.losses.BinaryCrossentropy(from_logits=False,
                                             reduction='sum'),
        input_spec=task_datasets.element_type_structure,
        metrics=[keras.metrics.Precision(name='precision'),
                 keras.metrics.Recall(top_k=5, name='recall_at_5')])

  return task_lib.BaselineTask(task_datasets, model_fn)


def create_tag_prediction_task(
    train_client_spec: task_lib.ClientSpec,
    eval_client_spec: task_lib.ClientSpec | None = None,
    word_vocab_size: int = DEFAULT_WORD_VOCAB_SIZE,
    tag_vocab_size: int = DEFAULT_TAG_VOCAB_SIZE,
    cache_dir: str | None = None,
    use_synthetic_data: bool = False) -> task_lib.BaselineTask:
  """TFF's Stack Overflow tag prediction: logistic regression from the
  word frequencies of a post's body and title to its tags (the
  `tag_vocab_size` most used); summed binary cross-entropy, precision and
  recall at 5."""
  _positive('word_vocab_size', word_vocab_size)
  _positive('tag_vocab_size', tag_vocab_size)
  train, validation, test = _data(cache_dir, use_synthetic_data)
  if use_synthetic_data:
    words = stackoverflow_data.get_synthetic_word_counts()
    tags = stackoverflow_data.get_synthetic_tag_counts()
  else:
    words = stackoverflow_data.load_word_counts(vocab_size=word_vocab_size)
    tags = stackoverflow_data.load_tag_counts()
  return create_tag_prediction_task_from_datasets(
      train_client_spec, eval_client_spec, list(words)[:word_vocab_size],
      list(tags)[:tag_vocab_size], train, test, validation)
