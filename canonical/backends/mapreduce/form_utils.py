"""TFF 0.87's entry points to the form: a round (`(<S@SERVER,{D}@CLIENTS> ->
<S@SERVER,X@SERVER>)`) to a `MapReduceForm`, and an initialize to the
computation that makes the first state.

TFF's `MapReduceForm` has no initialize: a backend gets the first state from
`get_state_initialization_computation(initialize)` and the rounds from
`get_map_reduce_form_for_computation(next)`, two separate calls. Ours (the
`CanonicalForm`) carries an initialize piece, since the Beam runner starts a
run from it. Made from a round alone, that piece gives the zeros of S (a
dimension S leaves unknown is empty) and the form's description says so;
given a whole `IterativeProcess` instead, the form has its real initialize,
as `canonical.compile` gives it.
"""

import collections

import tensorflow as tf

from canonical import compiler
from canonical.core import computations
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical import form as form_lib
from canonical.templates import iterative_process

_SHAPE = '(<S@SERVER,{D}@CLIENTS> -> <S@SERVER,X@SERVER>)'
ZEROS_NOTE = ('made from the round alone: initialize gives zeros of S; '
               'start from get_state_initialization_computation(initialize)()')


# TFF's default Grappler configuration is a ConfigProto; any ConfigProto is
# accepted and has no effect here (the pieces are traced tf.functions, which
# TensorFlow optimizes when it runs them).
GRAPPLER_DEFAULT_CONFIG = tf.compat.v1.ConfigProto()


def get_map_reduce_form_for_computation(
    comp, grappler_config=GRAPPLER_DEFAULT_CONFIG, *,
    tff_internal_preprocessing=None) -> form_lib.CanonicalForm:
  """The form of `comp`, a federated computation of TFF's MapReduce shape
  (or, beyond TFF, an `IterativeProcess`: then with its initialize, and its
  client state if it keeps one). Raises `FederatedError` naming why the
  form cannot express it."""
  where = 'get_map_reduce_form_for_computation'
  check_options(where, grappler_config, None)
  return form_of(where, comp, tff_internal_preprocessing)


def form_of(where, comp, tff_internal_preprocessing=None):
  """The compiled form of round `comp` (or an `IterativeProcess`), for the
  entry point `where`."""
  check_options(where, None, tff_internal_preprocessing)
  process = _as_process(where, comp)
  if isinstance(comp, iterative_process.IterativeProcess):
    return compiler.compile(process)
  return compiler.compile(process, description=ZEROS_NOTE)


def labels_of(struct_type):
  """The element names of a struct type (a round's parameter or result),
  or () where it names none."""
  fields = getattr(struct_type, '_fields', None)
  if fields:
    return tuple(fields)
  if isinstance(struct_type, dict):
    return tuple(struct_type)
  as_dict = getattr(struct_type, '_asdict', None)
  return tuple(as_dict()) if callable(as_dict) else ()


def check_computation_compatible_with_map_reduce_form(
    comp, *, tff_internal_preprocessing=None):
  """Raises `FederatedError` naming why `comp` has no form (its signature,
  an impure computation, a broadcast of an aggregated value, ...); returns
  its checked trace (an `ir.Graph`, our counterpart of TFF's building
  block)."""
  where = 'check_computation_compatible_with_map_reduce_form'
  check_options(where, None, tff_internal_preprocessing)
  process = _as_process(where, comp)
  graph = process.next.trace()
  compiler.check(process, graph)
  compiler.partition(graph, process.has_client_state)
  return graph


def get_state_initialization_computation(
    initialize_computation, grappler_config=GRAPPLER_DEFAULT_CONFIG):
  """The tf_computation `( -> S)` making the first server state, from a
  federated `initialize` of type `( -> S@SERVER)` (or, beyond TFF, a
  tf_computation with no parameter, which is that already). As TFF's, it
  gives the state in OrderedDicts and tuples (the pieces, a process's
  `next` and its tf_computations take those for its own classes)."""
  where = 'get_state_initialization_computation'
  check_options(where, grappler_config, None)
  comp = initialize_computation
  federated = getattr(comp, 'federated', None)
  if isinstance(federated, computations.FederatedComputation):
    comp = federated  # A process's `initialize`: the one written.
  if isinstance(comp, computations.FederatedComputation):
    result = comp.trace().result
    leaves = tf.nest.flatten(result)
    if comp.parameter_types or not leaves or any(
        v.placement != ft.SERVER for v in leaves):
      raise errors.FederatedError(
          f'{where}: {comp.describe_for_error()} has type '
          f'{comp.type_signature}; initialize must take no parameter and '
          'return the server state placed at SERVER, ( -> S@SERVER).')
    server, _ = iterative_process.initialize_at_server(comp, comp.location)
    make_state = server.python_function
    initialize = computations.TFComputation(
        lambda: as_tff_containers(make_state()), (), name=comp.name,
        location=comp.location)
    for op, computation in compiler.computations_of(comp.trace()):
      computation.check_pure(used_by=f'{op.describe()} in initialize')
    return initialize
  if isinstance(comp, computations.TFComputation) and not (
      comp.parameter_specs):
    comp.check_pure(used_by=where)
    return comp
  raise errors.FederatedError(
      f'{where}: expected an initialize computation ( -> S@SERVER), a '
      'federated_computation with no parameter, got '
      f'{naming.describe_object(initialize_computation)}.')


