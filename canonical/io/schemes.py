"""Which `FileStore` serves which path scheme. Adding a scheme is one module
with a `FileStore` subclass and one `register` call."""

from canonical.io import beam
from canonical.io import gcs
from canonical.io import local
from canonical.io import s3

_STORES = {None: local.LocalStore, 's3': s3.S3Store, 'gs': gcs.GcsStore}


def register(scheme, store_class):
  """Serves paths of `scheme` ('s3', 'hdfs', ...) with `store_class`."""
  _STORES[scheme] = store_class


def store_class(scheme):
  """The store class of `scheme` (None: local); Beam's FileSystems serve
  any scheme without one of its own."""
  return _STORES.get(scheme, beam.BeamStore)
