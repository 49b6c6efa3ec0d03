"""TFF 0.87's `consolidate_and_extract_local_processing` and
`parse_tff_to_tf`: a computation that stays at one place, made one
TensorFlow computation, as the compiler makes each piece of a form.

TFF takes its internal building blocks here; ours are the traced graphs of
federated computations, so both take a computation: a federated
computation whose every value is at one place (only `federated_map`,
`federated_apply`, `federated_zip`, `federated_value`/`federated_eval` and
selections, no broadcast or aggregation), or a tf_computation. The result
is a tf_computation of the same type with the placement stripped:
`(T@p -> U@p)` becomes `(T -> U)`, `U@p` with no parameter `( -> U)`.
"""

import tensorflow as tf

from canonical import compiler
from canonical.compiler import graph_walk
from canonical.core import computations
from canonical.core import evaluation
from canonical.core import ir
from canonical.core import naming
from canonical import errors


def _check_config(where, grappler_config_proto):
  if not isinstance(grappler_config_proto, tf.compat.v1.ConfigProto):
    raise errors.InvalidTypeError(
        f'{where}: grappler_config_proto must be a tf.compat.v1.ConfigProto, '
        f'got {naming.describe_object(grappler_config_proto)}.')


def _local(where, comp):
  """`comp`, a federated computation at one place, as a tf_computation."""
  graph = comp.trace()
  what = f'{where}: {comp.describe_for_error()}'
  placements = {v.placement for v in graph.parameters}
  for op in graph.ops:
    if graph_walk.is_boundary(op):
      raise errors.FederatedError(
          f'{what} holds {op.describe()}: only processing at one place '
          'becomes one TensorFlow computation (a form\'s pieces are split '
          'at broadcasts and aggregations by get_map_reduce_form_for_'
          'computation).')
    placements.add(op.output.placement)
  placements.update(v.placement for v in graph.result_values())
  placements.discard(None)
  if len(placements) > 1:
    raise errors.FederatedError(
        f'{what} has values at {" and ".join(sorted(map(str, placements)))}; '
        'its processing must stay at one place.')
  for _, computation in compiler.computations_of(graph):
    computation.check_pure(used_by=f'{where} of {comp.name!r}')

  def consolidated(*args):
    env = {id(p): a for p, a in zip(graph.parameters, args)}
    evaluation.evaluate(graph.ops, env)
    return tf.nest.map_structure(
        lambda v: (v.computation.invoke() if isinstance(v, ir.Unplaced)
                   else env[id(v)]), graph.result)

  return computations.TFComputation(
      consolidated, tuple(v.member for v in graph.parameters),
      name=comp.name, location=comp.location)


def consolidate_and_extract_local_processing(comp, grappler_config_proto):
  """`comp`, a federated computation at one place (SERVER or CLIENTS), as
  one tf_computation: `(T@p -> U@p)` as `(T -> U)`. FederatedError naming
  what crosses places or mixes them. `grappler_config_proto` (a ConfigProto)
  is accepted and has no effect: TensorFlow optimizes the traced function
  when it runs."""
  where = 'consolidate_and_extract_local_processing'
  _check_config(where, grappler_config_proto)
  if not isinstance(comp, computations.FederatedComputation):
    raise errors.InvalidTypeError(
        f'{where}: expected a federated_computation at one place, got '
        f'{naming.describe_object(comp)}.')
  return _local(where, comp)


def parse_tff_to_tf(comp, grappler_config_proto):
  """`comp` as one tf_computation: a tf_computation as it is, a federated
  computation at one place as `consolidate_and_extract_local_processing`
  makes it."""
  where = 'parse_tff_to_tf'
  _check_config(where, grappler_config_proto)
  if isinstance(comp, computations.TFComputation):
    return comp
  if isinstance(comp, computations.FederatedComputation):
    return _local(where, comp)
  raise errors.InvalidTypeError(
      f'{where}: expected a computation, got {naming.describe_object(comp)}.')
