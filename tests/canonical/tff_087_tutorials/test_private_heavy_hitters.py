"""TFF 0.87's "Private Heavy Hitters", its cells written as a TFF user
writes them, with only the import line changed: words of Shakespeare's
clients counted by `tff.analytics.heavy_hitters.iblt.build_iblt_computation`
(an invertible Bloom lookup table summed over clients), then central DP
(Laplace noise and a threshold) on the server.

What differs from the tutorial's cells, and why:
- Shakespeare (`tff.simulation.datasets.shakespeare.load_data()`, a
  download) is `shakespeare.get_synthetic()`, TFF's own three synthetic
  clients (the tutorial takes ten).
- `tensorflow_text` is not installed: it is not installable beside
  `tensorflow-cpu` (its wheel requires the full `tensorflow` one), nor
  installed beside the TFF 0.87 the numbers come from. `tokenize` uses
  TensorFlow's own string ops for its `WhitespaceTokenizer().tokenize`,
  `case_fold_utf8` and `wordshape(..., IS_PUNCT_OR_SYMBOL)` (the same on
  this ASCII text); the rest of the tutorial is as written.
- The `!pip install` cell is left out.

Counts are TFF 0.87's: with `max_heavy_hitters=10` it returns the most
frequent word and nine of the words tied at one (which nine is the sketch's
choice, differing from run to run on TFF too); uncapped, the 22 words and
counts TFF 0.87 finds. The computation is one aggregation, not a round
(no state), so there is no process to `tff.compile`.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff

# From TFF 0.87, the same program uncapped:
TFF_HEAVY_HITTERS = {
    'how': 1, 'timon,': 1, 'never.': 1, 'now,': 1, 'my': 2, 'fair': 1,
    "name's": 1, 'macbeth.': 1, 'when?': 1, 'hail': 1, 'if': 1, 'but': 1,
    'and': 1, 'lord.': 1, 'all': 1, 'hark!': 1, 'thee,': 1, 'rough': 1,
    'to': 1, 'a': 1, "'twas": 1, 'worthy': 1}


@pytest.fixture(scope='module', autouse=True)
def sync_test_cpp_execution_context():
  np.random.seed(0)
  tff.backends.test.set_sync_test_cpp_execution_context()

  assert tff.federated_computation(lambda: 'Hello, World!')() == (
      b'Hello, World!')
  yield
  tff.backends.native.set_sync_local_cpp_execution_context()


# Load the simulation data.
source, _ = (tff.simulation.datasets.shakespeare.get_synthetic(), None)


# Preprocessing function to tokenize a line into words.
def tokenize(ds):
  """Tokenizes a line into words with alphanum characters."""
  def extract_strings(example):
    return tf.expand_dims(example['snippets'], 0)

  def tokenize_line(line):
    return tf.data.Dataset.from_tensor_slices(tf.strings.split(line)[0])

  def mask_all_symbolic_words(word):
    return tf.math.logical_not(
        tf.strings.regex_full_match(word, r'[\p{P}\p{S}]+'))

  ds = ds.map(extract_strings)
  ds = ds.flat_map(tokenize_line)
  ds = ds.map(tf.strings.lower)
  ds = ds.filter(mask_all_symbolic_words)
  return ds


batch_size = 5


def client_data(n: int) -> tf.data.Dataset:
  return tokenize(source.create_tf_dataset_for_client(
      source.client_ids[n])).batch(batch_size)


# Pick a subset of client devices to participate in the computation.
dataset = [client_data(n) for n in range(3)]

max_words_per_user = 8


def run_simulation(one_round_computation: tff.Computation, dataset):
  output = one_round_computation(dataset)
  heavy_hitters = output.heavy_hitters
  heavy_hitters_counts = output.heavy_hitters_counts
  heavy_hitters = [word.decode('utf-8', 'ignore') for word in heavy_hitters]

  results = {}
  for index in range(len(heavy_hitters)):
    results[heavy_hitters[index]] = heavy_hitters_counts[index]
  return output.clients, dict(results)


def test_the_ten_heavy_hitters(capsys):
  iblt_computation = tff.analytics.heavy_hitters.iblt.build_iblt_computation(
      capacity=100,
      string_max_bytes=20,
      max_words_per_user=max_words_per_user,
      max_heavy_hitters=10,
      secure_sum_bitwidth=32,
      multi_contribution=False,
      batch_size=batch_size)

  clients, result = run_simulation(iblt_computation, dataset)
  print(f'Number of clients participated: {clients}')
  print('Discovered heavy hitters and counts:')
  print(result)

  assert capsys.readouterr().out.startswith(
      'Number of clients participated: 3\n'
      'Discovered heavy hitters and counts:\n')
  assert len(result) == 10 and result['my'] == 2
  assert {w: int(c) for w, c in result.items()}.items() <= (
      TFF_HEAVY_HITTERS.items())


def test_all_heavy_hitters_then_central_dp(capsys):
  iblt_computation = tff.analytics.heavy_hitters.iblt.build_iblt_computation(
      capacity=100,
      string_max_bytes=20,
      max_words_per_user=max_words_per_user,
      secure_sum_bitwidth=32,
      multi_contribution=False,
      batch_size=batch_size)

  clients, result = run_simulation(iblt_computation, dataset)
  assert clients == 3
  assert {w: int(c) for w, c in result.items()} == TFF_HEAVY_HITTERS

  # DP parameters
  eps = 20
  delta = 0.01

  # Calculating scale for Laplace noise
  scale = max_words_per_user / eps

  # Calculating the threshold
  tau = 1 + (max_words_per_user / eps) * np.log(
      max_words_per_user / (2 * delta))

  result_with_dp = {}
  for word in result:
    noised_count = result[word] + np.random.laplace(scale=scale)
    if noised_count >= tau:
      result_with_dp[word] = int(noised_count)
  print(f'Discovered heavy hitters and counts with central DP:')
  print(result_with_dp)

  # As TFF 0.87 prints: no word is counted often enough on three clients.
  assert capsys.readouterr().out == (
      'Discovered heavy hitters and counts with central DP:\n{}\n')

