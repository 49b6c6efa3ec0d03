"""`CanonicalForm`: the eight pure TensorFlow pieces a MapReduce runtime executes.

| piece      | type                 | runs                      |
| initialize | ( -> S)              | once, server              |
| prepare    | (S -> C)             | server, start of round    |
| work       | (<D, C> -> <U, Y>)   | each client               |
| zero       | ( -> A)              | aggregation tier          |
| accumulate | (<A, U> -> A)        | aggregation tier          |
| merge      | (<A, A> -> A)        | aggregation tier          |
| report     | (A -> R)             | top aggregation tier      |
| update     | (<S, R> -> <S, X>)   | server, end of round      |

With secure sums (`federated_secure_sum_bitwidth`, ...), U is a
`ClientUpdate(plain, secure)`: the aggregation tier folds `plain`; `secure`
holds one integer structure per secure sum, which the runtime adds with the
masking protocol under the moduli of that round. `secure_parameters` (S -> P)
gives each secure sum's parameter per tensor, and update takes R as a
`ServerAggregate(plain=report's result, secure=the sums)`.

Y is what stays at the client: nothing (`()`), the new client state, the
per-client outputs, or a `ClientResult(client_state, client_outputs)`. With
client state, D = <client data, client state> and `client_state_init` makes a
new client's first state. Which of the four Y is follows from its type alone
(see `client_result`), so a saved form needs no extra field for it.
"""

import collections
import dataclasses
import functools
from typing import Callable, Sequence

import tensorflow as tf
from tensorflow.python.util import nest  # pylint: disable=g-direct-tensorflow-import

from canonical.core import bits_text
from canonical.core import piece_names
from canonical.core import types as ft
from canonical.core import unrolled_datasets
from canonical import errors
from canonical.core import privacy_releases
from canonical.secagg import sums as secure_sums_lib
from encoders.core import structures

PIECES = piece_names.PIECES
FormError = errors.FormError


