"""TFF 0.87's "Client-efficient large-model federated learning via
federated_select and sparse aggregation", its cells written as a TFF user
writes them, with only the import line changed.

The cells run here as on a real TFF 0.87, with its numbers: the sparse
preprocessing, the Keras logistic model on sparse inputs, the token counts,
the client keys, the local token ids, a local training step, and the
federated sum of `IndexedSlices` (`federated_aggregate`), its type signature
and values. From `tff.SequenceType(batched_dataset1.element_spec)` on
(the federated training over `tff.federated_select`), the tutorial does not
run on TFF 0.87: its element holds a `tf.SparseTensor`, which TFF 0.87's
types do not take (TypeError: Unable to interpret an argument of type
SparseTensorSpec as a type spec). Here that cell is refused alike, naming
the line (the last test), so the training round after it has no TFF 0.87
behaviour to follow. Cells left out: the `!pip install` cell.
"""

import collections
from collections.abc import Callable
import itertools

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff


MAX_TOKENS_SELECTED_PER_CLIENT = 6


# There are some constraints on types
# here that will require some explicit type conversions:
#    - `tff.federated_select` requires int32
#    - `tf.SparseTensor` requires int64 indices.
TOKEN_DTYPE = np.int64
SELECT_KEY_DTYPE = np.int32

# Type for counts of token occurences.
TOKEN_COUNT_DTYPE = np.int32

# A sparse feature vector can be thought of as a map
# from TOKEN_DTYPE to FEATURE_DTYPE.
# Our features are {0, 1} indicators, so we could potentially
# use np.int8 as an optimization.
FEATURE_DTYPE = np.int32


NUM_OOV_BUCKETS = 1

BatchType = collections.namedtuple('BatchType', ['tokens', 'tags'])

def build_to_ids_fn(word_vocab: list[str],
                    tag_vocab: list[str]) -> Callable[[tf.Tensor], tf.Tensor]:
  """Constructs a function mapping examples to sequences of token indices."""
  word_table_values = np.arange(len(word_vocab), dtype=np.int64)
  word_table = tf.lookup.StaticVocabularyTable(
      tf.lookup.KeyValueTensorInitializer(word_vocab, word_table_values),
      num_oov_buckets=NUM_OOV_BUCKETS)

  tag_table_values = np.arange(len(tag_vocab), dtype=np.int64)
  tag_table = tf.lookup.StaticVocabularyTable(
      tf.lookup.KeyValueTensorInitializer(tag_vocab, tag_table_values),
      num_oov_buckets=NUM_OOV_BUCKETS)

  def to_ids(example):
    """Converts a Stack Overflow example to a bag-of-words/tags format."""
    sentence = tf.strings.join([example['tokens'], example['title']],
                               separator=' ')

    # We represent that label (output tags) densely.
    raw_tags = example['tags']
    tags = tf.strings.split(raw_tags, sep='|')
    tags = tag_table.lookup(tags)
    tags, _ = tf.unique(tags)
    tags = tf.one_hot(tags, len(tag_vocab) + NUM_OOV_BUCKETS)
    tags = tf.reduce_max(tags, axis=0)

    # We represent the features as a SparseTensor of {0, 1}s.
    words = tf.strings.split(sentence)
    tokens = word_table.lookup(words)
    tokens, _ = tf.unique(tokens)
    # Note:  We could choose to use the word counts as the feature vector
    # instead of just {0, 1} values (see tf.unique_with_counts).
    tokens = tf.reshape(tokens, shape=(tf.size(tokens), 1))
    tokens_st = tf.SparseTensor(
        tokens,
        tf.ones(tf.size(tokens), dtype=FEATURE_DTYPE),
        dense_shape=(len(word_vocab) + NUM_OOV_BUCKETS,))
    tokens_st = tf.sparse.reorder(tokens_st)

    return BatchType(tokens_st, tags)

  return to_ids


def build_preprocess_fn(word_vocab, tag_vocab):

  @tf.function
  def preprocess_fn(dataset):
    to_ids = build_to_ids_fn(word_vocab, tag_vocab)
    # We *don't* shuffle in order to make this colab deterministic for
    # easier testing and reproducibility.
    # But real-world training should use `.shuffle()`.
    return dataset.map(to_ids, num_parallel_calls=tf.data.experimental.AUTOTUNE)

  return preprocess_fn


