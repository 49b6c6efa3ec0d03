"""Real image datasets, loaded offline into one in-memory form.

Every dataset comes back as a `Dataset`: float32 images in [0, 1] shaped
(N, H, W, 1) and int32 labels shaped (N,), so the partitioning and the model
never care where the pixels came from. Nothing is downloaded: scikit-learn's
digits ship inside the package, Fashion-MNIST comes from the Debian package
`dataset-fashion-mnist`, and any other MNIST-format data is a directory of
IDX files.
"""

import glob
import gzip
import os
from typing import NamedTuple

import numpy as np

from canonical import errors

FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'
BUILTIN = ('digits', 'fashion_mnist')
# Labels are class numbers; a larger one means a corrupt file, not a dataset.
_MAX_CLASSES = 100_000

# IDX type codes -> big-endian numpy dtypes.
_IDX_DTYPES = {0x08: '>u1', 0x09: '>i1', 0x0B: '>i2', 0x0C: '>i4',
               0x0D: '>f4', 0x0E: '>f8'}

# Roles of the four files in an IDX directory, and the names each may have
# (MNIST: `train-images-idx3-ubyte`; EMNIST: `emnist-digits-train-images-...`).
_ROLES = {
    'train images': ('*train-images-idx3-ubyte*',),
    'train labels': ('*train-labels-idx1-ubyte*',),
    'test images': ('*t10k-images-idx3-ubyte*', '*test-images-idx3-ubyte*'),
    'test labels': ('*t10k-labels-idx1-ubyte*', '*test-labels-idx1-ubyte*'),
}


class DatasetError(errors.Error, ValueError):
  """A dataset that is missing or malformed (the message says how to fix it)."""


class Dataset(NamedTuple):
  name: str
  train_x: np.ndarray  # float32 [N, H, W, 1] in [0, 1]
  train_y: np.ndarray  # int32 [N]
  test_x: np.ndarray
  test_y: np.ndarray
  num_classes: int


def load(name, seed=0):
  """The dataset `name`: 'digits', 'fashion_mnist', or a directory of IDX
  files. `seed` only matters where the dataset has no fixed test split
  (digits)."""
  name = os.fspath(name)
  if name == 'digits':
    return _digits(seed)
  if name == 'fashion_mnist':
    directory = os.environ.get('FASHION_MNIST_DIR', FASHION_MNIST_DIR)
    try:
      return load_idx_directory(directory, name='fashion_mnist')
    except DatasetError as e:
      raise DatasetError(
          f'Fashion-MNIST is not readable from {directory!r} ({e}). On Debian '
          'or Ubuntu: sudo apt-get install dataset-fashion-mnist; or set '
          'FASHION_MNIST_DIR, or pass --dataset a directory of its IDX '
          'files.') from None
  if os.path.isdir(name):
    return load_idx_directory(name)
  raise DatasetError(
      f'Unknown dataset {name!r}: the built-in datasets are '
      f'{", ".join(BUILTIN)}; anything else must be a directory of '
      'MNIST-format IDX files (train-images-idx3-ubyte, '
      'train-labels-idx1-ubyte, t10k-images-idx3-ubyte, '
      't10k-labels-idx1-ubyte, gzipped or not).')


def _digits(seed):
  try:
    from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise DatasetError('The digits dataset comes with scikit-learn, which is '
                       'not installed: pip install scikit-learn') from None
  digits = sk_datasets.load_digits()
  x = (digits.images / 16.0).astype(np.float32)[..., None]
  y = digits.target.astype(np.int32)
  # Digits has no official test split: hold out 20% of every class, so the
  # test set keeps the class balance whatever the seed.
  rng = np.random.default_rng(seed)
  test = np.zeros(len(y), dtype=bool)
  for label in np.unique(y):
    members = rng.permutation(np.flatnonzero(y == label))
    test[members[:round(0.2 * len(members))]] = True
  return Dataset('digits', x[~test], y[~test], x[test], y[test],
                 int(y.max()) + 1)


