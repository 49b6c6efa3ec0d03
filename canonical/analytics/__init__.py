"""Federated analytics, with TensorFlow Federated's names (`tff.analytics`):
heavy hitters with IBLTs (`heavy_hitters.iblt`, `IbltFactory`), distinct
counts by HyperLogLog (`count_distinct`), hierarchical histograms
(`build_hierarchical_histogram_process`, `HierarchicalHistogramDecoder`),
and their helpers (`data_processing`, `differential_privacy`,
`histogram_processing`).

Every computation here compiles to a canonical form: the encoding at the
clients, the sums (plain or secure) and the decoding at the server are pure
TensorFlow; so IBLT tables equal TFF 0.87's bit for bit for the same seed
and strings.
"""

from canonical.analytics import count_distinct
from canonical.analytics import data_processing
from canonical.analytics import differential_privacy
from canonical.analytics import heavy_hitters
from canonical.analytics import histogram_processing
from canonical.analytics.heavy_hitters.iblt.iblt_factory import IbltFactory
from canonical.analytics.hierarchical_histogram import build_hierarchical_histogram_process
from canonical.analytics.hierarchical_histogram import HierarchicalHistogramDecoder

__all__ = [
    'HierarchicalHistogramDecoder', 'IbltFactory',
    'build_hierarchical_histogram_process', 'count_distinct', 'data_processing',
    'differential_privacy', 'heavy_hitters', 'histogram_processing',
]
