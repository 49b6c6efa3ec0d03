"""The research surface: one simple, possibly lossy transform of one tensor.

A stage maps a tensor to a dict of tensors (`encode`) and back (`decode`). The
method names, signatures and meanings are those of tensor_encoding, so stages
written for it run here after changing their import line.
"""

import abc
import enum
import functools

import tensorflow as tf


class StateAggregationMode(enum.Enum):
  """How the state update tensors of many encoders are combined.

  SUM, MIN and MAX reduce element-wise; STACK keeps every client's tensor,
  stacked along a new leading axis.
  """
  SUM = 1
  MAX = 2
  MIN = 3
  STACK = 4


class _StageDescription(metaclass=abc.ABCMeta):
  """What both kinds of stage declare about themselves, and their `decode`."""

  @property
  @abc.abstractmethod
  def name(self):
    """A short name, unique among the stages of one encoder's tree."""

  @property
  @abc.abstractmethod
  def compressible_tensors_keys(self):
    """Keys of `encode`'s output that further stages may encode."""

  @property
  @abc.abstractmethod
  def commutes_with_sum(self):
    """Whether decoding can be moved after a sum of encodings."""

  @property
  @abc.abstractmethod
  def decode_needs_input_shape(self):
    """Whether `decode` needs the shape of `encode`'s input."""

  @abc.abstractmethod
  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    """Returns the tensor that `encoded_tensors` represents."""


class EncodingStageInterface(_StageDescription):
  """A stateless encoding stage.

  Subclasses define the properties `name`, `compressible_tensors_keys`,
  `commutes_with_sum`, `decode_needs_input_shape` and the methods `get_params`,
  `encode` and `decode`. `commutes_with_sum` claims that
  `decode(sum_i encode(x_i), num_summands=n) == sum_i decode(encode(x_i))`.
  """

  @abc.abstractmethod
  def get_params(self):
    """Returns `(encode_params, decode_params)`, dicts of tensors or Python values."""

  @abc.abstractmethod
  def encode(self, x, encode_params):
    """Returns a dict of tensors representing `x`."""



class AdaptiveEncodingStageInterface(_StageDescription):
  """An encoding stage whose parameters follow a state.

  `encode` also returns state update tensors; these are aggregated across
  encoders by `state_update_aggregation_modes` and fed to `update_state`.
  """

  @property
  @abc.abstractmethod
  def state_update_aggregation_modes(self):
    """Dict: state update key -> `StateAggregationMode`."""

  @abc.abstractmethod
  def initial_state(self):
    """Returns the first state, a dict of tensors."""

  @abc.abstractmethod
  def update_state(self, state, state_update_tensors):
    """Returns the next state from the aggregated state update tensors."""

  @abc.abstractmethod
  def get_params(self, state):
    """Returns `(encode_params, decode_params)` for this state."""

  @abc.abstractmethod
  def encode(self, x, encode_params):
    """Returns `(encoded_tensors, state_update_tensors)`."""



def _to_tensors(structure):
  return tf.nest.map_structure(tf.convert_to_tensor, structure)


def _scoped(cls, method_name, convert):
  """Wraps `cls.method_name` in a name scope and converts its inputs."""
  method = getattr(cls, method_name)

  @functools.wraps(method)
  def wrapper(self, *args, name=None, **kwargs):
    with tf.name_scope(name or f'{self.name}_{method_name}'):
      return method(self, *convert(args), **kwargs)

  return wrapper


def _convert_nothing(args):
  return args


def _convert_all(args):
  return tuple(_to_tensors(a) for a in args)


def _convert_decode_args(args):
  encoded_tensors, decode_params, *rest = args
  return (_to_tensors(encoded_tensors), _to_tensors(decode_params), *rest)


