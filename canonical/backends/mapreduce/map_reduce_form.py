"""TFF 0.87's `MapReduceForm`: the canonical form under TFF's name, also
built as TFF builds one, from the round's type and ten tf_computations:

  MapReduceForm(type_signature, prepare, work, zero, accumulate, merge,
                report, secure_sum_bitwidth, secure_sum_max_input,
                secure_modular_sum_modulus, update)

TFF's `work` returns `<U, bitwidth values, max_input values, modular
values>` and its `update` takes `<S, <R, their three sums>>`; the three
`secure_*` computations (no parameter) give each secure sum's parameter.
The form made from them is a `CanonicalForm` like any other (its `work`
returns `<U, Y>`, the secure values in `U.secure`), so it compiles, saves
and runs on Beam. TFF's form has no initialize: this one's makes zeros of
S, as a form made from a round alone does.

Every canonical form is a `MapReduceForm` (`isinstance` says so), whatever
made it: the compiler, `tff.load`, or this constructor.
"""

import functools

import tensorflow as tf

from canonical.backends.mapreduce import form_utils
from canonical.core import computations
from canonical.core import naming
from canonical import errors
from canonical import form as form_lib
from canonical.secagg import sums as secure_sums_lib

_KINDS = (secure_sums_lib.BITWIDTH, secure_sums_lib.MAX_INPUT,
          secure_sums_lib.MODULAR)
_WHERE = 'MapReduceForm'


class _AnyCanonicalForm(type):
  """`isinstance(form, MapReduceForm)` for every canonical form."""

  def __instancecheck__(cls, instance):
    return isinstance(instance, form_lib.CanonicalForm)

  def __subclasscheck__(cls, subclass):
    return isinstance(subclass, type) and issubclass(
        subclass, form_lib.CanonicalForm)


def _computation(label, comp, arity):
  """`comp` (a typed tf_computation) as `(call, parameter specs)`, its
  parameters spread to `arity` (TFF's struct parameter <A, U> may be one
  parameter of a pair)."""
  if not isinstance(comp, computations.TFComputation):
    raise errors.InvalidTypeError(
        f'{_WHERE}: {label} must be a typed tensorflow.computation, got '
        f'{naming.describe_object(comp)}.')
  specs = comp.parameter_specs
  if len(specs) == arity:
    return comp.invoke, specs
  if len(specs) == 1 and isinstance(specs[0], (tuple, list)) and len(
      specs[0]) == arity:
    return (lambda *args: comp.invoke(tuple(args))), tuple(specs[0])
  raise errors.InvalidTypeError(
      f'{_WHERE}: {label} must take {arity} parameter(s); '
      f'{comp.describe_for_error()} has type {comp.type_signature}.')


def _per_tensor(label, parameters, values):
  """One int parameter per tensor of `values` (one given for all of them
  is repeated, as TFF takes it)."""
  flat = [int(p) for p in tf.nest.flatten(parameters)]
  count = len(tf.nest.flatten(values))
  if len(flat) == 1 and count > 1:
    flat *= count
  if len(flat) != count:
    raise errors.InvalidTypeError(
        f'{_WHERE}: {label} gives {len(flat)} parameters for {count} '
        'tensors of work\'s secure values.')
  return tuple(flat)


def _aggregate_spec(kinds, report, aggregate_spec):
  """R as the update piece takes it: report's result, with the secure sums
  (from update's parameter `aggregate_spec`) if any."""
  if not kinds:
    return report.result_spec
  return form_lib.ServerAggregate(report.result_spec, tuple(
      aggregate_spec[1 + _KINDS.index(kind)] for kind in kinds))


