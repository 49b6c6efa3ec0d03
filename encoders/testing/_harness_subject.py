"""The stage under a harness check: how the checks run it and how it fails.

`_Subject` wraps any stage in the adaptive interface and turns its exceptions
into `AssertionError`s naming the stage, the check and the input; the
functions below run it eagerly or in fresh tf.functions, with params and
encodings crossing as numpy values. Kept apart from `harness`, whose public
`check_*` functions are what a reader looks for there.
"""

import contextlib
import re

import numpy as np
import tensorflow as tf

from encoders.core import encoding_stage

_CLEAR_ERROR_TYPES = (ValueError, TypeError, tf.errors.InvalidArgumentError)
_MAX_MESSAGE_CHARS = 400


class _Subject:
  """A stage seen through the adaptive interface, with the harness's helpers."""

  def __init__(self, stage):
    self.adaptive = encoding_stage.as_adaptive_encoding_stage(stage)
    wrapped = isinstance(self.adaptive,
                         encoding_stage.NoneStateAdaptiveEncodingStage)
    inner = self.adaptive.wrapped_stage if wrapped else stage
    self.class_name = type(inner).__name__
    try:
      self.name = str(inner.name)
    except Exception:  # pylint: disable=broad-except
      self.name = ''  # check_structure reports the broken property.
    self.label = f'{self.class_name} (name {self.name!r})'

  def params(self):
    return self.adaptive.get_params(self.adaptive.initial_state())

  def encode(self, x, encode_params):
    return self.adaptive.encode(x, _as_arguments(encode_params))[0]

  def decode(self, encoded, decode_params, input_shape, num_summands=None):
    shape = None
    if self.adaptive.decode_needs_input_shape:
      # int32 even for a scalar's empty shape (a bare [] converts to float32).
      shape = tf.constant(list(input_shape), tf.int32)
    return self.adaptive.decode(_as_arguments(encoded),
                                _as_arguments(decode_params),
                                num_summands=num_summands, shape=shape)

  def fail(self, check, case, detail):
    raise AssertionError(f'{self.label}: {check} failed for {case}: {detail}')

  @contextlib.contextmanager
  def no_error(self, check, case, doing):
    """Turns any exception inside into an AssertionError naming the stage."""
    try:
      yield
    except AssertionError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      self.fail(check, case, f'{doing} raised {_describe_error(e)}')

  def works_or_clear_error(self, check, case, fn):
    """`(True, result)`, or `(False, message)` for a clear rejection."""
    try:
      return True, fn()
    except AssertionError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      if isinstance(e, _CLEAR_ERROR_TYPES) and self.named_in(str(e)):
        return False, self.rejection_message(e)
      self.fail(check, case, f'raised {_describe_error(e)}; expected it to '
                'work or to raise a ValueError/TypeError whose message names '
                f'the stage ({self.class_name!r} or {self.name!r})')

  def rejection_message(self, error):
    """The line of `error` naming the stage (AutoGraph adds a traceback)."""
    lines = [line.strip() for line in str(error).splitlines()
             if self.named_in(line)]
    message = lines[-1] if lines else ''
    prefix = f'{type(error).__name__}: '
    return message[len(prefix):] if message.startswith(prefix) else message

  def named_in(self, message):
    # Whole words only: op names such as `name_encode/Reshape` in a raw TF
    # error contain the stage's name but do not make the error clear.
    for word in {self.class_name, self.name} - {''}:
      if re.search(rf'(?<![\w/]){re.escape(word)}(?![\w/])', message):
        return True
    return False


def _describe_error(e):
  message = ' '.join(str(e).split())
  if len(message) > _MAX_MESSAGE_CHARS:
    # Keep both ends: AutoGraph puts the traceback first, the cause last.
    head = _MAX_MESSAGE_CHARS // 3
    tail = _MAX_MESSAGE_CHARS - head
    message = f'{message[:head]} ... {message[-tail:]}'
  return f'{type(e).__name__}: {message}'


# ---------------------------------------------------------------------------
# Running a stage.


def _traced_encode(subject, x, encode_params, with_updates=False):
  """Encodes in a fresh tf.function, params passed as arguments."""

  def encode(x, params):
    encoded, updates = subject.adaptive.encode(x, params)
    return (encoded, updates) if with_updates else encoded

  return _call_in_fresh_trace(encode, x, _as_arguments(encode_params))


def _traced_decode(subject, encoded, decode_params, input_shape,
                   num_summands=None, record=None):
  """Decodes in a fresh tf.function taking only decode's own arguments."""

  def decode(encoded, params, num_summands):
    y = subject.decode(encoded, params, input_shape, num_summands)
    if record is not None:
      record.append(y)
    return y

  return _call_in_fresh_trace(decode, _as_arguments(encoded),
                              _as_arguments(decode_params), num_summands)


def _dynamic_round_trip(subject, x, record):
  """Encodes with all input dims unknown; decodes knowing what encode knew."""
  encode_params, decode_params = _to_numpy(subject.params())
  params = _as_arguments(encode_params)
  encoded_specs = []

  def encode(x):
    encoded = subject.encode(x, params)
    encoded_specs.append({k: tf.TensorSpec(v.shape, v.dtype)
                          for k, v in encoded.items()})
    return encoded, tf.shape(x)

  spec = tf.TensorSpec([None] * x.shape.rank, x.dtype)
  encoded, shape = _call_in_fresh_trace(encode, x, signature=[spec])
  needs_shape = subject.adaptive.decode_needs_input_shape

  def decode(encoded, shape):
    y = subject.adaptive.decode(encoded, _as_arguments(decode_params),
                                shape=shape if needs_shape else None)
    record.append(y)
    return y

  return _call_in_fresh_trace(
      decode, encoded, shape,
      signature=[encoded_specs[0], tf.TensorSpec([x.shape.rank], shape.dtype)])


def _call_in_fresh_trace(fn, *args, signature=None):
  """Traces `fn` anew (specs from `signature` or `args`), then calls it.

  Through `get_concrete_function`, so these deliberate one-off traces do not
  set off TF's warning about frequent retracing.
  """
  function = tf.function(fn, input_signature=signature)
  concrete = (function.get_concrete_function() if signature is not None else
              function.get_concrete_function(*args))
  return concrete(*args)


def _shape_arg(adaptive, x):
  if not adaptive.decode_needs_input_shape:
    return None
  if x.shape.is_fully_defined():
    return tf.constant(x.shape.as_list(), tf.int32)
  return tf.shape(x)


def _aggregate_one(stage, updates):
  """One client's state updates, aggregated as if over a single client."""
  modes = stage.state_update_aggregation_modes
  return {k: (tf.expand_dims(v, 0)
              if modes.get(k) == encoding_stage.StateAggregationMode.STACK
              else v) for k, v in updates.items()}


def _to_numpy(structure):
  """Tensors become numpy arrays (what crosses the wire); Python values stay."""
  return tf.nest.map_structure(
      lambda v: v.numpy() if tf.is_tensor(v) else v, structure)


def _as_arguments(structure):
  """numpy arrays become tensors, so a tf.function takes them as inputs."""
  def convert(v):
    return tf.constant(v) if isinstance(v, (np.ndarray, np.generic)) else v

  return tf.nest.map_structure(convert, structure)
