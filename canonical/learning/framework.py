"""TFF's `tff.learning.framework`: the encoded broadcast and mean builders
(`canonical.fedavg`'s), under the names the compression tutorial calls."""

from canonical.fedavg.broadcast import build_encoded_broadcast_process_from_model
from canonical.fedavg.mean import build_encoded_mean_process_from_model

__all__ = ['build_encoded_broadcast_process_from_model',
           'build_encoded_mean_process_from_model']
