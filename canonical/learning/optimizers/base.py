"""TFF's optimizer contract, kept pure: `initialize(specs) -> state` and
`next(state, weights, gradients) -> (state, weights)`.

A canonical-form piece holds no variables, so whatever an optimizer carries
from step to step (slots, a step count) travels in its state: a structure of
tensors that goes in and comes out, and so fits `Dataset.reduce` and a form's
server state. TFF keeps the hyperparameters in the state too, where
`get_hparams` / `set_hparams` read and change them between rounds.
"""

import abc
import collections
import collections.abc
import numbers

import tensorflow as tf

from canonical import errors

LEARNING_RATE_KEY = 'learning_rate'


class Optimizer(abc.ABC):
  """`tff.learning.optimizers.Optimizer`: a pair of pure methods.

  Subclass it with `initialize` and `next`; neither may create variables.
  `init` and `apply` are the names this library used before TFF's.
  """

  @abc.abstractmethod
  def initialize(self, specs):
    """The first state for weights described by `specs` (`tf.TensorSpec`s)."""

  @abc.abstractmethod
  def next(self, state, weights, gradients):
    """`(new_state, new_weights)` after one step along `gradients`."""

  def get_hparams(self, state):
    """The hyperparameters in `state` (none unless a subclass keeps some)."""
    del state
    return collections.OrderedDict()

  def set_hparams(self, state, hparams):
    """`state` with `hparams` (a `get_hparams` result) put in."""
    del hparams
    return state

  def init(self, weights):
    """`initialize` for these weights themselves."""
    return self.initialize(specs_of(weights))

  def apply(self, state, weights, gradients):
    """`next`, by its older name."""
    return self.next(state, weights, gradients)


def specs_of(weights):
  """The `tf.TensorSpec`s that `initialize` takes, of a structure of values."""
  return tf.nest.map_structure(
      lambda w: tf.TensorSpec.from_tensor(tf.convert_to_tensor(w)), weights)


def handle_indexed_slices_gradients(gradients):
  """`gradients` with each `tf.IndexedSlices` (from `tf.gather`) made dense."""
  return tf.nest.map_structure(
      lambda g: tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices)
      else g, gradients)


def check_weights_gradients_match(weights, gradients):
  """Raises unless `gradients` has the structure of `weights`, each tensor
  with its weight's shape and dtype (a None gradient matches any weight)."""
  _check_match(weights, gradients, 'gradients')


def _check_match(weights, other, what):
  problem = None
  try:
    tf.nest.assert_same_structure(weights, other)
  except (ValueError, TypeError) as e:
    problem = str(e)
  else:
    for path, (w, o) in enumerate(zip(tf.nest.flatten(weights),
                                       tf.nest.flatten(other))):
      if o is None:
        continue
      if (not tf.TensorShape(w.shape).is_compatible_with(o.shape) or
          tf.as_dtype(w.dtype) != tf.as_dtype(o.dtype)):
        problem = (f'tensor {path} is {tf.as_dtype(o.dtype).name}'
                   f'{list(o.shape)} but its weight is '
                   f'{tf.as_dtype(w.dtype).name}{list(w.shape)}')
        break
  if problem:
    raise errors.InvalidValueError(
        f'The {what} do not have the structure of the weights, or a '
        f"tensor differs from its weight's shape or dtype: {problem}.")


