"""Client data for simulations (TFF's `tff.simulation.datasets`): the
`ClientData` interface, `TestClientData` (in memory) and
`FilePerUserClientData` (one file per client).

TFF's downloaded data sets (`emnist.load_data()`, ...) are not here: these
machines fetch nothing at run time. Build a `TestClientData` or
`ClientData.from_clients_and_tf_fn` from data you have instead.
"""

from canonical import errors
from canonical.simulation.datasets.client_data import ClientData
from canonical.simulation.datasets.file_per_user import FilePerUserClientData
from canonical.simulation.datasets.tensor_slices import TestClientData

__all__ = ['ClientData', 'FilePerUserClientData', 'TestClientData']

# TFF modules that download a data set on first use.
_DOWNLOADED = ('celeba', 'cifar100', 'emnist', 'flair', 'gldv2',
               'inaturalist', 'shakespeare', 'stackoverflow')


class UnavailableError(errors.Error, AttributeError):
  """A name of TFF's `tff.simulation.datasets` that is not built here."""


def __getattr__(name):
  if name in _DOWNLOADED:
    raise UnavailableError(
        f'tff.simulation.datasets.{name} is not available here: it downloads '
        'its data set at run time, and this project runs where nothing is '
        'downloaded. Make a ClientData from data you have: '
        'tff.simulation.datasets.TestClientData({client_id: {...arrays...}}) '
        'or ClientData.from_clients_and_tf_fn(client_ids, dataset_fn).')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
