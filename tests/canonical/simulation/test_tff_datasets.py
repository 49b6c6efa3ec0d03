"""TFF 0.87's data sets and data set tools (`tff.simulation.datasets`):
the synthetic sets give TFF's values (sha256 of every array, recorded from
TFF 0.87 in `tff_synthetic_data.DIGESTS`), TFF's SQLite files read here
(tests/data/tff_087_emnist_all.sqlite was written by TFF 0.87's own
`save_to_sql_client_data`), and what is not cached is refused by name."""

import collections
import hashlib
import json
import lzma
import os
import shutil
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.simulation.datasets import tff_synthetic_data

datasets = tff.simulation.datasets
DATA = os.path.join(os.path.dirname(__file__), '..', '..', 'data')


def _digest(array):
  """As scripts/record_tff_synthetic.py digests TFF's arrays."""
  array = np.ascontiguousarray(array)
  h = hashlib.sha256()
  h.update(str(array.dtype).encode() + str(array.shape).encode())
  if array.dtype == object:
    for item in array.reshape(-1):
      h.update(len(item).to_bytes(8, 'little') + item)
  else:
    h.update(array.tobytes())
  return h.hexdigest()


def _rows(dataset):
  rows = list(dataset.as_numpy_iterator())
  return collections.OrderedDict((k, np.stack([r[k] for r in rows]))
                                 for k in rows[0])


@pytest.mark.parametrize('name', ['emnist', 'shakespeare', 'stackoverflow',
                                  'cifar100', 'gldv2', 'inaturalist'])
def test_synthetic_data_is_tffs(name):
  data = getattr(datasets, name).get_synthetic()
  expected = tff_synthetic_data.DIGESTS[name]
  assert data.client_ids == list(expected)
  for client_id, digests in expected.items():
    rows = _rows(data.create_tf_dataset_for_client(client_id))
    assert list(rows) == list(digests)  # TFF's keys, in TFF's order.
    assert {k: _digest(v) for k, v in rows.items()} == digests, client_id


def test_synthetic_element_types_and_vocabularies_are_tffs():
  # As TFF 0.87 prints them.
  spec = datasets.emnist.get_synthetic().element_type_structure
  assert spec == collections.OrderedDict(
      label=tf.TensorSpec([], tf.int32),
      pixels=tf.TensorSpec([28, 28], tf.float32))
  assert list(datasets.stackoverflow.get_synthetic_word_counts().items())[
      :3] == [('.', 4), ('is', 3), ('a', 3)]
  assert list(datasets.stackoverflow.get_synthetic_tag_counts())[:2] == [
      'css', 'cross-browser']
  spec = datasets.gldv2.get_synthetic().element_type_structure
  assert spec['image/decoded'].shape == [600, 800, 3]
  assert spec['class'].shape == [1]
  assert set(datasets.stackoverflow.create_synthetic_data_dictionary()) == {
      'synthetic_1', 'synthetic_2', 'synthetic_3'}


def _emnist_file_values():
  """The values scripts/record_tff_synthetic.py gave TFF to write."""
  rng = np.random.RandomState(7)
  values = collections.OrderedDict()
  for client_id, count in (('f0000_14', 3), ("o'brien", 2)):
    values[client_id] = collections.OrderedDict(
        label=rng.randint(0, 10, size=count).astype(np.int32),
        pixels=(rng.randint(0, 10, size=(count, 28, 28)) / 9.0).astype(
            np.float32))
  return values


@pytest.fixture
def emnist_cache(tmp_path):
  shutil.copy(os.path.join(DATA, 'tff_087_emnist_all.sqlite'),
              tmp_path / 'emnist_all.sqlite')
  return str(tmp_path)


def test_emnist_reads_a_file_tff_wrote(emnist_cache):
  train, test = datasets.emnist.load_data(cache_dir=emnist_cache)
  values = _emnist_file_values()
  assert train.client_ids == ['f0000_14']
  # A quote in a client id: TFF 0.87 fails to read this client (its SQL
  # query is not escaped); here it reads.
  assert test.client_ids == ["o'brien"]
  for data, client_id in ((train, 'f0000_14'), (test, "o'brien")):
    rows = _rows(data.create_tf_dataset_for_client(client_id))
    for key in ('label', 'pixels'):
      np.testing.assert_array_equal(rows[key], values[client_id][key])
  assert train.element_type_structure == collections.OrderedDict(
      label=tf.TensorSpec([], tf.int32),
      pixels=tf.TensorSpec([28, 28], tf.float32))
  # Traceable: all clients through tf.data, and as a computation.
  assert len(list(train.create_tf_dataset_from_all_clients())) == 3
  assert len(list(train.dataset_computation('f0000_14'))) == 3
  # The split of all characters is not in this small file.
  with pytest.raises(tff.errors.InvalidValueError, match='no clients in '
                     "split 'all_train'"):
    datasets.emnist.load_data(only_digits=False, cache_dir=emnist_cache)