# Features
FRUIT_WORDS = ['apple', 'orange', 'pear', 'kiwi']
VEGETABLE_WORDS = ['carrot', 'broccoli', 'arugula', 'peas']
FISH_WORDS = ['trout', 'tuna', 'cod', 'salmon']
WORD_VOCAB = FRUIT_WORDS + VEGETABLE_WORDS + FISH_WORDS

# Labels
TAG_VOCAB = ['FRUIT', 'VEGETABLE', 'FISH']



preprocess_fn = build_preprocess_fn(WORD_VOCAB, TAG_VOCAB)


def make_dataset(raw):
  d = tf.data.Dataset.from_tensor_slices(
      # Matches the StackOverflow formatting
      collections.OrderedDict(
          tokens=tf.constant([t[0] for t in raw]),
          tags=tf.constant([t[1] for t in raw]),
          title=['' for _ in raw]))
  d = preprocess_fn(d)
  return d


# 4 distinct tokens
CLIENT1_DATASET = make_dataset([
    ('apple orange apple orange', 'FRUIT'),
    ('carrot trout', 'VEGETABLE|FISH'),
    ('orange apple', 'FRUIT'),
    ('orange', 'ORANGE|CITRUS')  # 2 OOV tag
])

# 6 distinct tokens
CLIENT2_DATASET = make_dataset([
    ('pear cod', 'FRUIT|FISH'),
    ('arugula peas', 'VEGETABLE'),
    ('kiwi pear', 'FRUIT'),
    ('sturgeon', 'FISH'),  # OOV word
    ('sturgeon bass', 'FISH')  # 2 OOV words
])

# A client with all possible words & tags (13 distinct tokens).
# With MAX_TOKENS_SELECTED_PER_CLIENT = 6, we won't download the model
# slices for all tokens that occur on this client.
CLIENT3_DATASET = make_dataset([
    (' '.join(WORD_VOCAB + ['oovword']), '|'.join(TAG_VOCAB)),
    # Mathe the OOV token and 'salmon' occur in the largest number
    # of examples on this client:
    ('salmon oovword', 'FISH|OOVTAG')
])


NUM_WORDS = len(WORD_VOCAB)
NUM_TAGS = len(TAG_VOCAB)

WORD_VOCAB_SIZE = NUM_WORDS + NUM_OOV_BUCKETS
TAG_VOCAB_SIZE = NUM_TAGS + NUM_OOV_BUCKETS


batched_dataset1 = CLIENT1_DATASET.batch(2)
batched_dataset2 = CLIENT2_DATASET.batch(3)
batched_dataset3 = CLIENT3_DATASET.batch(2)

batch1 = next(iter(batched_dataset1))
batch2 = next(iter(batched_dataset2))
batch3 = next(iter(batched_dataset3))


def create_logistic_model(word_vocab_size: int, vocab_tags_size: int):

  model = tf.keras.models.Sequential([
      tf.keras.layers.InputLayer(input_shape=(word_vocab_size,), sparse=True),
      tf.keras.layers.Dense(
          vocab_tags_size,
          activation='sigmoid',
          kernel_initializer=tf.keras.initializers.zeros,
          # For simplicity, don't use a bias vector; this means the model
          # is a single tensor, and we only need sparse aggregation of
          # the per-token slices of the model. Generalizing to also handle
          # other model weights that are fully updated
          # (non-dense broadcast and aggregate) would be a good exercise.
          use_bias=False),
  ])

  return model


@tf.function
def token_count_fn(token_counts, batch):
  """Adds counts from `batch` to the running `token_counts` sum."""
  # Sum across the batch dimension.
  flat_tokens = tf.sparse.reduce_sum(
      batch.tokens, axis=0, output_is_sparse=True)
  flat_tokens = tf.cast(flat_tokens, dtype=TOKEN_COUNT_DTYPE)
  return tf.sparse.add(token_counts, flat_tokens)