class SlotOptimizer(Optimizer):
  """An optimizer whose state is its hyperparameters and per-weight slots.

  A subclass names its hyperparameters and slots (given to `__init__`, by
  TFF's names) and makes its first slots (`_initial_slots`) and its step
  (`_step`, on tensors); 'step' is a scalar slot, the others are shaped as
  the weights. This class lays out the state, checks arguments, and leaves a
  weight whose gradient is None as it is, slots and all, as TFF does.

  With `hparams_in_state=False` the hyperparameters are constants of the
  graph instead, and `names` renames slots: the layout of this library's
  builders before TFF's (`sgd`, `adam`, ...), kept for code and saved states
  that read it.
  """

  _TRAILING_HPARAMS = ()  # hyperparameters that TFF puts after the slots

  def __init__(self, text, hparams, roles, hparams_in_state=True,
               names=None):
    self._text = text
    self._hparams = collections.OrderedDict(hparams)
    self._roles = tuple(roles)
    self._hparams_in_state = hparams_in_state
    self._names = dict(names or {})

  @property
  def name(self):
    """How the optimizer was built, e.g. 'build_sgdm(learning_rate=0.1)'."""
    return self._text

  def __repr__(self):
    return self._text

  @abc.abstractmethod
  def _initial_slots(self, specs):
    """An OrderedDict of the slots, keyed by the roles."""

  @abc.abstractmethod
  def _step(self, hparams, slots, weights, gradients):
    """`(new_slots, new_weights)`; `hparams` are numbers or tensors."""

  def initialize(self, specs):
    hparams = None
    if self._hparams_in_state:
      hparams = collections.OrderedDict(
          (key, _as_tensor(value)) for key, value in self._hparams.items())
    return self._state(hparams, self._initial_slots(specs))

  def next(self, state, weights, gradients):
    state = _as_mapping(state, self)
    weights = tf.nest.map_structure(tf.convert_to_tensor, weights)
    gradients = handle_indexed_slices_gradients(gradients)
    gradients = tf.nest.map_structure(
        lambda g: None if g is None else tf.convert_to_tensor(g), gradients)
    check_weights_gradients_match(weights, gradients)
    hparams = self._hparams_of(state)
    slots = collections.OrderedDict()
    for role in self._roles:
      key = self._names.get(role, role)
      if key not in state:
        raise errors.InvalidValueError(
            f'{self._text}: the state has no {key!r}; was it made by this '
            "optimizer's initialize?")
      slots[role] = tf.nest.map_structure(tf.convert_to_tensor, state[key])
      if role != 'step':
        _check_match(weights, slots[role], f'state\'s {key!r} slots')
    new_slots, new_weights = self._step(hparams, slots, weights, gradients)
    return self._state(hparams if self._hparams_in_state else None,
                       new_slots), new_weights

  def get_hparams(self, state):
    if not self._hparams_in_state:
      return collections.OrderedDict()
    return self._hparams_of(_as_mapping(state, self))

  def set_hparams(self, state, hparams):
    state = _as_mapping(state, self)
    known = list(self._hparams) if self._hparams_in_state else []
    unknown = [key for key in hparams if key not in known]
    if unknown:
      raise errors.InvalidValueError(
          f'{self._text}: set_hparams got {unknown}, but the state holds '
          f'the hyperparameters {known}' +
          ('' if known else ' (this builder fixes them in the graph; '
           'tff.learning.optimizers.build_* keep them in the state)') + '.')
    new_state = collections.OrderedDict(state)
    for key, value in hparams.items():
      dtype = getattr(state[key], 'dtype', None)
      new_state[key] = value if dtype is None else tf.cast(value, dtype)
    return new_state

  def _hparams_of(self, state):
    if not self._hparams_in_state:
      return self._hparams
    missing = [key for key in self._hparams if key not in state]
    if missing:
      raise errors.InvalidValueError(
          f'{self._text}: the state has no {missing}; was it made by this '
          "optimizer's initialize?")
    return collections.OrderedDict((key, state[key]) for key in self._hparams)

  def _state(self, hparams, slots):
    """The state's layout: hyperparameters (unless fixed), then slots."""
    hparams = hparams or {}
    state = collections.OrderedDict(
        (key, value) for key, value in hparams.items()
        if key not in self._TRAILING_HPARAMS)
    for role, value in slots.items():
      state[self._names.get(role, role)] = value
    for key in self._TRAILING_HPARAMS:
      if key in hparams:
        state[key] = hparams[key]
    return state


def map_leaves(update, weights, gradients, *slots):
  """`update(w, g, *s) -> (w, *s)` weight by weight; a weight whose gradient
  is None keeps itself and its slots. Returns `(weights, *slots)`."""
  flat_slots = [tf.nest.flatten(s) for s in slots]
  results = []
  for i, (w, g) in enumerate(zip(tf.nest.flatten(weights),
                                 tf.nest.flatten(gradients))):
    leaf_slots = [flat[i] for flat in flat_slots]
    results.append((w, *leaf_slots) if g is None
                   else tuple(update(w, g, *leaf_slots)))
  columns = list(zip(*results)) if results else [()] * (1 + len(slots))
  return tuple(tf.nest.pack_sequence_as(weights, list(column))
               for column in columns)


def zeros(spec):
  """Zeros shaped as `spec` (a `tf.TensorSpec`, or a tensor)."""
  if isinstance(spec, tf.TensorSpec):
    return tf.zeros(spec.shape, spec.dtype)
  return tf.zeros_like(tf.convert_to_tensor(spec))


def filled(spec, value):
  """`value` everywhere, shaped as `spec`: TFF's form, ones times value."""
  ones = tf.ones_like(zeros(spec))
  return ones * tf.cast(value, ones.dtype)


def cast(value, like):
  """`value` (a number or scalar tensor) in the dtype of `like`."""
  return tf.cast(value, tf.as_dtype(like.dtype))


def _as_tensor(value):
  """A hyperparameter as a state entry: TFF's float32 for Python numbers."""
  if isinstance(value, numbers.Number):
    return tf.constant(float(value), tf.float32)
  return tf.convert_to_tensor(value)


def _as_mapping(state, optimizer):
  if isinstance(state, (tuple, list)) and not state:
    return {}  # An empty state may come back from a form as `()`.
  if not isinstance(state, collections.abc.Mapping):
    raise errors.InvalidTypeError(
        f'{optimizer}: the state must be the mapping its initialize '
        f'returned, got {type(state).__name__}.')
  return state


def check_builder_args(builder, non_negative=(), fractions=(),
                       open_fractions=(), positive=()):
  """Raises naming `builder` and the argument out of its range; each group
  maps names to values (tensors are not checked: their values come later)."""
  checks = [(non_negative, lambda v: v >= 0, 'non-negative'),
            (fractions, lambda v: 0 <= v <= 1, 'in [0, 1]'),
            (open_fractions, lambda v: 0 <= v < 1, 'in [0, 1)'),
            (positive, lambda v: v > 0, 'positive')]
  for group, ok, text in checks:
    for name, value in dict(group).items():
      if tf.is_tensor(value):
        continue
      if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise errors.InvalidTypeError(
            f'{builder}: {name} must be a number or a scalar tensor, got '
            f'{value!r}.')
      if not ok(value):
        raise errors.InvalidValueError(
            f'{builder}: {name} must be {text}, got {value}.')