@dataclasses.dataclass
class Piece:
  """One pure TF computation with its input structures and output structure.

  Traced once, on first use, with `input_specs` as its input signature (an
  unknown dimension accepts any size); the concrete function is cached.
  A piece of no tensors, in or out (an accumulate of a U that is all secure),
  is called once: being pure, it can only give the same empty result again,
  and a call costs ~1 ms of TF's, per client.
  """
  name: str
  function: Callable     # Traced with `input_specs`.
  input_specs: tuple     # One member structure per positional argument.
  _concrete: object = None
  _output_spec: object = None
  _empty_result: object = None  # (result,), once called, if of no tensors.
  _unrolled: object = None  # (function or None,), once asked for.

  def __post_init__(self):
    self.input_specs = tuple(self.input_specs)
    self._takes_datasets = ft.has_dataset(self.input_specs)

  @property
  def concrete_function(self):
    if self._concrete is None:
      function = self.function

      def traced(*args):
        return tf.nest.map_structure(_as_tensor, function(*args))

      try:
        self._concrete = tf.function(
            traced, input_signature=list(self.input_specs),
            autograph=False).get_concrete_function()
      except (FormError, errors.FederatedError):
        raise
      except Exception as e:  # Name the piece on any trace error.
        raise FormError(
            f'Piece {self.name!r} {self.input_signature()} failed to trace: '
            f'{type(e).__name__}: {e}') from e
    return self._concrete

  @property
  def output_spec(self):
    if self._output_spec is None:
      self._output_spec = ft.member_of(
          self.concrete_function.structured_outputs)
    return self._output_spec

  def raise_for_mismatch(self, member, value):
    """A FederatedError if a dataset in `value` has elements of another type
    than `member` says (TF would fail mid-run, naming no piece)."""
    mismatch = ft.dataset_mismatch(member, value)
    if mismatch:
      raise errors.FederatedError(
          f'Piece {self.name!r} {self.input_signature()}: expected '
          f'{mismatch[0]}, got {mismatch[1]}.')

  def __call__(self, *args):
    if len(args) != len(self.input_specs):
      raise errors.InvalidTypeError(
          f'Piece {self.name!r} takes {len(self.input_specs)} '
          f'arguments {self.input_signature()}, got {len(args)}.')
    # Named parts go by name: an OrderedDict for a namedtuple (the state as
    # TFF 0.87 gives it back from Python) is its fields, not sorted keys.
    args = tuple(ft.by_name(spec, arg)
                 for spec, arg in zip(self.input_specs, args))
    if self._empty_result is not None and _fits(self.input_specs, args):
      return self._empty_result[0]
    if self._takes_datasets and _has_elements(self.input_specs, args):
      return self._call_on_elements(args)
    result = self._call(*args)
    if self._of_no_tensors:
      self._empty_result = (result,)
    return result

  @functools.cached_property
  def _of_no_tensors(self):
    """Known once traced; not flattened again at every call."""
    return not tf.nest.flatten((self.input_specs, self.output_spec))

  def _call(self, *args):
    if self._takes_datasets:
      self.raise_for_mismatch(self.input_specs, args)
    try:
      return self.concrete_function(*args)
    except TypeError as e:
      raise errors.InvalidTypeError(
          f'Piece {self.name!r} {self.input_signature()} was '
          f'called with arguments that do not fit: {e}') from e

  def unrolled(self):
    """This piece with its datasets fed as their elements' tensors
    (`unrolled_datasets`): tens of times cheaper a call than through a
    dataset; None where the piece uses a dataset otherwise."""
    if self._unrolled is None:
      try:
        graph_def, inputs, outputs = self._graph()
        function = unrolled_datasets.tensor_fed(
            graph_def, inputs, tf.nest.flatten(self.input_specs), outputs)
      except unrolled_datasets.Unsupported:
        function = None
      self._unrolled = (function,)
    return self._unrolled[0]

  def _graph(self):
    """`(graph_def, input tensor names, output tensor names)`."""
    return unrolled_datasets.frozen_graph(self.concrete_function)

  def flat_arguments(self, args):
    """The leaves of `args` up to the input specs' leaves (a dataset is
    one); InvalidTypeError naming the piece if they do not fit."""
    try:
      return nest.flatten_up_to(tuple(self.input_specs), args,
                                check_types=False)
    except (TypeError, ValueError) as e:
      raise errors.InvalidTypeError(
          f'Piece {self.name!r} {self.input_signature()} was '
          f'called with arguments that do not fit: {e}') from e

  def _call_on_elements(self, args):
    """A call where each dataset is given as the list of its elements (as
    TFF 0.87 takes sequences from Python)."""
    values = self.flat_arguments(args)
    specs = tf.nest.flatten(self.input_specs)
    function = self.unrolled()
    if function is None:  # Through datasets, as the piece takes them.
      values = [_dataset_of(s, v) if _is_elements(s, v) else v
                for s, v in zip(specs, values)]
      return self._call(*tf.nest.pack_sequence_as(self.input_specs, values))
    flat = []
    for spec, value in zip(specs, values):
      if not isinstance(spec, tf.data.DatasetSpec):
        flat.append(tensor_of(self, spec, value))
        continue
      if isinstance(value, unrolled_datasets.Encoded):
        flat.extend(value.tensors)
        continue
      try:
        flat.extend(unrolled_datasets.encode(spec.element_spec, value))
      except ValueError as e:
        raise errors.InvalidTypeError(
            f'Piece {self.name!r} {self.input_signature()}: its dataset\'s '
            f'{e}.') from None
    return tf.nest.pack_sequence_as(self.output_spec, list(function(*flat)))

  def input_signature(self):
    return '(' + ', '.join(ft.form_text(s) for s in self.input_specs) + ')'

  def signature(self):
    return f'{self.input_signature()} -> {ft.form_text(self.output_spec)}'

  @property
  def type_signature(self):
    """TFF's `FunctionType` of the piece (each of a MapReduceForm's pieces
    is a computation there): its parameters and its result."""
    return ft.FunctionType(
        ft.parameter_of(self.input_specs,
                        [f'arg{i}' for i in range(len(self.input_specs))]),
        self.output_spec)

  def op_count(self):
    graph_def = self.concrete_function.graph.as_graph_def()
    return len(graph_def.node) + sum(
        len(f.node_def) for f in graph_def.library.function)


def _is_elements(spec, value):
  return isinstance(spec, tf.data.DatasetSpec) and isinstance(
      value, (list, tuple, unrolled_datasets.Encoded))


def _has_elements(specs, args):
  try:
    values = nest.flatten_up_to(tuple(specs), args, check_types=False)
  except (TypeError, ValueError):
    return False
  return any(_is_elements(s, v) for s, v in zip(tf.nest.flatten(specs),
                                                values))


def _dataset_of(spec, elements):
  """The dataset of `elements`, for a piece that cannot take them unrolled."""
  if isinstance(elements, unrolled_datasets.Encoded):
    elements = elements.elements()
  elements = list(elements)
  return tf.data.Dataset.from_generator(lambda: iter(elements),
                                        output_signature=spec.element_spec)


