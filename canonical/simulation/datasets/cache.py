"""Where TFF 0.87 caches the files of its downloaded data sets, and reading
them from there: nothing is downloaded at run time here, so a data set
loads only from the files a TFF user already has (or fetched by hand).

TFF keeps its SQLite data sets as `<cache_dir>/<name>.sqlite` (`cache_dir`
defaulting to `~/.tff`), decompressed from `<name>.sqlite.lzma`; Keras'
`get_file` keeps its files under `<cache_dir>/datasets/` (`~/.keras` by
default). A compressed file found in the cache is decompressed in place, as
TFF would after downloading it; a missing one is refused with
`DatasetNotCachedError`, naming the file and where to get it.
"""

import lzma
import os
import shutil
import tarfile

from canonical import errors

_TFF_BUCKET = 'https://storage.googleapis.com/tff-datasets-public'


class DatasetNotCachedError(errors.Error, FileNotFoundError):
  """A data set's files are not on this machine, and nothing is downloaded
  at run time here."""


def tff_cache_dir(cache_dir):
  return cache_dir if cache_dir is not None else os.path.join(
      os.path.expanduser('~'), '.tff')


def keras_cache_dir(cache_dir):
  return os.path.join(cache_dir if cache_dir is not None else os.path.join(
      os.path.expanduser('~'), '.keras'), 'datasets')


def refuse(what, missing, how):
  raise DatasetNotCachedError(
      f'{what}: {missing} is not on this machine, and this runtime '
      f'downloads nothing. {how}')


def sqlite_file(what, name, cache_dir):
  """The path of TFF's cached `<name>.sqlite` (decompressing a cached
  `.lzma` first); DatasetNotCachedError naming both if neither is there."""
  directory = tff_cache_dir(cache_dir)
  path = os.path.join(directory, f'{name}.sqlite')
  if os.path.isfile(path):
    return path
  compressed = path + '.lzma'
  if os.path.isfile(compressed):
    partial = path + '.partial'
    with lzma.open(compressed) as source, open(partial, 'wb') as target:
      shutil.copyfileobj(source, target, 1 << 20)
    os.replace(partial, path)
    return path
  refuse(what, path, f'Fetch {_TFF_BUCKET}/{name}.sqlite.lzma (as TFF '
         f'0.87 does) and decompress it there (xz -d), or pass the '
         'cache_dir holding it.')


def keras_file(what, name, archive, cache_dir):
  """The path of `name`, which Keras' `get_file` extracts from `archive`
  (a tar file) into its cache; extracts a cached archive first."""
  directory = keras_cache_dir(cache_dir)
  path = os.path.join(directory, name)
  if os.path.exists(path):
    return path
  archive_path = os.path.join(directory, archive)
  if os.path.isfile(archive_path):
    with tarfile.open(archive_path) as tar:
      tar.extractall(directory, filter='data')
    if os.path.exists(path):
      return path
  refuse(what, path, f'Fetch {_TFF_BUCKET}/{archive} and extract it into '
         f'{directory} (tar -xjf), or pass the cache_dir holding it.')