def test_a_cached_lzma_file_is_decompressed(emnist_cache, tmp_path):
  lzma_dir = tmp_path / 'compressed'
  lzma_dir.mkdir()
  with open(os.path.join(emnist_cache, 'emnist_all.sqlite'), 'rb') as f:
    (lzma_dir / 'emnist_all.sqlite.lzma').write_bytes(
        lzma.compress(f.read(), format=lzma.FORMAT_ALONE))
  train, _ = datasets.emnist.load_data(cache_dir=str(lzma_dir))
  assert train.client_ids == ['f0000_14']
  assert (lzma_dir / 'emnist_all.sqlite').exists()


@pytest.mark.parametrize('call, missing', [
    (lambda d: datasets.shakespeare.load_data(cache_dir=d),
     'shakespeare.sqlite'),
    (lambda d: datasets.stackoverflow.load_data(cache_dir=d),
     'stackoverflow.sqlite'),
    (lambda d: datasets.cifar100.load_data(cache_dir=d), 'cifar100.sqlite'),
    (lambda d: datasets.celeba.load_data(cache_dir=d), 'celeba.sqlite'),
    (lambda d: datasets.stackoverflow.load_word_counts(cache_dir=d),
     'datasets/stackoverflow.word_count'),
    (lambda d: datasets.gldv2.load_data(cache_dir=d), 'gld160k/train'),
    (lambda d: datasets.inaturalist.load_data(
        cache_dir=d, split=datasets.inaturalist.INaturalistSplit.GEO_100),
     'GEO_100/train'),
    (lambda d: datasets.flair.load_data(d), 'train'),
    (datasets.flair.download_data, 'metadata and images'),
])
def test_what_is_not_cached_is_refused_by_name(tmp_path, call, missing):
  with pytest.raises(datasets.DatasetNotCachedError,
                     match=f'{missing}.* downloads nothing'):
    call(str(tmp_path))


def test_sql_client_data_round_trip(tmp_path):
  values = {'a': collections.OrderedDict(x=np.arange(6, dtype=np.float32)
                                         .reshape(3, 2),
                                         y=np.array([1, 0, 1], np.int32),
                                         s=np.array([b'p', b'q', b'r'])),
            'b': collections.OrderedDict(x=np.ones([1, 2], np.float32),
                                         y=np.array([5], np.int32),
                                         s=np.array([b't']))}
  path = str(tmp_path / 'sub' / 'data.sqlite')
  source = datasets.TestClientData(values)
  datasets.save_to_sql_client_data(
      ['a', 'b'], source.create_tf_dataset_for_client, path,
      split_names_by_client_id={'a': 'train', 'b': 'test'})
  with pytest.raises(tff.errors.InvalidValueError, match='allow_overwrite'):
    datasets.save_to_sql_client_data(
        ['a'], source.create_tf_dataset_for_client, path)
  raw = datasets.SqlClientData(path)
  assert raw.client_ids == ['a', 'b']
  assert raw.element_type_structure == tf.TensorSpec([], tf.string)
  parsed = datasets.load_and_parse_sql_client_data(
      path, source.element_type_structure, split_name='train')
  assert parsed.client_ids == ['a']
  rows = _rows(parsed.create_tf_dataset_for_client('a'))
  for key in ('x', 'y', 's'):
    np.testing.assert_array_equal(rows[key], values['a'][key])
  with sqlite3.connect(path) as connection:
    assert connection.execute(
        'SELECT client_id, split_name, num_examples FROM client_metadata '
        'ORDER BY client_id').fetchall() == [('a', 'train', 3),
                                             ('b', 'test', 1)]
  with pytest.raises(datasets.sql_client_data.DatabaseFormatError,
                     match='no table'):
    sqlite3.connect(str(tmp_path / 'empty.sqlite')).close()
    datasets.SqlClientData(str(tmp_path / 'empty.sqlite'))
  with pytest.raises(
      datasets.sql_client_data.ElementSpecCompatibilityError,
      match='a mapping of names to tensors'):
    datasets.save_to_sql_client_data(
        ['a'], lambda c: tf.data.Dataset.from_tensor_slices(
            ([1.0], [2.0])), str(tmp_path / 'pairs.sqlite'))


def test_transforming_client_data_expands_clients():
  base = datasets.TestClientData({'a': [1.0, 2.0], 'b': [10.0]})

  def make_transform_fn(client_id):
    scale = tf.strings.to_number(tf.strings.split(client_id, '-')[1])
    return lambda x: x * scale

  data = datasets.TransformingClientData(
      base, make_transform_fn,
      expand_client_id=lambda c: [f'{c}-1', f'{c}-3'],
      reduce_client_id=lambda c: tf.strings.split(c, '-')[0])
  assert data.client_ids == ['a-1', 'a-3', 'b-1', 'b-3']
  assert list(data.create_tf_dataset_for_client('a-3').as_numpy_iterator()
             ) == [3.0, 6.0]
  assert sorted(data.create_tf_dataset_from_all_clients().as_numpy_iterator()
               ) == [1.0, 2.0, 3.0, 6.0, 10.0, 30.0]
  same = datasets.TransformingClientData(base, lambda c: lambda x: x + 1)
  assert list(same.create_tf_dataset_for_client('b')) == [11.0]
  with pytest.raises(ValueError, match='both'):
    datasets.TransformingClientData(base, make_transform_fn,
                                    expand_client_id=lambda c: [c])


