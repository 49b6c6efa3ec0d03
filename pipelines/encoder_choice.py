"""Encoders chosen by name on a command line: `NAME[:ARG]`, plus a size threshold.

One string picks an encoder for every large tensor of one direction, as the
compression tutorial does: tensors with fewer elements than the threshold
(biases, small kernels) travel as they are, since their encoding would cost
more in parameters and error than it saves in bits.
"""

from canonical import errors


def _te():
  """`encoders.encoders`, imported (with TensorFlow) when one is built:
  parsing a choice needs neither."""
  import encoders as te  # pylint: disable=g-import-not-at-top
  return te.encoders


# name -> (argument meaning or None, default argument, builder(argument, seed)).
_CHOICES = {
    'none': (None, None, lambda arg, seed: _te().identity()),
    'float16': (None, None, lambda arg, seed: _te().half_precision()),
    'uniform': ('bits', 8, lambda arg, seed: _te().uniform_quantization(
        int(arg), seed=seed)),
    'uniform_nearest': ('bits', 8, lambda arg, seed:
                        _te().uniform_quantization(
                            int(arg), stochastic=False, seed=seed)),
    'hadamard': ('bits', 2, lambda arg, seed: _te().hadamard_quantization(
        int(arg), seed=seed)),
    'hadamard_nearest': ('bits', 4, lambda arg, seed:
                         _te().hadamard_quantization(
                             int(arg), stochastic=False, seed=seed)),
    'adaptive': ('bits', 4, lambda arg, seed: _te().adaptive_quantization(
        int(arg), seed=seed)),
    'drive': (None, None, lambda arg, seed: _te().drive(seed=seed)),
    'subsampled_drive': ('fraction', 0.5, lambda arg, seed:
                         _te().subsampled_drive(float(arg), seed=seed)),
    'sign': (None, None, lambda arg, seed: _te().sign()),
    'top_k': ('fraction', 0.01, lambda arg, seed: _te().top_k(
        fraction=float(arg))),
    'random_k': ('fraction', 0.1, lambda arg, seed: _te().random_k(
        float(arg), seed=seed)),
    # Not a tensor encoder: the whole update through secure aggregation as
    # rotated BITS-bit integers (aggregators.build_secure_mean_process).
    'secure': ('bits', 8, None),
}

DEFAULT_THRESHOLD = 10000


class EncoderChoiceError(errors.Error, ValueError):
  """An encoder name or argument this module does not know."""


def names():
  """'name' or 'name:ARG' for each choice, for help texts."""
  return [name if meaning is None else f'{name}:{meaning.upper()}'
          for name, (meaning, _, _) in _CHOICES.items()]


def parse(text):
  """('name', argument or None) from 'name[:arg]', checked."""
  name, _, arg = text.strip().partition(':')
  if name not in _CHOICES:
    raise EncoderChoiceError(
        f'Unknown encoder {text!r}; choose one of: {", ".join(names())}.')
  meaning, default, _ = _CHOICES[name]
  if meaning is None:
    if arg:
      raise EncoderChoiceError(f'Encoder {name!r} takes no argument, got '
                               f'{text!r}.')
    return name, None
  if not arg:
    return name, default
  try:
    value = int(arg) if meaning == 'bits' else float(arg)
  except ValueError:
    raise EncoderChoiceError(f'Encoder {text!r}: the {meaning} must be a '
                             f'number, got {arg!r}.') from None
  if meaning == 'bits' and not 1 <= value <= 16:
    raise EncoderChoiceError(f'Encoder {text!r}: bits must be 1..16.')
  if meaning == 'fraction' and not 0.0 < value <= 1.0:
    raise EncoderChoiceError(f'Encoder {text!r}: the fraction must be in '
                             '(0, 1].')
  return name, value


def is_identity(text):
  return parse(text)[0] == 'none'


def secure_bits(text):
  """The bits of a 'secure[:BITS]' choice, or None for a tensor encoder."""
  name, arg = parse(text)
  return int(arg) if name == 'secure' else None


def encodes_nothing(flag, text, specs, threshold):
  """What to warn when the tensor encoder `text` (given as `flag`) would
  encode none of `specs` (no float tensor has `threshold`+ elements): the
  run would send exactly the uncompressed bits under the encoder's name.
  None when it encodes some tensor, or is none or secure."""
  name, _ = parse(text)
  if name == 'none' or _CHOICES[name][2] is None:
    return None
  floats = [s for s in specs if s.dtype.is_floating]
  if any(s.shape.num_elements() >= threshold for s in floats):
    return None
  largest = max(floats, key=lambda s: s.shape.num_elements(), default=None)
  biggest = 'there is no float tensor' if largest is None else (
      f'the largest, {largest.dtype.name}{largest.shape.as_list()}, has '
      f'{largest.shape.num_elements():,}')
  return (f'{flag} {text} compresses nothing: it encodes tensors of '
          f'--threshold {threshold:,} or more elements, and {biggest}; lower '
          '--threshold to compress.')


def encoder_fn(text, kind, threshold=DEFAULT_THRESHOLD, seed=0):
  """`encoder_fn(spec)` for the fedavg builders.

  `kind` is 'broadcast' (returns `SimpleEncoder`s) or 'aggregation'
  (`GatherEncoder`s). Float tensors with at least `threshold` elements get
  the chosen encoder; the rest, and integer tensors, are sent as they are.
  """
  name, arg = parse(text)
  build = _CHOICES[name][2]
  if build is None:
    raise EncoderChoiceError(f'{text!r} is not a tensor encoder: it replaces '
                             'the whole aggregation (see secure_bits).')
  wrap = {'broadcast': _te().as_simple_encoder,
          'aggregation': _te().as_gather_encoder}[kind]

  def for_tensor(spec):
    large = spec.shape.num_elements() >= threshold
    if large and spec.dtype.is_floating:
      return wrap(build(arg, seed), spec)
    return wrap(_te().identity(), spec)

  return for_tensor