@tf.function
def keys_for_client(client_dataset, max_tokens_per_client):
  """Computes a set of max_tokens_per_client keys."""
  initial_token_counts = tf.SparseTensor(
      indices=tf.zeros((0, 1), dtype=TOKEN_DTYPE),
      values=tf.zeros((0,), dtype=TOKEN_COUNT_DTYPE),
      dense_shape=(WORD_VOCAB_SIZE,))
  client_token_counts = client_dataset.reduce(initial_token_counts,
                                              token_count_fn)
  # Find the most-frequently occuring tokens
  tokens = tf.reshape(client_token_counts.indices, shape=(-1,))
  counts = client_token_counts.values
  perm = tf.argsort(counts, direction='DESCENDING')
  tokens = tf.gather(tokens, perm)
  counts = tf.gather(counts, perm)
  num_raw_tokens = tf.shape(tokens)[0]
  actual_num_tokens = tf.minimum(max_tokens_per_client, num_raw_tokens)
  selected_tokens = tokens[:actual_num_tokens]
  paddings = [[0, max_tokens_per_client - tf.shape(selected_tokens)[0]]]
  padded_tokens = tf.pad(selected_tokens, paddings=paddings)
  # Make sure the type is statically determined
  padded_tokens = tf.reshape(padded_tokens, shape=(max_tokens_per_client,))

  # We will pass these tokens as keys into `federated_select`, which
  # requires SELECT_KEY_DTYPE=np.int32 keys.
  padded_tokens = tf.cast(padded_tokens, dtype=SELECT_KEY_DTYPE)
  return padded_tokens, actual_num_tokens


@tf.function
def map_to_local_token_ids(client_data, client_keys):
  global_to_local = tf.lookup.StaticHashTable(
      # Note int32 -> int64 maps are not supported
      tf.lookup.KeyValueTensorInitializer(
          keys=tf.cast(client_keys, dtype=TOKEN_DTYPE),
          # Note we need to use tf.shape, not the static
          # shape client_keys.shape[0]
          values=tf.range(0, limit=tf.shape(client_keys)[0],
                          dtype=TOKEN_DTYPE)),
      # We use -1 for tokens that were not selected, which can occur for clients
      # with more than MAX_TOKENS_SELECTED_PER_CLIENT distinct tokens.
      # We will simply remove these invalid indices from the batch below.
      default_value=-1)

  def to_local_ids(sparse_tokens):
    indices_t = tf.transpose(sparse_tokens.indices)
    batch_indices = indices_t[0]  # First column
    tokens = indices_t[1]  # Second column
    tokens = tf.map_fn(
        lambda global_token_id: global_to_local.lookup(global_token_id), tokens)
    # Remove tokens that aren't actually available (looked up as -1):
    available_tokens = tokens >= 0
    tokens = tokens[available_tokens]
    batch_indices = batch_indices[available_tokens]

    updated_indices = tf.transpose(
        tf.concat([[batch_indices], [tokens]], axis=0))
    st = tf.sparse.SparseTensor(
        updated_indices,
        tf.ones(tf.size(tokens), dtype=FEATURE_DTYPE),
        # Each client has at most MAX_TOKENS_SELECTED_PER_CLIENT distinct tokens.
        dense_shape=[sparse_tokens.dense_shape[0], MAX_TOKENS_SELECTED_PER_CLIENT])
    st = tf.sparse.reorder(st)
    return st

  return client_data.map(lambda b: BatchType(to_local_ids(b.tokens), b.tags))


@tf.function
def slices_dataset_to_tensor(slices_dataset):
  """Convert a dataset of slices to a tensor."""
  # Use batching to gather all of the slices into a single tensor.
  d = slices_dataset.batch(MAX_TOKENS_SELECTED_PER_CLIENT,
                           drop_remainder=False)
  iter_d = iter(d)
  tensor = next(iter_d)
  # Make sure we have consumed everything
  opt = iter_d.get_next_as_optional()
  tf.Assert(tf.logical_not(opt.has_value()), data=[''], name='CHECK_EMPTY')
  return tensor


@tf.function
def client_train_fn(model, client_optimizer,
                    model_slices_as_dataset, client_data,
                    client_keys, actual_num_tokens):

  initial_model_weights = slices_dataset_to_tensor(model_slices_as_dataset)
  assert len(model.trainable_variables) == 1
  model.trainable_variables[0].assign(initial_model_weights)

  # Only keep the "real" (unpadded) keys.
  client_keys = client_keys[:actual_num_tokens]

  client_data = map_to_local_token_ids(client_data, client_keys)

  loss_fn = tf.keras.losses.BinaryCrossentropy()
  for features, labels in client_data:
    with tf.GradientTape() as tape:
      predictions = model(features)
      loss = loss_fn(labels, predictions)
    grads = tape.gradient(loss, model.trainable_variables)
    client_optimizer.apply_gradients(zip(grads, model.trainable_variables))

  model_weights_delta = model.trainable_weights[0] - initial_model_weights
  model_weights_delta = tf.slice(model_weights_delta, begin=[0, 0],
                           size=[actual_num_tokens, -1])
  return client_keys, model_weights_delta


