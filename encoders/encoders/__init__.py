"""Ready-made encoders and the platform wrappers, named as in tensor_encoding."""

from encoders.encoders.common_encoders import as_gather_encoder
from encoders.encoders.common_encoders import as_simple_encoder
