"""Writes `canonical/simulation/datasets/tff_synthetic_data.py`: the values
TFF 0.87's `get_synthetic()` data sets hold, and the fixed vocabularies its
data sets and baselines use, so that ours give TFF's values.

Run it with a real TFF 0.87 (../shared/peers/README.md installs one):

  /work/peers/venv-tff/bin/python scripts/record_tff_synthetic.py \
      > canonical/simulation/datasets/tff_synthetic_data.py

With `--emnist-sqlite PATH` it writes instead a small EMNIST file in TFF's
SQLite format, by TFF's own `save_to_sql_client_data` (two writers, one per
split, values from `emnist_file_values`), which the tests read as TFF's
cache (tests/data/tff_087_emnist_all.sqlite).

What TFF computes from these (a resize, a division, stateless random
images) is computed here too; `DIGESTS` holds the sha256 of every array
TFF's `get_synthetic()` gives, which the tests compare ours with.
"""

import collections
import hashlib
import os
import pprint
import sys

import numpy as np
import tensorflow_federated as tff

D = tff.simulation.datasets


def digest(array):
  array = np.ascontiguousarray(array)
  h = hashlib.sha256()
  h.update(str(array.dtype).encode() + str(array.shape).encode())
  if array.dtype == object:
    for item in array.reshape(-1):
      h.update(len(item).to_bytes(8, 'little') + item)
  else:
    h.update(array.tobytes())
  return h.hexdigest()


def client_arrays(client_data):
  """`{client id: {key: stacked array}}` of a TestClientData."""
  out = collections.OrderedDict()
  for client_id in client_data.client_ids:
    rows = list(client_data.create_tf_dataset_for_client(client_id)
                .as_numpy_iterator())
    out[client_id] = collections.OrderedDict(
        (key, np.stack([r[key] for r in rows])) for key in rows[0])
  return out


def digests():
  found = {}
  for name in ('emnist', 'shakespeare', 'stackoverflow', 'cifar100', 'gldv2',
               'inaturalist'):
    data = getattr(D, name).get_synthetic()
    found[name] = {
        client_id: {key: digest(value) for key, value in arrays.items()}
        for client_id, arrays in client_arrays(data).items()}
  return found


def main():
  emnist = client_arrays(D.emnist.get_synthetic())['synthetic1']
  levels = np.rint(emnist['pixels'] * 9).astype(np.int64)
  assert np.array_equal((levels.astype(np.float32) / np.float32(9)),
                        emnist['pixels'])
  # The images TFF resizes to 32x32: its module's 8x8 originals.
  cifar_module = D.cifar100
  cifar_source = np.array(
      cifar_module._SYNTHETIC_IMAGE_DATA, np.float64)  # pylint: disable=protected-access
  assert np.array_equal(cifar_source * 4, np.rint(cifar_source * 4))
  cifar = client_arrays(D.cifar100.get_synthetic())['synthetic1']
  shakespeare = {
      client_id: [bytes(s) for s in arrays['snippets']]
      for client_id, arrays in client_arrays(
          D.shakespeare.get_synthetic()).items()}
  stackoverflow = {}
  for client_id, columns in D.stackoverflow.create_synthetic_data_dictionary(
  ).items():
    stackoverflow[client_id] = {
        key: (np.asarray(values).tolist() if key == 'score' else
              [bytes(v) for v in values])
        for key, values in columns.items()}
  from tensorflow_federated.python.simulation.baselines.shakespeare import char_prediction_preprocessing  # pylint: disable=g-import-not-at-top
  values = dict(
      EMNIST_DIGIT_LEVELS=[[''.join(str(v) for v in row) for row in image]
                           for image in levels],
      CIFAR100_IMAGES_TIMES_4=(cifar_source * 4).astype(np.int64).tolist(),
      CIFAR100_COARSE_LABELS=cifar['coarse_label'].tolist(),
      CIFAR100_LABELS=cifar['label'].tolist(),
      SHAKESPEARE_SNIPPETS=shakespeare,
      STACKOVERFLOW_CLIENTS=stackoverflow,
      STACKOVERFLOW_WORD_COUNTS=list(
          D.stackoverflow.get_synthetic_word_counts().items()),
      STACKOVERFLOW_TAG_COUNTS=list(
          D.stackoverflow.get_synthetic_tag_counts().items()),
      CELEBA_IMAGE_NAME=D.celeba.IMAGE_NAME,
      CELEBA_ATTRIBUTE_NAMES=list(D.celeba.ATTRIBUTE_NAMES),
      SHAKESPEARE_CHAR_VOCAB=''.join(char_prediction_preprocessing.CHAR_VOCAB),
      DIGESTS=digests(),
  )
  print('"""Values of TFF 0.87\'s synthetic data sets and fixed vocabularies, '
        'recorded\nfrom a real TFF 0.87 by scripts/record_tff_synthetic.py '
        '(do not edit).\n\nData, not code: `tff.simulation.datasets.*.'
        'get_synthetic()` and the\nbaselines build from them the values TFF '
        'gives; DIGESTS is the sha256 of\nevery array TFF\'s get_synthetic() '
        'gives, for the tests.\n"""\n')
  print('# pylint: disable=line-too-long')
  for name, value in values.items():
    text = pprint.pformat(value, width=79, compact=True, sort_dicts=False)
    print(f'{name} = {text}\n')


def emnist_file_values():
  """The clients of the small EMNIST file (the tests make them again)."""
  rng = np.random.RandomState(7)
  values = collections.OrderedDict()
  for client_id, count in (('f0000_14', 3), ("o'brien", 2)):
    values[client_id] = collections.OrderedDict(
        label=rng.randint(0, 10, size=count).astype(np.int32),
        pixels=(rng.randint(0, 10, size=(count, 28, 28)) / 9.0).astype(
            np.float32))
  return values


def write_emnist_sqlite(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  values = emnist_file_values()
  if os.path.exists(path):
    os.remove(path)
  D.save_to_sql_client_data(
      list(values), lambda c: tf.data.Dataset.from_tensor_slices(values[c]),
      path, split_names_by_client_id={'f0000_14': 'digits_only_train',
                                      "o'brien": 'digits_only_test'})


if __name__ == '__main__':
  if sys.argv[1:2] == ['--emnist-sqlite']:
    write_emnist_sqlite(sys.argv[2])
  else:
    main()
