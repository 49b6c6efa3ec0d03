"""Pure tf.data transformations compile, save, load and run alike; a shuffle or
sample without a seed (OS entropy) is refused at compile and at load."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.saving import envelope
from canonical.saving import form_file
from example_processes import summed_process

ROWS = tf.data.DatasetSpec(tf.TensorSpec([None, 3], tf.float32))


def _add(total, x):
  return total + tf.reduce_sum(x)


def _every_transformation(ds):
  """A sum over many pure transformations of a dataset of [n, 3] batches;
  AutoGraph turns the `for` loops into ScanDataset / reduce."""
  rows = ds.unbatch()
  total = tf.constant(0.0)
  for x in ds.map(lambda x: 2.0 * x).filter(
      lambda x: tf.reduce_sum(x) >= 0.0):
    total += tf.reduce_sum(x)
  total += rows.batch(2).padded_batch(2, padded_shapes=[None, 3]).reduce(
      0.0, _add)
  running = rows.map(tf.reduce_sum).scan(
      tf.constant(0.0), lambda s, x: (s + x, s + x))
  total += running.take_while(lambda x: x < 1e4).reduce(0.0, _add)
  for i, (a, b) in tf.data.Dataset.zip((running, running)).enumerate():
    total += a - b + tf.cast(i, tf.float32)
  total += rows.window(2).flat_map(lambda w: w.batch(2)).reduce(0.0, _add)
  total += rows.shuffle(4, seed=7).reduce(0.0, _add)
  total += tf.data.Dataset.sample_from_datasets(
      [rows, rows.map(lambda x: -x)], seed=3).take(5).reduce(0.0, _add)
  total += rows.map(lambda x: tf.cast(tf.round(x), tf.int64)).unbatch(
      ).unique().map(lambda x: tf.cast(x, tf.float32)).reduce(0.0, _add)
  total += rows.group_by_window(
      lambda x: tf.cast(tf.reduce_sum(x) > 0, tf.int64),
      lambda key, window: window.batch(2), window_size=2).reduce(0.0, _add)
  total += rows.repeat(2).skip(1).take(5).prefetch(1).reduce(0.0, _add)
  return total


def _process(statistic):
  return summed_process(statistic, ROWS)


def _clients():
  rng = np.random.default_rng(0)
  return [tf.data.Dataset.from_tensor_slices(
      rng.normal(size=(n, 3)).astype(np.float32)).batch(3) for n in (5, 8, 1)]


def test_pure_dataset_transformations_save_load_and_run_alike(tmp_path):
  form = cf.compile(_process(_every_transformation))
  path = tmp_path / 'data.pb'
  cf.save(form, path)
  loaded = cf.load(path)
  clients = _clients()
  state = form.initialize()
  expected = cf.run_round(form, state, clients)[1]
  assert float(expected) != 0.0
  assert float(cf.run_round(loaded, state, clients)[1]) == float(expected)
  # Seeded: the same every time.
  assert float(cf.run_round(loaded, state, clients)[1]) == float(expected)


def _unseeded_shuffle(ds):
  return ds.unbatch().shuffle(4).take(2).reduce(0.0, _add)


@pytest.fixture
def no_global_seed():
  """Without a global seed `shuffle()` draws OS entropy; with one (another
  test may set it), its seeds derive from it and are fixed."""
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  before = context.global_seed()
  tf.random.set_seed(None)
  yield
  tf.random.set_seed(before)


def test_a_shuffle_without_a_seed_is_refused_at_compile(no_global_seed):
  del no_global_seed
  with pytest.raises(cf.FederatedError, match=r"draws from OS entropy: a "
                     r"dataset shuffle or sample without a seed \(pass "
                     r"seed=\.\.\.\), created at test_dataset_pieces\.py"):
    cf.compile(_process(_unseeded_shuffle))


def test_a_shuffle_without_a_seed_is_refused_at_load():
  seeded = form_file.to_proto(cf.compile(_process(
      lambda ds: ds.unbatch().shuffle(4, seed=5).take(2).reduce(0.0, _add))))
  work = next(p for p in seeded.pieces if p.name == 'work').graph
  nodes = list(work.node) + [n for f in work.library.function
                             for n in f.node_def]
  shuffle = next(n for n in nodes if n.op == 'ShuffleDatasetV3')
  # What `seed=None` compiles to without a global seed: seed and seed2 from
  # constant zeros.
  seed = next(n for n in nodes if n.name == shuffle.input[2].split(':')[0])
  assert seed.op == 'Const'
  seed.attr['value'].tensor.CopyFrom(tf.make_tensor_proto(np.int64(0)))
  shuffle.input[3] = shuffle.input[2]
  data = envelope.wrap(seeded.SerializeToString())
  with pytest.raises(cf.FormError, match=r"piece 'work': node .*"
                     r"\(ShuffleDatasetV3\) draws from OS entropy"):
    form_file.from_bytes(data, 'unseeded.pb')


def test_a_dataset_of_the_wrong_type_is_named_in_every_executor():
  process = _process(lambda ds: ds.reduce(0.0, _add))
  form = cf.compile(process)
  loaded = form_file.from_bytes(form_file.to_bytes(form))
  good = _clients()[:1]
  wrong = good + [tf.data.Dataset.from_tensor_slices(
      np.ones((4, 3), np.int32)).batch(2)]
  state = form.initialize()
  piece = (r"Piece 'work' \(float32\[\?,3\]\*, <>\): expected "
           r"float32\[\?,3\]\*, got int32\[\?,3\]\*\.")
  for executed in (form, loaded):
    cf.run_round(executed, state, good)
    with pytest.raises(cf.FederatedError, match=piece):
      cf.run_round(executed, state, wrong)
  with pytest.raises(cf.FederatedError, match=r"'next_fn' argument 1 "
                     r'\(client 1\): expected float32\[\?,3\]\*, got '
                     r'int32\[\?,3\]\*\.'):
    cf.reference.run_round(process, state, wrong)
