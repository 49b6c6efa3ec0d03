"""Encoding stages, named as in tensor_encoding's `stages` where one exists there."""

from encoders.stages import research
from encoders.stages.basic import CastEncodingStage
from encoders.stages.basic import ClipByNormEncodingStage
from encoders.stages.basic import ClipByValueEncodingStage
from encoders.stages.basic import FlattenEncodingStage
from encoders.stages.basic import IdentityEncodingStage
from encoders.stages.clipping import add_gaussian_noise
from encoders.stages.clipping import AdaptiveL2ClippingEncodingStage
from encoders.stages.clipping import check_noise_after_sum
from encoders.stages.clipping import GaussianNoiseEncodingStage
from encoders.stages.float_levels import BitpackingEncodingStage
from encoders.stages.float_levels import UniformQuantizationEncodingStage
from encoders.stages.quantization import AdaptiveRangeQuantizationEncodingStage
from encoders.stages.quantization import IntegerBitpackingEncodingStage
from encoders.stages.quantization import IntegerUniformQuantizationEncodingStage
from encoders.stages.rotation import HadamardEncodingStage
from encoders.stages.rotation import UnpaddedHadamardEncodingStage
from encoders.stages.sign import SignEncodingStage
from encoders.stages.sparsification import RandomSubsamplingEncodingStage
from encoders.stages.sparsification import TopKEncodingStage
