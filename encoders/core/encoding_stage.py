"""The research surface: one simple, possibly lossy transform of one tensor.

A stage maps a tensor to a dict of tensors (`encode`) and back (`decode`). The
method names, signatures and meanings are those of tensor_encoding, so stages
written for it run here after changing their import line.
"""

import abc
from collections.abc import Sequence
import enum
import functools

import tensorflow as tf

from encoders import errors
from encoders.core.tensor_types import ShapeLike
from encoders.core.tensor_types import TensorDict
from encoders.core.tensor_types import TensorLike


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
  def name(self) -> str:
    """A short name, unique among the stages of one encoder's tree."""

  @property
  @abc.abstractmethod
  def compressible_tensors_keys(self) -> Sequence[str]:
    """Keys of `encode`'s output that further stages may encode."""

  @property
  @abc.abstractmethod
  def commutes_with_sum(self) -> bool:
    """Whether decoding can be moved after a sum of encodings."""

  @property
  @abc.abstractmethod
  def decode_needs_input_shape(self) -> bool:
    """Whether `decode` needs the shape of `encode`'s input."""

  @abc.abstractmethod
  def decode(self, encoded_tensors: TensorDict, decode_params: TensorDict,
             num_summands: TensorLike | None = None,
             shape: ShapeLike | None = None) -> tf.Tensor:
    """Returns the tensor that `encoded_tensors` represents."""

  @property
  def xla_compatible(self) -> bool:
    """Whether `encode` and `decode` compile under XLA once shapes are known.

    An `Encoder` compiles subtrees of such stages into one XLA computation
    (`xla_fusion`). Claim it only for ops XLA compiles, no stateful random op
    (draw seeds through `seeds`) and outputs whose shapes follow from the
    input's shape. Off by default.
    """
    return False


class EncodingStageInterface(_StageDescription):
  """A stateless encoding stage.

  Subclasses define the properties `name`, `compressible_tensors_keys`,
  `commutes_with_sum`, `decode_needs_input_shape` and the methods `get_params`,
  `encode` and `decode`. `commutes_with_sum` claims that
  `decode(sum_i encode(x_i), num_summands=n) == sum_i decode(encode(x_i))`.
  """

  @abc.abstractmethod
  def get_params(self) -> tuple[TensorDict, TensorDict]:
    """Returns `(encode_params, decode_params)`, dicts of tensors or Python values."""

  @abc.abstractmethod
  def encode(self, x: tf.Tensor, encode_params: TensorDict) -> TensorDict:
    """Returns a dict of tensors representing `x`."""



class AdaptiveEncodingStageInterface(_StageDescription):
  """An encoding stage whose parameters follow a state.

  `encode` also returns state update tensors; these are aggregated across
  encoders by `state_update_aggregation_modes` and fed to `update_state`.
  """

  @property
  @abc.abstractmethod
  def state_update_aggregation_modes(self) -> dict[str, StateAggregationMode]:
    """Dict: state update key -> `StateAggregationMode`."""

  @abc.abstractmethod
  def initial_state(self) -> TensorDict:
    """Returns the first state, a dict of tensors."""

  @abc.abstractmethod
  def update_state(self, state: TensorDict,
                   state_update_tensors: TensorDict) -> TensorDict:
    """Returns the next state from the aggregated state update tensors."""

  @abc.abstractmethod
  def get_params(self, state: TensorDict) -> tuple[TensorDict, TensorDict]:
    """Returns `(encode_params, decode_params)` for this state."""

  @abc.abstractmethod
  def encode(self, x: tf.Tensor,
             encode_params: TensorDict) -> tuple[TensorDict, TensorDict]:
    """Returns `(encoded_tensors, state_update_tensors)`."""


# Either kind of stage: what `EncoderComposer` and the harness accept.
Stage = EncodingStageInterface | AdaptiveEncodingStageInterface


# Name scope suffixes of the decorated methods, as tensor_encoding names them.
INITIAL_STATE_SCOPE_SUFFIX = '_initial_state'
UPDATE_STATE_SCOPE_SUFFIX = '_update_state'
GET_PARAMS_SCOPE_SUFFIX = '_get_params'
ENCODE_SCOPE_SUFFIX = '_encode'
DECODE_SCOPE_SUFFIX = '_decode'


def _to_tensors(structure):
  return tf.nest.map_structure(tf.convert_to_tensor, structure)


def _check_one_graph(*structures):
  """Graph tensors from two graphs cannot meet in one op: say so up front."""
  graphs = {id(leaf.graph): leaf.graph for leaf in tf.nest.flatten(structures)
            if tf.is_tensor(leaf) and not hasattr(leaf, 'numpy')
            and hasattr(leaf, 'graph')}
  if len(graphs) > 1:
    raise errors.InvalidValueError(
        'The inputs of one encoding stage call come from '
        f'{len(graphs)} different tf.Graphs; build them in one.')


def _scope(self, name, suffix):
  return tf.name_scope(name or self.name + suffix)


# The method decorators below call the decorated method with `name=`; the
# class decorators wrap methods written without it.


def _tf_style_initial_state(initial_state_fn):
  @functools.wraps(initial_state_fn)
  def initial_state(self, name=None):
    with _scope(self, name, INITIAL_STATE_SCOPE_SUFFIX):
      return initial_state_fn(self, name=name)
  return initial_state


