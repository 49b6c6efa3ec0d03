"""Ready-made encoders: trees of stages that work well together.

Each returns an `Encoder`; wrap it with `as_simple_encoder` (broadcast) or
`as_gather_encoder` (sum/mean over clients) for one tensor's spec.
"""

import tensorflow as tf

from encoders import errors
from encoders.core import core_encoder
from encoders.core import gather_encoder
from encoders.core import simple_encoder
from encoders.stages import basic
from encoders.stages import float_levels
from encoders.stages import quantization
from encoders.stages import rotation
from encoders.stages import sign as sign_stages
from encoders.stages import sparsification

_Composer = core_encoder.EncoderComposer


def as_simple_encoder(encoder, spec):
  """A `SimpleEncoder` (broadcast) for values like `spec`."""
  return simple_encoder.SimpleEncoder(_check_encoder(encoder), spec)


def as_gather_encoder(encoder, spec):
  """A `GatherEncoder` (sum or mean over clients) for values like `spec`."""
  return gather_encoder.GatherEncoder(_check_encoder(encoder), spec)


def _check_encoder(encoder):
  if not isinstance(encoder, core_encoder.Encoder):
    raise errors.InvalidTypeError('Expected an Encoder (for example '
                                  'te.encoders.uniform_quantization(8)), got '
                                  f'{type(encoder).__name__}.')
  return encoder


def _quantized_and_packed(quantizer, bits):
  """`quantizer -> bitpacking(bits)` on the quantized levels, as a composer.

  Float levels (tensor_encoding's stages) get `BitpackingEncodingStage`, int32
  levels `IntegerBitpackingEncodingStage`.
  """
  packer = (float_levels.BitpackingEncodingStage
            if isinstance(quantizer, float_levels.UniformQuantizationEncodingStage)
            else quantization.IntegerBitpackingEncodingStage)
  return _Composer(packer(bits)).add_parent(quantizer,
                                            quantizer.ENCODED_VALUES_KEY)


def identity():
  """Sends the tensor as it is."""
  return _Composer(basic.IdentityEncodingStage()).make()


def half_precision(dtype=tf.float16):
  """Casts to float16 or bfloat16 for the wire: 16 bits per coordinate."""
  return _Composer(basic.CastEncodingStage(dtype)).make()


def uniform_quantization(bits, stochastic=True, seed=None):
  """Flatten -> uniform quantization on the data's [min, max] -> dense bitpacking.

  `seed=None` draws fresh noise on every encode when run directly.
  """
  quantizer = float_levels.UniformQuantizationEncodingStage(
      bits=bits, stochastic=stochastic, seed=seed)
  return _quantized_and_packed(quantizer, bits).add_parent(
      basic.FlattenEncodingStage(),
      basic.FlattenEncodingStage.ENCODED_VALUES_KEY).make()


def hadamard_quantization(bits, stochastic=True, seed=None):
  """Flatten -> randomized Hadamard rotation -> uniform quantization -> bitpacking.

  The rotation spreads the energy of outlying coordinates, so few bits lose
  less; it commutes with sum, so the server rotates back once, after the sum.
  It needs no padding (`UnpaddedHadamardEncodingStage`), so 8 bits cost 8.0
  bits per coordinate at any size; its seed is state, a new rotation per round.
  """
  quantizer = float_levels.UniformQuantizationEncodingStage(
      bits=bits, stochastic=stochastic, seed=seed)
  return _quantized_and_packed(quantizer, bits).add_parent(
      rotation.UnpaddedHadamardEncodingStage(seed=seed or 0),
      rotation.UnpaddedHadamardEncodingStage.ENCODED_VALUES_KEY).add_parent(
          basic.FlattenEncodingStage(),
          basic.FlattenEncodingStage.ENCODED_VALUES_KEY).make()


def adaptive_quantization(bits, initial_range=1.0, decay=0.5, seed=None):
  """Quantization on a range that follows the clients' magnitudes, bitpacked.

  The range is shared state, so clients' integer levels are summed exactly and
  decoded once after the sum.
  """
  quantizer = quantization.AdaptiveRangeQuantizationEncodingStage(
      bits=bits, initial_range=initial_range, decay=decay, seed=seed)
  return _quantized_and_packed(quantizer, bits).add_parent(
      basic.FlattenEncodingStage(),
      basic.FlattenEncodingStage.ENCODED_VALUES_KEY).make()


def top_k(fraction=None, k=None):
  """Keeps the largest-magnitude coordinates: values and int32 indices."""
  return _Composer(
      sparsification.TopKEncodingStage(fraction=fraction, k=k)).make()


def random_k(fraction, seed=None):
  """Keeps a random fraction of coordinates, rescaled to stay unbiased."""
  return _Composer(sparsification.RandomSubsamplingEncodingStage(
      fraction, seed=seed)).make()


def sign():
  """1-bit signs with one scale, the mean magnitude (the signSGD family)."""
  stage = sign_stages.SignEncodingStage(scale='mean_abs')
  return _Composer(quantization.IntegerBitpackingEncodingStage(1)).add_parent(
      stage, stage.SIGNS_KEY).make()


def drive(seed=0):
  """DRIVE: randomized Hadamard rotation, then 1-bit signs with one scale.

  About one bit per coordinate. The scale `|x|^2 / |R x|_1` makes the estimate
  unbiased over rotations; the rotation is undone once, after the sum.
  """
  return _drive_composer(seed).make()


def _drive_composer(seed):
  stage = sign_stages.SignEncodingStage(scale='drive')
  return _Composer(quantization.IntegerBitpackingEncodingStage(1)).add_parent(
      stage, stage.SIGNS_KEY).add_parent(
          rotation.UnpaddedHadamardEncodingStage(seed=seed),
          rotation.UnpaddedHadamardEncodingStage.ENCODED_VALUES_KEY)


def subsampled_drive(fraction, seed=None):
  """Random-k, then DRIVE on the kept values: about `fraction` bits per coordinate.

  Each client keeps its own random `fraction` of the coordinates (sending a
  seed, not indices) and sends their rotated signs with one scale, so an
  update costs less than one bit per coordinate while staying unbiased.
  """
  subsample = sparsification.RandomSubsamplingEncodingStage(fraction,
                                                             seed=seed)
  return _drive_composer(seed or 0).add_parent(subsample,
                                          subsample.VALUES_KEY).make()