class MapReduceForm(form_lib.CanonicalForm, metaclass=_AnyCanonicalForm):
  """The canonical form, made from TFF's pieces (see the module
  docstring)."""

  def __init__(self, type_signature, prepare, work, zero, accumulate, merge,
               report, secure_sum_bitwidth, secure_sum_max_input,
               secure_modular_sum_modulus, update):
    prepare_fn, (state_spec,) = _computation('prepare', prepare, 1)
    work_fn, work_specs = _computation('work', work, 2)
    zero_fn, _ = _computation('zero', zero, 0)
    accumulate_fn, accumulate_specs = _computation('accumulate', accumulate,
                                                   2)
    merge_fn, merge_specs = _computation('merge', merge, 2)
    report_fn, report_specs = _computation('report', report, 1)
    update_fn, (_, aggregate_spec) = _computation('update', update, 2)
    secure = {}  # kind -> (computation, its static parameters)
    work_result = work.result_spec
    if not isinstance(work_result, (tuple, list)) or len(work_result) != 4:
      raise errors.InvalidTypeError(
          f'{_WHERE}: work must return <U, bitwidth values, max_input values, '
          f'modular values>; {work.describe_for_error()} has type '
          f'{work.type_signature}.')
    for slot, (kind, comp) in enumerate(zip(_KINDS, (
        secure_sum_bitwidth, secure_sum_max_input,
        secure_modular_sum_modulus)), 1):
      label = f'secure_{secure_sums_lib.PARAMETER_NAMES[kind]}'
      _computation(label, comp, 0)
      values = work_result[slot]
      if tf.nest.flatten(values):
        secure[kind] = _per_tensor(label, comp(), values)
    kinds = [kind for kind in _KINDS if kind in secure]
    self._tff_secure_computations = dict(zip(_KINDS, (
        secure_sum_bitwidth, secure_sum_max_input,
        secure_modular_sum_modulus)))

    def work_piece(data, context):
      u, *secure_values = work_fn(data, context)
      if not kinds:
        return u, ()
      return form_lib.ClientUpdate(u, tuple(
          value for kind, value in zip(_KINDS, secure_values)
          if kind in secure)), ()

    def update_piece(state, aggregate):
      if kinds:
        sums = dict(zip(kinds, aggregate.secure))
        aggregate = aggregate.plain
      else:
        sums = {}
      parts = [sums.get(kind, empty) for kind, empty in
               zip(_KINDS, work_result[1:])]
      new_state, output = update_fn(state, (aggregate, *parts))
      return new_state, output

    def secure_parameters(state):
      del state  # TFF's parameters are constants.
      return tuple(
          tf.nest.pack_sequence_as(
              work_result[1 + _KINDS.index(kind)],
              [tf.constant(p, tf.int64) for p in secure[kind]])
          for kind in kinds)

    piece = form_lib.Piece
    zeros = form_utils.zeros(_WHERE, prepare, state_spec)
    pieces = dict(
        initialize=piece('initialize', zeros.invoke, ()),
        prepare=piece('prepare', prepare_fn, (state_spec,)),
        work=piece('work', work_piece, work_specs),
        zero=piece('zero', zero_fn, ()),
        accumulate=piece('accumulate', accumulate_fn, accumulate_specs),
        merge=piece('merge', merge_fn, merge_specs),
        report=piece('report', report_fn, report_specs),
        update=piece('update', update_piece,
                     (state_spec, _aggregate_spec(kinds, report,
                                                  aggregate_spec))))
    if kinds:
      pieces['secure_parameters'] = piece('secure_parameters',
                                          secure_parameters, (state_spec,))
    try:
      super().__init__(
          name='map_reduce_form', description=form_utils.ZEROS_NOTE,
          secure_sums=[secure_sums_lib.SecureSum(kind, secure[kind])
                       for kind in kinds],
          parameter_labels=form_utils.labels_of(
              getattr(type_signature, 'parameter', None)),
          result_labels=form_utils.labels_of(
              getattr(type_signature, 'result', None)),
          **pieces)
    except form_lib.FormError as e:
      raise errors.InvalidTypeError(f'{_WHERE}: the pieces do not connect: '
                                    f'{e}') from None
    if str(self.type_signature) != str(type_signature):
      raise errors.InvalidTypeError(
          f'{_WHERE}: type_signature is {type_signature}, but the pieces '
          f'make a round of type {self.type_signature}.')

  def _tff_secure(self, kind):
    return self._tff_secure_computations[kind]

  secure_sum_bitwidth = property(
      functools.partial(_tff_secure, kind=secure_sums_lib.BITWIDTH),
      doc='TFF\'s computation giving the bitwidths.')
  secure_sum_max_input = property(
      functools.partial(_tff_secure, kind=secure_sums_lib.MAX_INPUT),
      doc='TFF\'s computation giving the max_inputs.')
  secure_modular_sum_modulus = property(
      functools.partial(_tff_secure, kind=secure_sums_lib.MODULAR),
      doc='TFF\'s computation giving the moduli.')