def federated_indexed_slices_sum(slice_indices, slice_values, dense_shape):
  """
  Sums IndexedSlices@CLIENTS to a dense @SERVER Tensor.

  Intermediate aggregation is performed by converting to a dense representation,
  which may not be suitable for all applications.

  Args:
    slice_indices: An IndexedSlices.indices tensor @CLIENTS.
    slice_values: An IndexedSlices.values tensor @CLIENTS.
    dense_shape: A statically known dense shape.

  Returns:
    A dense tensor placed @SERVER representing the sum of the client's
    IndexedSclies.
  """
  slices_dtype = slice_values.type_signature.member.dtype
  zero = tff.tensorflow.computation(
      lambda: tf.zeros(dense_shape, dtype=slices_dtype))()

  @tf.function
  def accumulate_slices(dense, client_value):
    indices, slices = client_value
    # There is no built-in way to add `IndexedSlices`, but
    # tf.convert_to_tensor is a quick way to convert to a dense representation
    # so we can add them.
    return dense + tf.convert_to_tensor(
        tf.IndexedSlices(slices, indices, dense_shape))


  return tff.federated_aggregate(
      (slice_indices, slice_values),
      zero=zero,
      accumulate=tff.tensorflow.computation(accumulate_slices),
      merge=tff.tensorflow.computation(lambda d1, d2: tf.add(d1, d2, name='merge')),
      report=tff.tensorflow.computation(lambda d: d))



def test_the_vocabularies(capsys):
  print('Word vocab')
  for i, word in enumerate(WORD_VOCAB):
    print(f'{i:2d} {word}')

  print('\nTag vocab')
  for i, tag in enumerate(TAG_VOCAB):
    print(f'{i:2d} {tag}')

  out = capsys.readouterr().out
  assert out.startswith('Word vocab\n 0 apple\n 1 orange\n')
  assert out.endswith('Tag vocab\n 0 FRUIT\n 1 VEGETABLE\n 2 FISH\n')

def test_the_model_predicts_and_trains_on_sparse_batches():
  model = create_logistic_model(WORD_VOCAB_SIZE, TAG_VOCAB_SIZE)
  p = model.predict(batch1.tokens)
  print(p)
  np.testing.assert_array_equal(p, np.full((2, 4), 0.5))  # As TFF 0.87's.
  model.compile(optimizer=tf.keras.optimizers.Adagrad(learning_rate=0.001),
                loss=tf.keras.losses.BinaryCrossentropy())
  loss = model.train_on_batch(batch1.tokens, batch1.tags)
  assert float(loss) == pytest.approx(np.log(2.0), rel=1e-5)

def test_token_counts():
  # Simple tests
  # Create the initial zero token counts using empty tensors.
  initial_token_counts = tf.SparseTensor(
      indices=tf.zeros(shape=(0, 1), dtype=TOKEN_DTYPE),
      values=tf.zeros(shape=(0,), dtype=TOKEN_COUNT_DTYPE),
      dense_shape=(WORD_VOCAB_SIZE,))

  client_token_counts = batched_dataset1.reduce(initial_token_counts,
                                                token_count_fn)
  tokens = tf.reshape(client_token_counts.indices, (-1,)).numpy()
  print('tokens:', tokens)
  np.testing.assert_array_equal(tokens, [0, 1, 4, 8])
  # The count is the number of *examples* in which the token/word
  # occurs, not the total number of occurences, since we still featurize
  # multiple occurences in the same example as a "1".
  counts = client_token_counts.values.numpy()
  print('counts:', counts)
  np.testing.assert_array_equal(counts, [2, 3, 1, 1])

def test_keys_for_client():
  # Simple test

  # Case 1: actual_num_tokens > max_tokens_per_client
  selected_tokens, actual_num_tokens = keys_for_client(batched_dataset1, 3)
  assert tf.size(selected_tokens) == 3
  assert actual_num_tokens == 3

  # Case 2: actual_num_tokens < max_tokens_per_client
  selected_tokens, actual_num_tokens = keys_for_client(batched_dataset1, 10)
  assert tf.size(selected_tokens) == 10
  assert actual_num_tokens == 4

def test_local_token_ids():
  # Simple test
  client_keys, actual_num_tokens = keys_for_client(
      batched_dataset3, MAX_TOKENS_SELECTED_PER_CLIENT)
  client_keys = client_keys[:actual_num_tokens]

  d = map_to_local_token_ids(batched_dataset3, client_keys)
  batch  = next(iter(d))
  all_tokens = tf.gather(batch.tokens.indices, indices=1, axis=1)
  # Confirm we have local indices in the range [0, MAX):
  assert tf.math.reduce_max(all_tokens) < MAX_TOKENS_SELECTED_PER_CLIENT
  assert tf.math.reduce_max(all_tokens) >= 0

