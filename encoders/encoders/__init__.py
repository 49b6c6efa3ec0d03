"""Ready-made encoders and the platform wrappers, named as in tensor_encoding."""

from encoders.encoders.common_encoders import adaptive_quantization
from encoders.encoders.common_encoders import as_gather_encoder
from encoders.encoders.common_encoders import as_simple_encoder
from encoders.encoders.common_encoders import drive
from encoders.encoders.common_encoders import hadamard_quantization
from encoders.encoders.common_encoders import half_precision
from encoders.encoders.common_encoders import identity
from encoders.encoders.common_encoders import random_k
from encoders.encoders.common_encoders import sign
from encoders.encoders.common_encoders import subsampled_drive
from encoders.encoders.common_encoders import top_k
from encoders.encoders.common_encoders import uniform_quantization
