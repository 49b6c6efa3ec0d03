"""Ready-made encoders: trees of stages that work well together."""

from encoders.core import core_encoder
from encoders.core import gather_encoder
from encoders.core import simple_encoder


def as_simple_encoder(encoder, spec):
  """A `SimpleEncoder` (broadcast) for values like `spec`."""
  return simple_encoder.SimpleEncoder(_check_encoder(encoder), spec)


def as_gather_encoder(encoder, spec):
  """A `GatherEncoder` (sum or mean over clients) for values like `spec`."""
  return gather_encoder.GatherEncoder(_check_encoder(encoder), spec)


def _check_encoder(encoder):
  if not isinstance(encoder, core_encoder.Encoder):
    raise TypeError('Expected an Encoder (for example '
                    'te.encoders.uniform_quantization(8)), got '
                    f'{type(encoder).__name__}.')
  return encoder