def test_slices_dataset_to_tensor():
  # Simple test
  weights = np.random.random(
      size=(MAX_TOKENS_SELECTED_PER_CLIENT, TAG_VOCAB_SIZE)).astype(np.float32)
  model_slices_as_dataset = tf.data.Dataset.from_tensor_slices(weights)
  weights2 = slices_dataset_to_tensor(model_slices_as_dataset)
  np.testing.assert_array_equal(weights, weights2)

def test_client_train_fn():
  # Simple test
  # Note if you execute this cell a second time, you need to also re-execute
  # the preceeding cell to avoid "tf.function-decorated function tried to
  # create variables on non-first call" errors.
  on_device_model = create_logistic_model(MAX_TOKENS_SELECTED_PER_CLIENT,
                                          TAG_VOCAB_SIZE)
  client_optimizer = tf.keras.optimizers.SGD(learning_rate=0.001)
  client_keys, actual_num_tokens = keys_for_client(
      batched_dataset2, MAX_TOKENS_SELECTED_PER_CLIENT)

  model_slices_as_dataset = tf.data.Dataset.from_tensor_slices(
      np.zeros((MAX_TOKENS_SELECTED_PER_CLIENT, TAG_VOCAB_SIZE),
               dtype=np.float32))

  keys, delta = client_train_fn(
      on_device_model,
      client_optimizer,
      model_slices_as_dataset,
      client_data=batched_dataset3,
      client_keys=client_keys,
      actual_num_tokens=actual_num_tokens)

  print(delta)
  # From TFF 0.87:
  np.testing.assert_array_equal(keys, [2, 12, 3, 6, 7, 10])
  row = [6.25e-05, 6.25e-05, 6.25e-05, -6.25e-05]
  np.testing.assert_allclose(
      delta, [row, [0., 0., 1.25e-04, 0.], row, row, row, row], rtol=1e-6)

def test_federated_indexed_slices_sum():
  dense_shape = (6, 2)
  indices_type = tff.TensorType(np.int64, (None,))
  values_type = tff.TensorType(np.float32, (None, 2))
  client_slice_type = tff.FederatedType(
      (indices_type, values_type), tff.CLIENTS)

  @tff.federated_computation(client_slice_type)
  def test_sum_indexed_slices(indices_values_at_client):
    indices, values = indices_values_at_client
    return federated_indexed_slices_sum(indices, values, dense_shape)

  print(test_sum_indexed_slices.type_signature)
  assert str(test_sum_indexed_slices.type_signature) == (  # As TFF 0.87's.
      '({<int64[?],float32[?,2]>}@CLIENTS -> float32[6,2]@SERVER)')
  x = tf.IndexedSlices(
      values=np.array([[2., 2.1], [0., 0.1], [1., 1.1], [5., 5.1]],
                      dtype=np.float32),
      indices=[2, 0, 1, 5],
      dense_shape=dense_shape)
  y = tf.IndexedSlices(
      values=np.array([[0., 0.3], [3.1, 3.2]], dtype=np.float32),
      indices=[1, 3],
      dense_shape=dense_shape)

  # Sum one.
  result = test_sum_indexed_slices([(x.indices, x.values)])
  np.testing.assert_array_equal(tf.convert_to_tensor(x), result)

  # Sum two.
  expected = [[0., 0.1], [1., 1.4], [2., 2.1], [3.1, 3.2], [0., 0.], [5., 5.1]]
  result = test_sum_indexed_slices([(x.indices, x.values), (y.indices, y.values)])
  np.testing.assert_array_almost_equal(expected, result)

def test_a_sequence_of_sparse_batches_is_refused_as_by_tff():
  DENSE_MODEL_SHAPE = (WORD_VOCAB_SIZE, TAG_VOCAB_SIZE)
  # TFF 0.87: TypeError: Unable to interpret an argument of type
  # SparseTensorSpec as a type spec.
  with pytest.raises(tff.errors.FederatedError, match='SparseTensorSpec'):
    client_data_type = tff.SequenceType(batched_dataset1.element_spec)
  model_type = tff.TensorType(np.float32, shape=DENSE_MODEL_SHAPE)
  assert str(model_type) == 'float32[13,4]'
