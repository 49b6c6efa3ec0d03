"""Client data for simulations (TFF's `tff.simulation.datasets`): the
`ClientData` interface and its kinds (`TestClientData` in memory,
`FilePerUserClientData` one file per client, `SqlClientData` TFF's SQLite
files, `TransformingClientData` pseudo-clients), data set tools, and TFF's
data sets (`emnist`, `shakespeare`, ...).

TFF's data sets are read from the files TFF caches when it downloads them;
nothing is downloaded at run time here, and a missing file is refused with
`DatasetNotCachedError`, naming it and where to get it. Each set's
`get_synthetic()` gives TFF's small synthetic version, value for value.
"""

from canonical.simulation.datasets import celeba
from canonical.simulation.datasets import cifar100
from canonical.simulation.datasets import emnist
from canonical.simulation.datasets import flair
from canonical.simulation.datasets import gldv2
from canonical.simulation.datasets import inaturalist
from canonical.simulation.datasets import shakespeare
from canonical.simulation.datasets import stackoverflow
from canonical.simulation.datasets.cache import DatasetNotCachedError
from canonical.simulation.datasets.client_data import ClientData
from canonical.simulation.datasets.dataset_utils import build_dataset_mixture
from canonical.simulation.datasets.dataset_utils import build_single_label_dataset
from canonical.simulation.datasets.dataset_utils import build_synthethic_iid_datasets
from canonical.simulation.datasets.file_per_user import FilePerUserClientData
from canonical.simulation.datasets.sql_client_data import load_and_parse_sql_client_data
from canonical.simulation.datasets.sql_client_data import save_to_sql_client_data
from canonical.simulation.datasets.sql_client_data import SqlClientData
from canonical.simulation.datasets.tensor_slices import TestClientData
from canonical.simulation.datasets.transforming import TransformingClientData

__all__ = [
    'ClientData', 'DatasetNotCachedError', 'FilePerUserClientData',
    'SqlClientData', 'TestClientData', 'TransformingClientData',
    'build_dataset_mixture', 'build_single_label_dataset',
    'build_synthethic_iid_datasets', 'celeba', 'cifar100', 'emnist', 'flair',
    'gldv2', 'inaturalist', 'load_and_parse_sql_client_data',
    'save_to_sql_client_data', 'shakespeare', 'stackoverflow',
]
