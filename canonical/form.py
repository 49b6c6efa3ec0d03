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

With client state, D = <client data, client state>, Y is the new client state
and `client_state_init` ( -> Y) makes a new client's first state.
"""

import dataclasses

import tensorflow as tf

from canonical import types as ft
from encoders.core import structures

PIECES = ('initialize', 'prepare', 'work', 'zero', 'accumulate', 'merge',
          'report', 'update')


class FormError(TypeError):
  """A canonical form is malformed (pieces whose types do not connect), or a
  form file is unusable; the message names the piece or file and the problem."""


@dataclasses.dataclass
class Piece:
  """One pure TF computation with its input structures and output structure."""
  name: str
  function: object       # Python callable, traced with `input_specs`.
  input_specs: tuple     # One member structure per positional argument.
  _concrete: object = None

  @property
  def concrete_function(self):
    if self._concrete is None:
      self._concrete = tf.function(
          self.function, input_signature=list(self.input_specs),
          autograph=False).get_concrete_function()
    return self._concrete

  @property
  def output_spec(self):
    return tf.nest.map_structure(_spec_of,
                                 self.concrete_function.structured_outputs)

  def __call__(self, *args):
    return self.concrete_function(*args)

  def signature(self):
    inputs = ', '.join(ft.describe(s) for s in self.input_specs)
    return f'({inputs}) -> {ft.describe(self.output_spec)}'

  def op_count(self):
    graph_def = self.concrete_function.graph.as_graph_def()
    return len(graph_def.node) + sum(
        len(f.node_def) for f in graph_def.library.function)


def _spec_of(value):
  if isinstance(value, tf.data.Dataset):
    return tf.data.DatasetSpec.from_value(value)
  return tf.TensorSpec.from_tensor(value)


class CanonicalForm:
  """The eight pieces (and `client_state_init` with client state), type-checked."""

  def __init__(self, initialize, prepare, work, zero, accumulate, merge,
               report, update, client_state_init=None, name='form',
               description='', encoders=None):
    self.initialize = initialize
    self.prepare = prepare
    self.work = work
    self.zero = zero
    self.accumulate = accumulate
    self.merge = merge
    self.report = report
    self.update = update
    self.client_state_init = client_state_init
    self.name = name
    self.description = description
    self.encoders = dict(encoders or {})
    self._check_types()

  @property
  def pieces(self):
    pieces = {name: getattr(self, name) for name in PIECES}
    if self.client_state_init is not None:
      pieces['client_state_init'] = self.client_state_init
    return pieces

  @property
  def has_client_state(self):
    return self.client_state_init is not None

  @property
  def state_spec(self):
    return self.initialize.output_spec

  @property
  def broadcast_spec(self):
    """C: what every sampled client receives."""
    return self.prepare.output_spec

  @property
  def client_update_spec(self):
    """U: what every client sends."""
    return self.work.output_spec[0]

  @property
  def client_data_spec(self):
    data = self.work.input_specs[0]
    return data[0] if self.has_client_state else data

  @property
  def client_state_spec(self):
    return self.client_state_init.output_spec if self.has_client_state else None

  def _check_types(self):
    s = self.initialize.output_spec
    checks = [
        ('prepare', 'its input', self.prepare.input_specs[0], s),
        ('update', 'its server state input', self.update.input_specs[0], s),
        ('update', 'its new server state', self.update.output_spec[0], s),
        ('work', 'its broadcast input C', self.work.input_specs[1],
         self.prepare.output_spec),
        ('accumulate', 'its client update input U',
         self.accumulate.input_specs[1], self.work.output_spec[0]),
    ]
    a = self.accumulate.input_specs[0]
    checks += [
        ('zero', 'its accumulator', self.zero.output_spec, a),
        ('accumulate', 'its result', self.accumulate.output_spec, a),
        ('merge', 'its first input', self.merge.input_specs[0], a),
        ('merge', 'its second input', self.merge.input_specs[1], a),
        ('merge', 'its result', self.merge.output_spec, a),
        ('report', 'its input', self.report.input_specs[0], a),
        ('update', 'its aggregate input R', self.update.input_specs[1],
         self.report.output_spec),
    ]
    if self.has_client_state:
      y = self.client_state_init.output_spec
      checks += [
          ('work', 'its client state input', self.work.input_specs[0][1], y),
          ('work', 'its new client state', self.work.output_spec[1], y),
      ]
    for piece, what, actual, expected in checks:
      if not ft.same_member(actual, expected):
        raise FormError(f'Canonical form {self.name!r}: {piece}: {what} has '
                        f'type {ft.describe(actual)}, expected '
                        f'{ft.describe(expected)}.')

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
    """Bits of U, sent by each client (None if its size varies)."""
    return self.bits(self.client_update_spec)

  def summary(self, print_fn=print):
    lines = [f'CanonicalForm {self.name!r}' +
             (f': {self.description}' if self.description else '')]
    for name, piece in self.pieces.items():
      lines.append(f'  {name:<17} {piece.signature()}')
    lines.append(f'  C (broadcast, per client): {_human_bits(self.broadcast_bits)}')
    lines.append(f'  U (aggregated, per client): '
                 f'{_human_bits(self.aggregated_bits)}')
    for tensor, encoder in self.encoders.items():
      lines.append(f'  encoder {tensor}: {encoder}')
    text = '\n'.join(lines)
    if print_fn is not None:
      print_fn(text)
    return text


def _human_bits(bits):
  if bits is None:
    return 'varies'
  for unit, size in (('Gbit', 1e9), ('Mbit', 1e6), ('kbit', 1e3)):
    if bits >= size:
      return f'{bits} bits ({bits / size:.2f} {unit})'
  return f'{bits} bits'
