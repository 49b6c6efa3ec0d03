"""tensor_encoding's `stages.stages_impl` module path: its stages, by their names."""

# pylint: disable=unused-import
from encoders.stages.basic import FlattenEncodingStage
from encoders.stages.basic import IdentityEncodingStage
from encoders.stages.float_levels import BitpackingEncodingStage
from encoders.stages.float_levels import UniformQuantizationEncodingStage
from encoders.stages.rotation import HadamardEncodingStage