def as_tff_containers(value):
  """`value` in the containers TFF 0.87 gives a computation's result in once
  it is lowered to TensorFlow: OrderedDicts for named parts (a namedtuple
  such as the learning state, a dict), tuples for unnamed ones."""
  if isinstance(value, dict):
    return collections.OrderedDict(
        (k, as_tff_containers(v)) for k, v in value.items())
  fields = getattr(value, '_fields', None)
  if isinstance(value, tuple) and fields is not None:
    return collections.OrderedDict(
        (k, as_tff_containers(v)) for k, v in zip(fields, value))
  if isinstance(value, (list, tuple)):
    return tuple(as_tff_containers(v) for v in value)
  return value


def check_options(where, grappler_config, preprocessing):
  if grappler_config is not None and not isinstance(
      grappler_config, tf.compat.v1.ConfigProto):
    raise errors.InvalidTypeError(
        f'{where}: grappler_config must be a tf.compat.v1.ConfigProto, got '
        f'{naming.describe_object(grappler_config)}.')
  if preprocessing is not None:
    raise errors.InvalidValueError(
        f'{where}: tff_internal_preprocessing transforms TFF\'s internal '
        'building blocks, which do not exist here; transform the Python '
        'computation instead.')


def _as_process(where, comp):
  """`comp` as the process the compiler takes."""
  if isinstance(comp, iterative_process.IterativeProcess):
    return comp
  _check_round(where, comp)
  state = comp.parameter_types[0].member
  return iterative_process.IterativeProcess(zeros(where, comp, state), comp)


def server_and_clients_computation(where, comp, shape, server, clients,
                                   hint='', alternative=''):
  """`comp`'s description for errors, once it is a federated_computation of
  two parameters, `server` at SERVER and `clients` at CLIENTS (the forms'
  shape `shape`); `hint` follows a three-parameter one's error."""
  if not isinstance(comp, computations.FederatedComputation):
    raise errors.FederatedError(
        f'{where}: expected a federated_computation of type {shape}'
        f'{alternative}, got {naming.describe_object(comp)}.')
  what = f'{where}: {comp.describe_for_error()}'
  params = comp.parameter_types
  if len(params) != 2 or params[0].placement != ft.SERVER or (
      params[1].placement != ft.CLIENTS):
    shown = ', '.join(str(t) for t in params) or 'none'
    raise errors.FederatedError(
        f'{what} must take two arguments, {server} at SERVER and {clients} '
        f'at CLIENTS, {shape}; its parameters are {shown}'
        f'{hint if len(params) == 3 else ""}.')
  return what


def _check_round(where, comp):
  """TFF's checks of the round's shape, naming `comp`."""
  what = server_and_clients_computation(
      where, comp, _SHAPE, 'the server state', 'the client data',
      hint='; a round keeping client state compiles from its IterativeProcess, '
      'which makes a new client\'s state', alternative=' (or an '
      'IterativeProcess)')
  params = comp.parameter_types
  result = comp.trace().result
  if not isinstance(result, (tuple, list)) or len(result) != 2:
    raise errors.FederatedError(
        f'{what} must return two values (the new server state, the server '
        f'output), {_SHAPE}; it returns {describe_result(result)}.')
  for part, name in zip(result, ('the new server state', 'the server output')):
    for leaf in tf.nest.flatten(part):
      if leaf.placement != ft.SERVER:
        raise errors.FederatedError(
            f'{what} returns {leaf!r} in {name}: both results must be placed '
            'at SERVER (client values reach the server only through an '
            'aggregation).')
  new_state = tf.nest.map_structure(lambda v: v.member, result[0])
  if not ft.same_member(tf.nest.flatten(new_state),
                        tf.nest.flatten(params[0].member)):
    raise errors.FederatedError(
        f'{what} returns a new server state of type '
        f'{ft.describe(new_state)}, but takes the state as {params[0]}.')


def describe_result(result):
  return ft.describe(tf.nest.map_structure(lambda v: v.type_signature,
                                           result))


def zeros(where, comp, state):
  """A tf_computation making zeros of `state` (unknown dimensions empty)."""
  for leaf in tf.nest.flatten(state):
    if not isinstance(leaf, tf.TensorSpec):
      raise errors.FederatedError(
          f'{where}: {comp.describe_for_error()} keeps {ft.describe(leaf)} in '
          'its server state; a form\'s state is tensors.')

  def zero(spec):
    if spec.shape.rank is None:
      return tf.zeros([], spec.dtype)
    return tf.zeros([d or 0 for d in spec.shape.as_list()], spec.dtype)

  def make_zeros():
    return tf.nest.map_structure(zero, state)

  return computations.TFComputation(
      make_zeros, (), name=f'zeros_of_{comp.name}', location=comp.location)
