"""Heavy hitters with Invertible Bloom Lookup Tables (TFF's
`tff.analytics.heavy_hitters.iblt`): chunkers and hashers laying strings
out as TFF does (so tables equal TFF's bit for bit), the encoders and the
pure peeling decoders, the aggregation factories and the federated
computation."""

from canonical.analytics.heavy_hitters.iblt.chunkers import CharacterEncoding
from canonical.analytics.heavy_hitters.iblt.chunkers import create_chunker
from canonical.analytics.heavy_hitters.iblt.hyperedge_hashers import CoupledHyperEdgeHasher
from canonical.analytics.heavy_hitters.iblt.hyperedge_hashers import RandomHyperEdgeHasher
from canonical.analytics.heavy_hitters.iblt.iblt_clipping import ClippingIbltFactory
from canonical.analytics.heavy_hitters.iblt.iblt_factory import IbltFactory
from canonical.analytics.heavy_hitters.iblt.iblt_lib import decode_iblt_tf
from canonical.analytics.heavy_hitters.iblt.iblt_lib import DEFAULT_REPETITIONS
from canonical.analytics.heavy_hitters.iblt.iblt_lib import IbltDecoder
from canonical.analytics.heavy_hitters.iblt.iblt_lib import IbltEncoder
from canonical.analytics.heavy_hitters.iblt.iblt_tensor import decode_iblt_tensor_tf
from canonical.analytics.heavy_hitters.iblt.iblt_tensor import IbltTensorDecoder
from canonical.analytics.heavy_hitters.iblt.iblt_tensor import IbltTensorEncoder
from canonical.analytics.heavy_hitters.iblt.iblt_tff import build_iblt_computation

__all__ = [
    'CharacterEncoding', 'ClippingIbltFactory', 'CoupledHyperEdgeHasher',
    'DEFAULT_REPETITIONS', 'IbltDecoder', 'IbltEncoder', 'IbltFactory',
    'IbltTensorDecoder', 'IbltTensorEncoder', 'RandomHyperEdgeHasher',
    'build_iblt_computation', 'create_chunker', 'decode_iblt_tensor_tf',
    'decode_iblt_tf',
]
