"""Walks over a traced round that the passes share: what `next` returns, and
which ops it needs."""

import tensorflow as tf

from canonical.core.intrinsics import registry


def is_aggregation(op):
  return registry.of(op).aggregates


def is_secure(op):
  return registry.of(op).is_secure


def is_broadcast(op):
  return registry.of(op).role is registry.Role.BROADCAST


def is_boundary(op):
  """Whether a value crosses between server and clients at `op`."""
  return registry.of(op).role is not registry.Role.LOCAL


def client_results(graph, has_client_state):
  """(the new client state, the per-client outputs) of `next`'s result: each
  a structure of values, or None when `next` returns none."""
  result = graph.result
  state = result[2] if has_client_state else None
  first_output = 3 if has_client_state else 2
  outputs = result[first_output] if len(result) > first_output else None
  return state, outputs


def result_roots(graph, has_client_state):
  """(values of server state and metrics, values computed at the clients:
  the new client state and the per-client outputs)."""
  server = tf.nest.flatten(tuple(graph.result[:2]))
  client = [v for part in client_results(graph, has_client_state)
            if part is not None for v in tf.nest.flatten(part)]
  return server, client


def needed_ops(graph, values, stop=lambda op: False):
  """Ops (in trace order) computing `values`, not looking past `stop(op)`."""
  needed, stack = set(), list(values)
  while stack:
    op = stack.pop().producer
    if op is None or id(op) in needed:
      continue
    needed.add(id(op))
    if not stop(op):
      stack.extend(op.inputs)
  return [op for op in graph.ops if id(op) in needed]


def live_ops(graph, has_client_state):
  """The ops the results depend on (dead code is dropped), in trace order."""
  server, client = result_roots(graph, has_client_state)
  return needed_ops(graph, server + client)
