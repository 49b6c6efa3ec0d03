"""TFF's `compose_dataset_computation_with_*`: a computation or process
whose clients receive something small (a client id, say) and make their
data set from it with a dataset computation, such as
`ClientData.dataset_computation`. The driver then sends ids, not examples,
and the compiled form makes each client's data in its `work` piece.
"""

import copy
import inspect

import tensorflow as tf

from canonical.core import computations
from canonical.core.intrinsics import federated_map
from canonical.core import types as ft
from canonical import errors
from canonical.templates import iterative_process


class SequenceTypeNotFoundError(errors.Error, TypeError):
  """The computation has no client data set parameter to feed."""


class SequenceTypeNotAssignableError(errors.Error, TypeError):
  """The dataset computation makes data sets of another element type."""


def _check_dataset_computation(dataset_computation, where):
  """The (parameter, result) specs of a `(T -> U*)` tf_computation."""
  if not isinstance(dataset_computation, computations.TFComputation):
    raise errors.InvalidTypeError(
        f'{where}: dataset_computation must be a tf_computation (T -> U*), '
        f'such as ClientData.dataset_computation; got '
        f'{type(dataset_computation).__name__}.')
  if len(dataset_computation.parameter_specs) != 1:
    raise errors.InvalidTypeError(
        f'{where}: dataset_computation must take one argument (what each '
        f'client receives); {dataset_computation.describe_for_error()} takes '
        f'{len(dataset_computation.parameter_specs)}.')
  result = dataset_computation.result_spec
  if not isinstance(result, tf.data.DatasetSpec):
    raise errors.InvalidTypeError(
        f'{where}: dataset_computation must return a tf.data.Dataset; '
        f'{dataset_computation.describe_for_error()} returns '
        f'{ft.describe(result)}.')
  return dataset_computation.parameter_specs[0], result


def compose_dataset_computation_with_computation(dataset_computation,
                                                 computation_body):
  """`computation_body` with its one client data set parameter `{U*}@CLIENTS`
  taking `{T}@CLIENTS` instead, mapped through `dataset_computation`."""
  where = 'compose_dataset_computation_with_computation'
  argument_spec, dataset_spec = _check_dataset_computation(
      dataset_computation, where)
  if not isinstance(computation_body, computations.FederatedComputation):
    raise errors.InvalidTypeError(
        f'{where}: computation_body must be a federated_computation, got '
        f'{type(computation_body).__name__}.')
  types = list(computation_body.parameter_types)
  sequences = [i for i, t in enumerate(types)
               if t.placement == ft.CLIENTS and
               isinstance(t.member, tf.data.DatasetSpec)]
  if not sequences:
    raise SequenceTypeNotFoundError(
        f'{where}: {computation_body.describe_for_error()} has no parameter '
        'of client data sets ({U*}@CLIENTS) to make from '
        f'{ft.describe(argument_spec)}; its parameters are '
        f'{", ".join(str(t) for t in types)}.')
  fitting = [i for i in sequences
             if ft.same_member(types[i].member, dataset_spec)]
  if not fitting:
    raise SequenceTypeNotAssignableError(
        f'{where}: dataset_computation makes {ft.describe(dataset_spec)}, but '
        f'{computation_body.describe_for_error()} takes '
        f'{", ".join(str(types[i]) for i in sequences)}.')
  if len(fitting) > 1:
    raise errors.InvalidTypeError(
        f'{where}: {computation_body.describe_for_error()} has '
        f'{len(fitting)} parameters of type {types[fitting[0]]}; which one to '
        'make from the dataset computation is ambiguous.')
  index = fitting[0]
  types[index] = ft.clients(argument_spec)

  def composed(*args):
    args = list(args)
    args[index] = federated_map(dataset_computation, args[index])
    return computation_body(*args)

  names = [p.name for p in computation_body.trace().parameters]
  composed.__signature__ = inspect.Signature([
      inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
      for n in names])
  return computations.FederatedComputation(
      composed, types, name=computation_body.name,
      location=computation_body.location)


def _check_process(process, where):
  if not (callable(getattr(process, 'initialize', None)) and isinstance(
      getattr(process, 'next', None), computations.FederatedComputation)):
    raise errors.InvalidTypeError(
        f'{where}: process must be an IterativeProcess (initialize, and next '
        f'a federated_computation); got {type(process).__name__}.')
  state_spec = getattr(process, 'state_spec', None)
  if state_spec is not None and ft.has_dataset(state_spec):
    raise errors.InvalidTypeError(
        f'{where}: the process\'s initialize returns a data set '
        f'({ft.describe(state_spec)}); only client data can be made by a '
        'dataset computation.')


def compose_dataset_computation_with_iterative_process(dataset_computation,
                                                       process):
  """An `IterativeProcess` like `process` whose `next` takes, in place of
  its client data sets, what `dataset_computation` makes them from."""
  where = 'compose_dataset_computation_with_iterative_process'
  _check_dataset_computation(dataset_computation, where)
  _check_process(process, where)
  next_fn = compose_dataset_computation_with_computation(dataset_computation,
                                                         process.next)
  return iterative_process.IterativeProcess(
      process.initialize, next_fn,
      client_state_initializer=getattr(process, 'client_state_initializer',
                                       None),
      encoders=getattr(process, 'encoders', None))


def compose_dataset_computation_with_learning_process(dataset_computation,
                                                      process):
  """As `compose_dataset_computation_with_iterative_process`, keeping the
  process's other attributes (`get_model_weights`, ...): a copy of it with
  the composed `next`."""
  where = 'compose_dataset_computation_with_learning_process'
  _check_dataset_computation(dataset_computation, where)
  _check_process(process, where)
  composed = copy.copy(process)
  try:
    composed.next = compose_dataset_computation_with_computation(
        dataset_computation, process.next)
  except AttributeError as e:
    raise errors.InvalidTypeError(
        f'{where}: cannot give a {type(process).__name__} another next '
        f'({e}); use compose_dataset_computation_with_iterative_process.'
    ) from None
  return composed
