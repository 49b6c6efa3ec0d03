"""Clipping stages, at tensor_encoding's `stages.research.clipping` path.

Ours in `encoders.stages.basic` already behave as tensor_encoding's do (encode
clips, decode is the identity, so both commute with sum; bounds may be Python
numbers or tensors of any float dtype, cast to the input's), so this module
names the same classes rather than keeping a second copy.
"""

from encoders.stages.basic import ClipByNormEncodingStage
from encoders.stages.basic import ClipByValueEncodingStage

__all__ = ['ClipByNormEncodingStage', 'ClipByValueEncodingStage']
