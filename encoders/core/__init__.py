"""Core of the encoders library, named as in tensor_encoding's `core`."""

from encoders.core.core_encoder import Encoder
from encoders.core.core_encoder import EncoderComposer
from encoders.core.encoding_stage import AdaptiveEncodingStageInterface
from encoders.core.encoding_stage import as_adaptive_encoding_stage
from encoders.core.encoding_stage import EncodingStageInterface
from encoders.core.encoding_stage import StateAggregationMode
from encoders.core.encoding_stage import tf_style_adaptive_encoding_stage
from encoders.core.encoding_stage import tf_style_encoding_stage
from encoders.core.error_feedback import ErrorFeedback
from encoders.core.gather_encoder import GatherEncoder
from encoders.core.simple_encoder import SimpleEncoder