def _tf_style_update_state(update_state_fn):
  @functools.wraps(update_state_fn)
  def update_state(self, state, state_update_tensors, name=None):
    _check_one_graph(state, state_update_tensors)
    with _scope(self, name, UPDATE_STATE_SCOPE_SUFFIX):
      return update_state_fn(self, _to_tensors(state),
                             _to_tensors(state_update_tensors), name=name)
  return update_state


def _tf_style_get_params(get_params_fn):
  @functools.wraps(get_params_fn)
  def get_params(self, name=None):
    with _scope(self, name, GET_PARAMS_SCOPE_SUFFIX):
      return get_params_fn(self, name=name)
  return get_params


def _tf_style_adaptive_get_params(get_params_fn):
  @functools.wraps(get_params_fn)
  def get_params(self, state, name=None):
    _check_one_graph(state)
    with _scope(self, name, GET_PARAMS_SCOPE_SUFFIX):
      return get_params_fn(self, _to_tensors(state), name=name)
  return get_params


def _tf_style_encode(encode_fn):
  @functools.wraps(encode_fn)
  def encode(self, x, encode_params, name=None):
    _check_one_graph(x, encode_params)
    with _scope(self, name, ENCODE_SCOPE_SUFFIX):
      return encode_fn(self, tf.convert_to_tensor(x),
                       _to_tensors(encode_params), name=name)
  return encode


def _tf_style_decode(decode_fn):
  @functools.wraps(decode_fn)
  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None, name=None):
    _check_one_graph(encoded_tensors, decode_params, num_summands, shape)
    with _scope(self, name, DECODE_SCOPE_SUFFIX):
      encoded_tensors = _to_tensors(encoded_tensors)
      decode_params = _to_tensors(decode_params)
      if num_summands is not None:
        num_summands = tf.convert_to_tensor(num_summands)
      if shape is not None:
        shape = shape_tensor(shape)
      return decode_fn(self, encoded_tensors, decode_params,
                       num_summands=num_summands, shape=shape, name=name)
  return decode


def shape_tensor(shape):
  """An int32 shape tensor from a tensor, a list of ints or a `tf.TensorShape`.

  A `TensorShape` (`x.shape`) must be fully defined: a decoded tensor needs
  every dimension. `[]` (a scalar's shape) stays int32, not float32.
  """
  if tf.is_tensor(shape):
    return shape
  if isinstance(shape, tf.TensorShape):
    if not shape.is_fully_defined():
      raise errors.InvalidValueError(
          f'decode needs a fully defined shape, got {shape}; '
          'pass tf.shape(x) for a shape known only at run time.')
    shape = shape.as_list()
  return tf.constant(shape, dtype=tf.int32, shape=[len(shape)])


def _without_name(method):
  """A method written without `name=`, callable by the method decorators."""
  @functools.wraps(method)
  def call(self, *args, name=None, **kwargs):
    del name  # The decorator has opened the scope.
    return method(self, *args, **kwargs)
  return call


def tf_style_encoding_stage(cls):
  """Class decorator: name scopes, tensor conversion and a `name=` argument."""
  if not (isinstance(cls, type)
          and issubclass(cls, EncodingStageInterface)):
    raise errors.InvalidTypeError(
        f'Unable to decorate {cls!r}: it must be a class '
        'subclassing EncodingStageInterface.')
  return type(cls.__name__, (cls,), {
      '__doc__': cls.__doc__,
      '__module__': cls.__module__,
      'get_params': _tf_style_get_params(_without_name(cls.get_params)),
      'encode': _tf_style_encode(_without_name(cls.encode)),
      'decode': _tf_style_decode(_without_name(cls.decode)),
  })


def tf_style_adaptive_encoding_stage(cls):
  """Like `tf_style_encoding_stage`, for adaptive stages."""
  if not (isinstance(cls, type)
          and issubclass(cls, AdaptiveEncodingStageInterface)):
    raise errors.InvalidTypeError(
        f'Unable to decorate {cls!r}: it must be a class '
        'subclassing AdaptiveEncodingStageInterface.')
  return type(cls.__name__, (cls,), {
      '__doc__': cls.__doc__,
      '__module__': cls.__module__,
      'initial_state': _tf_style_initial_state(
          _without_name(cls.initial_state)),
      'update_state': _tf_style_update_state(_without_name(cls.update_state)),
      'get_params': _tf_style_adaptive_get_params(
          _without_name(cls.get_params)),
      'encode': _tf_style_encode(_without_name(cls.encode)),
      'decode': _tf_style_decode(_without_name(cls.decode)),
  })


class NoneStateAdaptiveEncodingStage(AdaptiveEncodingStageInterface):
  """A stateless stage seen through the adaptive interface, with empty state."""

  def __init__(self, wrapped_stage):
    if not isinstance(wrapped_stage, EncodingStageInterface):
      raise errors.InvalidTypeError(
          'The wrapped stage must be an EncodingStageInterface, '
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
  def xla_compatible(self):
    return getattr(self._wrapped_stage, 'xla_compatible', False)

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


def as_adaptive_encoding_stage(
    stage: Stage) -> AdaptiveEncodingStageInterface:
  """Returns `stage` as an `AdaptiveEncodingStageInterface`."""
  if isinstance(stage, AdaptiveEncodingStageInterface):
    return stage
  if isinstance(stage, EncodingStageInterface):
    return NoneStateAdaptiveEncodingStage(stage)
  raise errors.InvalidTypeError(
      'Expected an EncodingStageInterface or '
      f'AdaptiveEncodingStageInterface, got {type(stage).__name__}.')