def _decode_wrapper(cls):
  method = cls.decode

  @functools.wraps(method)
  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None, name=None):
    with tf.name_scope(name or f'{self.name}_decode'):
      encoded_tensors = _to_tensors(encoded_tensors)
      decode_params = _to_tensors(decode_params)
      if num_summands is not None:
        num_summands = tf.convert_to_tensor(num_summands)
      if shape is not None and not tf.is_tensor(shape):
        # A static shape; `[]` (a scalar's) would otherwise become float32.
        shape = tf.constant(shape, dtype=tf.int32, shape=[len(shape)])
      return method(self, encoded_tensors, decode_params,
                    num_summands=num_summands, shape=shape)

  return decode


def tf_style_encoding_stage(cls):
  """Class decorator: name scopes, tensor conversion and a `name=` argument."""
  if not issubclass(cls, EncodingStageInterface):
    raise TypeError(f'Unable to decorate {cls.__name__}: it must subclass '
                    'EncodingStageInterface.')
  return type(cls.__name__, (cls,), {
      '__doc__': cls.__doc__,
      '__module__': cls.__module__,
      'get_params': _scoped(cls, 'get_params', _convert_nothing),
      'encode': _scoped(cls, 'encode', _convert_all),
      'decode': _decode_wrapper(cls),
  })


def tf_style_adaptive_encoding_stage(cls):
  """Like `tf_style_encoding_stage`, for adaptive stages."""
  if not issubclass(cls, AdaptiveEncodingStageInterface):
    raise TypeError(f'Unable to decorate {cls.__name__}: it must subclass '
                    'AdaptiveEncodingStageInterface.')
  return type(cls.__name__, (cls,), {
      '__doc__': cls.__doc__,
      '__module__': cls.__module__,
      'initial_state': _scoped(cls, 'initial_state', _convert_nothing),
      'update_state': _scoped(cls, 'update_state', _convert_all),
      'get_params': _scoped(cls, 'get_params', _convert_all),
      'encode': _scoped(cls, 'encode', _convert_all),
      'decode': _decode_wrapper(cls),
  })


class NoneStateAdaptiveEncodingStage(AdaptiveEncodingStageInterface):
  """A stateless stage seen through the adaptive interface, with empty state."""

  def __init__(self, wrapped_stage):
    if not isinstance(wrapped_stage, EncodingStageInterface):
      raise TypeError('The wrapped stage must be an EncodingStageInterface, '
                      f'got {type(wrapped_stage).__name__}.')
    self._wrapped_stage = wrapped_stage

  @property
  def wrapped_stage(self):
    return self._wrapped_stage

  def __getattr__(self, attr):
    return getattr(self._wrapped_stage, attr)

  @property
  def name(self):
    return self._wrapped_stage.name

  @property
  def compressible_tensors_keys(self):
    return self._wrapped_stage.compressible_tensors_keys

  @property
  def commutes_with_sum(self):
    return self._wrapped_stage.commutes_with_sum

  @property
  def decode_needs_input_shape(self):
    return self._wrapped_stage.decode_needs_input_shape

  @property
  def state_update_aggregation_modes(self):
    return {}

  def initial_state(self, name=None):
    return {}

  def update_state(self, state, state_update_tensors, name=None):
    return {}

  def get_params(self, state, name=None):
    return self._wrapped_stage.get_params()

  def encode(self, x, encode_params, name=None):
    return self._wrapped_stage.encode(x, encode_params), {}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None, name=None):
    return self._wrapped_stage.decode(encoded_tensors, decode_params,
                                      num_summands=num_summands, shape=shape)


def as_adaptive_encoding_stage(stage):
  """Returns `stage` as an `AdaptiveEncodingStageInterface`."""
  if isinstance(stage, AdaptiveEncodingStageInterface):
    return stage
  if isinstance(stage, EncodingStageInterface):
    return NoneStateAdaptiveEncodingStage(stage)
  raise TypeError('Expected an EncodingStageInterface or '
                  f'AdaptiveEncodingStageInterface, got {type(stage).__name__}.')