def test_dataset_tools():
  a = tf.data.Dataset.range(0, 100)
  b = tf.data.Dataset.range(1000, 1100)
  mixed = list(datasets.build_dataset_mixture(a, b, 0.3, seed=1)
               .as_numpy_iterator())
  assert len(mixed) == 100
  from_a = sum(x < 1000 for x in mixed)
  assert 15 < from_a < 45
  assert all(x in (i, 1000 + i) for i, x in enumerate(mixed))
  labelled = tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(label=[1, 2, 1, 3], x=[0.1, 0.2, 0.3, 0.4]))
  single = datasets.build_single_label_dataset(labelled, 'label', 1)
  np.testing.assert_allclose([e['x'] for e in single.as_numpy_iterator()],
                             [0.1, 0.3])
  with pytest.raises(ValueError, match="no key 'class'"):
    datasets.build_single_label_dataset(labelled, 'class', 1)
  clients = datasets.build_synthethic_iid_datasets(
      datasets.TestClientData({'a': [1.0, 2.0], 'b': [3.0]}), 2,
      shuffle_buffer_size=3)
  first = [list(c.as_numpy_iterator()) for c in clients.take(3)]
  assert [len(c) for c in first] == [2, 2, 2]
  assert set(sum(first, [])) <= {1.0, 2.0, 3.0}


def _jpeg(shape, value):
  return tf.io.encode_jpeg(tf.fill(shape, tf.constant(value, tf.uint8))
                           ).numpy()


def test_flair_writes_and_loads_from_downloaded_files(tmp_path):
  data_dir, cache_dir = tmp_path / 'flair', tmp_path / 'cache'
  images = data_dir / 'images' / 'small_images'
  images.mkdir(parents=True)
  metadata = []
  for image_id, user, split, labels, fine in (
      ('i1', 'u1', 'train', ['plant', 'animal'], ['tree']),
      ('i2', 'u1', 'train', ['animal'], ['cat']),
      ('i3', 'u2', 'test', ['food'], ['cake']),
      ('i4', 'u3', 'val', ['food'], ['cake'])):
    (images / f'{image_id}.jpg').write_bytes(_jpeg([256, 256, 3], 100))
    metadata.append(dict(image_id=image_id, user_id=user, partition=split,
                         labels=labels, fine_grained_labels=fine))
  (data_dir / 'flair_metadata.json').write_text(json.dumps(metadata))
  datasets.flair.write_data(str(data_dir), str(cache_dir))
  train, val, test = datasets.flair.load_data(str(cache_dir))
  assert (train.client_ids, val.client_ids, test.client_ids) == (
      ['u1'], ['u3'], ['u2'])
  first, second = list(train.create_tf_dataset_for_client('u1'))
  assert first['image'].shape == (256, 256, 3)
  # Labels numbered in sorted order: animal 0, food 1, plant 2.
  np.testing.assert_array_equal(first['label'][:3], [1, 0, 1])
  assert first['label'].shape == (17,)
  np.testing.assert_array_equal(second['fine_grained_label'][:3], [0, 1, 0])


def _write_vision_cache(directory):
  (directory / 'train').mkdir(parents=True)
  for name, classes in (('user_a', [3, 4]), ('user_b', [5])):
    with tf.io.TFRecordWriter(str(directory / 'train' / name)) as writer:
      for label in classes:
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            'image/encoded_jpeg': tf.train.Feature(bytes_list=tf.train
                                                   .BytesList(value=[_jpeg(
                                                       [8, 6, 3], 50)])),
            'class': tf.train.Feature(int64_list=tf.train.Int64List(
                value=[label]))})).SerializeToString())
  shutil.copy(directory / 'train' / 'user_b', directory / 'test.tfRecord')


def test_vision_data_sets_read_tffs_cache(tmp_path):
  _write_vision_cache(tmp_path / 'gld23k')
  train, test = datasets.gldv2.load_data(cache_dir=str(tmp_path),
                                         gld23k=True)
  assert train.client_ids == ['user_a', 'user_b']
  classes = [int(e['class'][0])
             for e in train.create_tf_dataset_for_client('user_a')]
  assert classes == [3, 4]
  element = next(iter(test))
  assert element['image/decoded'].shape == (8, 6, 3)
  _write_vision_cache(tmp_path / 'GEO_1K')
  train, _ = datasets.inaturalist.load_data(
      cache_dir=str(tmp_path),
      split=datasets.inaturalist.INaturalistSplit.GEO_1K)
  assert train.client_ids == ['user_a', 'user_b']