def tensor_of(piece, spec, value):
  """`value` as a tensor of `spec`, or an error naming the piece."""
  tensor = tf.convert_to_tensor(value, dtype_hint=spec.dtype)
  if tensor.dtype != spec.dtype or not tensor.shape.is_compatible_with(
      spec.shape):
    raise errors.InvalidTypeError(
        f'Piece {piece.name!r} {piece.input_signature()}: expected '
        f'{ft.form_text(spec)}, got {ft.form_text(ft.spec_of(tensor))}.')
  return tensor


def _fits(specs, args):
  """Whether `args` have `specs`' structure (else a call names the misfit)."""
  try:
    tf.nest.assert_same_structure(specs, args, check_types=False)
  except (TypeError, ValueError):
    return False
  return True


# Y of a form with both client state and per-client outputs. Its field names
# mark it (they survive saving), so it is never taken for a client state.
ClientResult = collections.namedtuple('ClientResult',
                                      ['client_state', 'client_outputs'])


# U and R of a form with secure sums; their field names mark them, as above.
ClientUpdate = collections.namedtuple('ClientUpdate', ['plain', 'secure'])
ServerAggregate = collections.namedtuple('ServerAggregate',
                                         ['plain', 'secure'])


def client_result(client_state, client_outputs):
  """Y from its parts (None where a form has no such part)."""
  if client_state is None:
    return () if client_outputs is None else client_outputs
  if client_outputs is None:
    return client_state
  return ClientResult(client_state, client_outputs)


def _is_client_result(y):
  return getattr(y, '_fields', None) == ClientResult._fields


def _as_tensor(value):
  if isinstance(value, tf.data.Dataset) or tf.is_tensor(value):
    return value
  return tf.convert_to_tensor(value)


# Positional inputs of each piece.
ARITY = dict(initialize=0, prepare=1, work=2, zero=0, accumulate=2, merge=2,
             report=1, update=2, client_state_init=0, secure_parameters=1)