def read_idx(path):
  """The array in one IDX file (gzipped or not), in native byte order."""
  path = os.fspath(path)
  try:
    opener = gzip.open if _is_gzip(path) else open
    with opener(path, 'rb') as f:
      data = f.read()
  except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError.
    raise DatasetError(f'Cannot read IDX file {path!r}: {e}') from None
  if len(data) < 4 or data[0] != 0 or data[1] != 0:
    raise DatasetError(f'{path!r} is not an IDX file: it does not start with '
                       'the magic number 0x0000 (type, ndim).')
  code, ndim = data[2], data[3]
  if code not in _IDX_DTYPES:
    raise DatasetError(f'{path!r}: unknown IDX data type code 0x{code:02X} '
                       f'(known: {", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)}).')
  header = 4 + 4 * ndim
  if len(data) < header:
    raise DatasetError(f'{path!r} is truncated: its header promises {ndim} '
                       'dimensions but the file ends first.')
  shape = tuple(int(d) for d in np.frombuffer(data, '>u4', ndim, offset=4))
  dtype = np.dtype(_IDX_DTYPES[code])
  expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  actual = len(data) - header
  if actual != expected:
    what = 'truncated' if actual < expected else 'longer than its header says'
    raise DatasetError(
        f'{path!r} is {what}: dimensions {shape} of {dtype.name} need '
        f'{expected} bytes of data, the file has {actual}.')
  array = np.frombuffer(data, dtype, offset=header).reshape(shape)
  return array.astype(dtype.newbyteorder('='))


def _is_gzip(path):
  with open(path, 'rb') as f:
    return f.read(2) == b'\x1f\x8b'


def find_idx_files(directory):
  """Role ('train images', ...) -> path of its file in `directory`."""
  directory = os.fspath(directory)
  if not os.path.isdir(directory):
    raise DatasetError(f'{directory!r} is not a directory of IDX files.')
  found = {}
  for role, patterns in _ROLES.items():
    matches = sorted({p for pattern in patterns
                      for p in glob.glob(os.path.join(directory, pattern))})
    if len(matches) != 1:
      names = ', '.join(os.path.basename(m) for m in matches) or 'none'
      raise DatasetError(
          f'{directory!r} must hold exactly one {role} file (named like '
          f'{" or ".join(patterns)}, .gz or not); found {names}.')
    found[role] = matches[0]
  return found


def load_idx_directory(directory, name=None):
  """A `Dataset` from the four IDX files of an MNIST-format directory.

  Images are used as stored: EMNIST stores them transposed relative to MNIST,
  which a model does not mind as long as train and test agree. Labels are not
  remapped, so EMNIST letters (1..26) get 27 classes, class 0 empty.
  """
  files = find_idx_files(directory)
  train_x, train_y = _images_and_labels(files['train images'],
                                        files['train labels'])
  test_x, test_y = _images_and_labels(files['test images'],
                                      files['test labels'])
  if train_x.shape[1:] != test_x.shape[1:]:
    raise DatasetError(
        f'Train images {files["train images"]!r} are {train_x.shape[1:3]} but '
        f'test images {files["test images"]!r} are {test_x.shape[1:3]}.')
  num_classes = int(max(train_y.max(), test_y.max())) + 1
  return Dataset(name or os.path.abspath(directory), train_x, train_y,
                 test_x, test_y, num_classes)


def _images_and_labels(images_path, labels_path):
  images, labels = read_idx(images_path), read_idx(labels_path)
  if images.ndim != 3:
    raise DatasetError(f'{images_path!r} holds an array of shape '
                       f'{images.shape}; images must have 3 dimensions '
                       '(count, height, width).')
  if labels.ndim != 1:
    raise DatasetError(f'{labels_path!r} holds an array of shape '
                       f'{labels.shape}; labels must have 1 dimension.')
  if len(images) != len(labels):
    raise DatasetError(f'{images_path!r} holds {len(images)} images but '
                       f'{labels_path!r} holds {len(labels)} labels.')
  if len(labels) == 0:
    raise DatasetError(f'{labels_path!r} holds no examples.')
  if labels.dtype.kind not in 'iu':
    raise DatasetError(f'{labels_path!r} holds {labels.dtype.name} labels; '
                       'labels must be integers.')
  if labels.min() < 0 or labels.max() >= _MAX_CLASSES:
    raise DatasetError(f'{labels_path!r} has labels out of range '
                       f'[{labels.min()}, {labels.max()}]; labels must be '
                       f'class numbers 0, 1, 2, ... below {_MAX_CLASSES}.')
  if images.dtype == np.uint8:
    x = images.astype(np.float32) / 255.0
  elif images.dtype.kind == 'f' and images.size and (
      np.isfinite(images).all() and images.min() >= 0 and images.max() <= 1):
    x = images.astype(np.float32)
  else:
    raise DatasetError(f'{images_path!r} holds {images.dtype.name} images; '
                       'images must be unsigned bytes (0..255) or floats in '
                       '[0, 1].')
  return x[..., None], labels.astype(np.int32)