class CanonicalForm:
  """The eight pieces (and `client_state_init` with client state,
  `secure_parameters` with secure sums), type-checked."""

  def __init__(self, initialize: 'Piece', prepare: 'Piece', work: 'Piece',
               zero: 'Piece', accumulate: 'Piece', merge: 'Piece',
               report: 'Piece', update: 'Piece',
               client_state_init: 'Piece | None' = None, name: str = 'form',
               description: str = '', encoders: dict | None = None,
               secure_parameters: 'Piece | None' = None,
               secure_sums: Sequence[secure_sums_lib.SecureSum] = (),
               parameter_labels: Sequence[str] = (),
               result_labels: Sequence[str] = (),
               privacy_releases: Sequence[privacy_releases.Release] = ()):
    self.initialize = initialize
    self.prepare = prepare
    self.work = work
    self.zero = zero
    self.accumulate = accumulate
    self.merge = merge
    self.report = report
    self.update = update
    self.client_state_init = client_state_init
    self.secure_parameters = secure_parameters
    self.secure_sums = tuple(secure_sums)
    self.name = name
    self.description = description
    self.encoders = dict(encoders or {})
    # The names of the round's parameters and results (`state`,
    # `client_data`; `state`, `metrics`), where it names them: TFF's form
    # type and labels show them. Empty for a round that does not.
    self.parameter_labels = tuple(parameter_labels)
    self.result_labels = tuple(result_labels)
    # What each round releases with differential privacy (noted by DP
    # aggregators, kept by the compiler): a runtime accounts it.
    self.privacy_releases = tuple(privacy_releases)
    self._check_types()

  @property
  def pieces(self):
    pieces = {name: getattr(self, name) for name in PIECES}
    for name in ('client_state_init', 'secure_parameters'):
      if getattr(self, name) is not None:
        pieces[name] = getattr(self, name)
    return pieces

  @property
  def has_client_state(self):
    return self.client_state_init is not None

  @property
  def state_spec(self):
    """S: the server state type prepare and update take (may be more general
    than initialize's result, e.g. a dimension that changes between rounds)."""
    return self.prepare.input_specs[0]

  @property
  def broadcast_spec(self):
    """C: what every sampled client receives."""
    return self.prepare.output_spec

  @property
  def has_secure_sums(self):
    return bool(self.secure_sums)

  @property
  def client_update_spec(self):
    """U: what every client sends to the aggregation tier's accumulate (the
    plain part, with secure sums)."""
    u = self.work.output_spec[0]
    return u.plain if self.has_secure_sums else u

  @property
  def secure_update_spec(self):
    """What every client sends through the secure sums: one integer
    structure per secure sum (`()` without them)."""
    return self.work.output_spec[0].secure if self.has_secure_sums else ()

  def split_update(self, u):
    """`(plain part, secure part)` of a work's U."""
    return (u.plain, u.secure) if self.has_secure_sums else (u, ())

  def server_aggregate(self, reported, secure):
    """R for update: report's result, with the secure sums if any."""
    return (ServerAggregate(reported, tuple(secure))
            if self.has_secure_sums else reported)

  @property
  def client_data_spec(self):
    data = self.work.input_specs[0]
    return data[0] if self.has_client_state else data

  @property
  def client_state_spec(self):
    """The state each client keeps between rounds (None if there is none)."""
    return self.work.input_specs[0][1] if self.has_client_state else None

  @property
  def client_output_spec(self):
    """The per-client outputs work returns in Y (None if there are none).

    Without client state, any non-empty Y is outputs; with it, Y is the
    state or a `ClientResult`."""
    y = self.work.output_spec[1]
    if not self.has_client_state:
      return y if tf.nest.flatten(y) else None
    return y.client_outputs if _is_client_result(y) else None

  @property
  def has_client_outputs(self):
    return self.client_output_spec is not None

  def split_client_result(self, y):
    """`(new client state, per-client outputs)` of a work's Y; None for a
    part this form has not. A runtime keeps the first and reports the
    second."""
    state = outputs = None
    if self.has_client_state and self.has_client_outputs:
      state, outputs = y.client_state, y.client_outputs
    elif self.has_client_state:
      state = y
    elif self.has_client_outputs:
      outputs = y
    return state, outputs

  @property
  def accumulator_spec(self):
    """A: what the aggregation tier folds clients into."""
    return self.accumulate.input_specs[0]

  def _check_shapes(self):
    """Every piece is a `Piece` with the right number of inputs and outputs."""
    for name, piece in self.pieces.items():
      if not isinstance(piece, Piece):
        raise FormError(f'Canonical form {self.name!r}: {name} must be a '
                        f'Piece, got {type(piece).__name__}.')
      if len(piece.input_specs) != ARITY[name]:
        raise FormError(
            f'Canonical form {self.name!r}: {name} must take {ARITY[name]} '
            f'inputs, it takes {len(piece.input_specs)} '
            f'{piece.input_signature()}.')
    for name, outputs in (('work', '<U, Y>'), ('update', '<S, X>')):
      spec = getattr(self, name).output_spec
      if not isinstance(spec, (tuple, list)) or len(spec) != 2:
        raise FormError(f'Canonical form {self.name!r}: {name} must return a '
                        f'pair {outputs}, it returns {ft.form_text(spec)}.')
    if self.has_client_state:
      data = self.work.input_specs[0]
      if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise FormError(
            f'Canonical form {self.name!r}: with client state, work\'s first '
            'input must be a pair <client data, client state>, it is '
            f'{ft.form_text(data)}.')

  def _check_secure_sums(self):
    """With secure sums: U and R are marked pairs, the secure values are
    integer tensors, and P gives one int64 scalar per tensor of each."""
    where = f'Canonical form {self.name!r}'
    if (self.secure_parameters is None) != (not self.has_secure_sums):
      raise FormError(f'{where}: secure_parameters and secure_sums go '
                      'together; it has one without the other.')
    if not self.has_secure_sums:
      return
    u = self.work.output_spec[0]
    if getattr(u, '_fields', None) != ClientUpdate._fields:
      raise FormError(f'{where}: with secure sums, work must return U as a '
                      f'ClientUpdate(plain, secure), it returns '
                      f'{ft.form_text(u)}.')
    secure = u.secure
    if (not isinstance(secure, tuple) or
        len(secure) != len(self.secure_sums)):
      raise FormError(f'{where}: work sends {ft.form_text(secure)} through '
                      f'the secure sums, expected {len(self.secure_sums)} '
                      'values (one per secure sum).')
    parameters = self.secure_parameters.output_spec
    if not isinstance(parameters, tuple) or len(parameters) != len(secure):
      raise FormError(f'{where}: secure_parameters returns '
                      f'{ft.form_text(parameters)}, expected one structure per '
                      'secure sum.')
    for number, (entry, value, params) in enumerate(
        zip(self.secure_sums, secure, parameters)):
      what = f'{where}: secure sum {number}'
      if entry.kind not in secure_sums_lib.KINDS:
        raise FormError(f'{what}: unknown kind {entry.kind!r}.')
      leaves = tf.nest.flatten(value)
      if not leaves or not all(
          isinstance(leaf, tf.TensorSpec) and leaf.dtype.is_integer and
          leaf.shape.is_fully_defined() for leaf in leaves):
        raise FormError(f'{what} sums {ft.form_text(value)}: only integer '
                        'tensors of fully defined shapes can be summed '
                        'securely.')
      expected = tf.nest.map_structure(
          lambda _: tf.TensorSpec([], tf.int64), value)
      if entry.noise:
        if entry.kind != secure_sums_lib.MODULAR or (
            entry.noise not in secure_sums_lib.client_noise.MECHANISMS):
          raise FormError(f'{what}: client noise {entry.noise!r} on '
                          f'{entry.kind}; only {secure_sums_lib.MODULAR} '
                          'takes noise, of '
                          f'{list(secure_sums_lib.client_noise.MECHANISMS)}.')
        expected = (expected, tf.TensorSpec([], tf.float32))
      if not ft.same_member(params, expected):
        raise FormError(f'{what}: secure_parameters gives '
                        f'{ft.form_text(params)}, expected '
                        f'{ft.form_text(expected)} (one per tensor).')
      if entry.static_parameters is not None and (
          len(entry.static_parameters) != len(leaves)):
        raise FormError(f'{what}: {len(entry.static_parameters)} static '
                        f'parameters for {len(leaves)} tensors.')

  def _check_types(self):
    self._check_shapes()
    self._check_secure_sums()
    s = self.prepare.input_specs[0]
    c = self.prepare.output_spec
    u = self.client_update_spec
    a = self.accumulate.input_specs[0]
    r = self.server_aggregate(self.report.output_spec,
                              self.secure_update_spec)
    takes_s, takes_a = 'prepare takes S =', 'accumulate takes A ='
    checks = [
        ('initialize', 'its result', self.initialize.output_spec, takes_s, s),
        ('update', 'its server state input', self.update.input_specs[0],
         takes_s, s),
        ('update', 'its new server state', self.update.output_spec[0], takes_s,
         s),
        ('work', 'its broadcast input C', self.work.input_specs[1],
         'prepare returns C =', c),
        ('accumulate', 'its client update input U',
         self.accumulate.input_specs[1], 'work returns U =', u),
        ('zero', 'its result', self.zero.output_spec, takes_a, a),
        ('accumulate', 'its result', self.accumulate.output_spec, takes_a, a),
        ('merge', 'its first input', self.merge.input_specs[0], takes_a, a),
        ('merge', 'its second input', self.merge.input_specs[1], takes_a, a),
        ('merge', 'its result', self.merge.output_spec, takes_a, a),
        ('report', 'its input', self.report.input_specs[0], takes_a, a),
        ('update', 'its aggregate input R', self.update.input_specs[1],
         'report returns R =' if not self.has_secure_sums else
         'report and the secure sums give R =', r),
    ]
    if self.has_secure_sums:
      checks.append(('secure_parameters', 'its server state input',
                     self.secure_parameters.input_specs[0], takes_s, s))
    if self.has_client_state:
      y = self.work.input_specs[0][1]
      new_state = self.work.output_spec[1]
      if self.has_client_outputs:
        new_state = new_state.client_state
      checks += [
          ('client_state_init', 'its result',
           self.client_state_init.output_spec, 'work takes client state', y),
          ('work', 'its new client state', new_state,
           'work takes client state', y),
      ]
    for piece, what, actual, source, expected in checks:
      if not ft.same_member(actual, expected):
        raise FormError(f'Canonical form {self.name!r}: {piece}: {what} is '
                        f'{ft.form_text(actual)}, but {source} '
                        f'{ft.form_text(expected)}.')

  # TFF 0.87's `MapReduceForm` names. prepare, work, zero, accumulate, merge,
  # report and update are the pieces themselves; TFF's has no initialize
  # (`tff.backends.mapreduce.get_state_initialization_computation`).

  @property
  def type_signature(self):
    """TFF's type of the round the form runs: `(<S@SERVER,{D}@CLIENTS> ->
    <S@SERVER,X@SERVER>)`, with the client state and the per-client outputs
    where the form has them; its parts named as the round names them
    (`<state=...,client_data=...>`), where it does."""
    s = ft.server(self.state_spec)
    parameter = [s, ft.clients(self.client_data_spec)]
    result = [s, ft.server(self.update.output_spec[1])]
    if self.has_client_state:
      parameter.append(ft.clients(self.client_state_spec))
      result.append(ft.clients(self.client_state_spec))
    if self.has_client_outputs:
      result.append(ft.clients(self.client_output_spec))
    return ft.FunctionType(_labelled(parameter, self.parameter_labels),
                           _labelled(result, self.result_labels))

  @property
  def server_state_label(self):
    """The name of the round's server state parameter (None if unnamed)."""
    return (self.parameter_labels or (None,))[0]

  @property
  def client_data_label(self):
    """The name of the round's client data parameter (None if unnamed)."""
    return (self.parameter_labels or (None, None))[1]

  @property
  def has_client_noise(self):
    """Whether a secure sum has each client add its own noise (distributed
    DP), drawn by the runtime from the client's secret."""
    return any(entry.noise for entry in self.secure_sums)

  @property
  def securely_aggregates_tensors(self):
    return self.has_secure_sums

  @property
  def secure_sum_bitwidth(self):
    """`f(state=None)`: the bitwidth of each `federated_secure_sum_bitwidth`
    (per tensor, as its value), in order; `state` is needed only for one
    taking it from the server state (TFF's have none such)."""
    return functools.partial(self._secure_parameters_of,
                             secure_sums_lib.BITWIDTH)

  @property
  def secure_sum_max_input(self):
    """As `secure_sum_bitwidth`, the max_input of each
    `federated_secure_sum`."""
    return functools.partial(self._secure_parameters_of,
                             secure_sums_lib.MAX_INPUT)

  @property
  def secure_modular_sum_modulus(self):
    """As `secure_sum_bitwidth`, the modulus of each
    `federated_secure_modular_sum`."""
    return functools.partial(self._secure_parameters_of,
                             secure_sums_lib.MODULAR)

  def _secure_parameters_of(self, kind, state=None):
    found = []
    for number, entry in enumerate(self.secure_sums):
      if entry.kind != kind:
        continue
      if entry.static_parameters is not None:
        flat = list(entry.static_parameters)
      elif state is None:
        raise FormError(
            f'Canonical form {self.name!r}: secure sum {number} '
            f'({entry.describe()}) takes its parameter from the server '
            'state; pass the state.')
      else:
        given = self.secure_parameters(state)[number]
        flat = [int(p) for p in tf.nest.flatten(
            given[0] if entry.noise else given)]
      found.append(tf.nest.pack_sequence_as(
          self.secure_update_spec[number], flat))
    return tuple(found)

  def bits(self, spec):
    try:
      return structures.bits(spec)
    except ValueError:
      return None

  @property
  def broadcast_bits(self):
    """Bits of C, sent to each client."""
    return self.bits(self.broadcast_spec)

  @property
  def aggregated_bits(self):
    """Bits of U (with any secure part, at its dtype's width), sent by each
    client (None if its size varies)."""
    return self.bits(self.work.output_spec[0])

  def summary(self, print_fn=print):
    lines = [f'CanonicalForm {self.name!r}' +
             (f': {self.description}' if self.description else '')]
    for name, piece in self.pieces.items():
      lines.append(f'  {name:<17} {piece.signature()}')
    lines.append(f'  C (broadcast, per client): '
                 f'{bits_text.human_bits(self.broadcast_bits)}')
    lines.append(f'  U (aggregated, per client): '
                 f'{bits_text.human_bits(self.aggregated_bits)}')
    if self.has_client_state:
      lines.append(f'  client state (kept at each client): '
                   f'{bits_text.human_bits(self.bits(self.client_state_spec))}')
    if self.has_client_outputs:
      lines.append(f'  client outputs (per client, in Y): '
                   f'{ft.form_text(self.client_output_spec)}')
    for number, entry in enumerate(self.secure_sums):
      lines.append(f'  secure sum {number}: {entry.describe()} on '
                   f'{ft.form_text(self.secure_update_spec[number])}')
    for tensor, encoder in self.encoders.items():
      lines.append(f'  encoder {tensor}: {encoder}')
    for release in self.privacy_releases:
      lines.append(f'  differential privacy, each round: {release.describe()}')
    text = '\n'.join(lines)
    if print_fn is not None:
      print_fn(text)
    return text


def _labelled(parts, labels):
  """`parts` as a struct named by `labels`, or unnamed where the labels do
  not name every part."""
  if len(labels) == len(parts) and all(labels):
    return ft.parameter_of(tuple(parts), list(labels))
  return tuple(parts)

