"""`run_round`: a plain local loop over a canonical form's pieces.

prepare -> work per client -> zero/accumulate over groups of clients -> merge
the groups' accumulators in a tree -> report -> update. The grouping and the
merge tree are drawn from `merge_seed`, so tests can check that a form's result
does not depend on how the aggregation tier happens to combine clients.
A form's secure sums run the masking protocol of `canonical.secagg`, all
parties in this process.
"""

from typing import Sequence

import numpy as np

from canonical import errors
from canonical import form as form_lib
from canonical.core import unrolled_datasets
from canonical.executors import batched_work
from canonical.secagg import sums as secure_sums


def run_round(form: form_lib.CanonicalForm, state, client_data: Sequence,
              client_states: Sequence | None = None,
              merge_seed: int | None = None,
              secure_threshold: int | None = None,
              secure_seed: int | None = None,
              secure_neighbors: 'int | str | None' = None) -> tuple:
  """Runs one round: `(state, metrics)`, then the new `client_states` if the
  form keeps client state, then the `client_outputs` (one per client) if its
  work returns per-client outputs: as `next` returns them.

  `client_data` holds one entry per participating client (a tf.data.Dataset
  or the list of its elements, or `unrolled_datasets.Encoded` ones, or
  tensors, as the form's D says); given as element lists, a plain round's clients run in one call
  (`batched_work`), to the same result. `client_states` one state per client when the
  form keeps client state (None for a client new to the round: the form's
  `client_state_init` makes its state). With `merge_seed`, clients are split into random
  groups whose accumulators merge in a random binary tree; otherwise they fold
  in order. Secure sums need `secure_threshold` surviving clients (default:
  a majority); `secure_seed` makes their masks reproducible (tests only);
  `secure_neighbors=k` masks each client with k ring neighbors only
  (SecAgg+, `canonical.secagg.graph`) instead of with every other client.
  """
  client_data = list(client_data)
  if form.has_client_state:
    client_states = list(client_states if client_states is not None else
                         [None] * len(client_data))
    if len(client_states) != len(client_data):
      raise errors.InvalidValueError(
          'run_round: a form with client state needs one client '
          f'state per client: {len(client_data)} clients, '
          f'{len(client_states)} states.')
    client_states = [form.client_state_init() if s is None else s
                     for s in client_states]
  elif client_states is not None:
    raise errors.InvalidValueError(
        f'run_round: form {form.name!r} keeps no client state, '
        'but client_states were given.')
  broadcast = form.prepare(state)
  batched = merge_seed is None and client_data and all(
      isinstance(d, (list, tuple, unrolled_datasets.Encoded))
      for d in client_data) and batched_work.BatchedWork.of(form)
  if batched:  # One call for all clients: the same accumulator.
    aggregate, _ = batched(None, broadcast, client_data)
    new_state, metrics = form.update(
        state, form.server_aggregate(form.report(aggregate), ()))
    return new_state, metrics
  updates, secure, new_client_states, client_outputs = [], [], [], []
  for i, data in enumerate(client_data):
    d = (data, client_states[i]) if form.has_client_state else data
    try:
      update, y = form.work(d, broadcast)
    except errors.InvalidTypeError as e:  # A misfit: name the client.
      raise errors.InvalidTypeError(f'client {i}: {e}') from None
    plain, secure_part = form.split_update(update)
    updates.append(plain)
    secure.append(secure_part)
    client_state, outputs = form.split_client_result(y)
    new_client_states.append(client_state)
    client_outputs.append(outputs)
  aggregate = form.report(_aggregate(form, updates, merge_seed))
  secure_results = ()
  if form.has_secure_sums:
    parameters, stddevs = secure_sums.round_parameters(
        form.secure_sums, form.secure_parameters(state))
    secure_results, _ = secure_sums.masked_sum(
        form.secure_sums, parameters, secure, form.secure_update_spec,
        threshold=secure_threshold, seed=secure_seed,
        neighbors=secure_neighbors, stddevs=stddevs)
  new_state, metrics = form.update(
      state, form.server_aggregate(aggregate, secure_results))
  result = (new_state, metrics)
  if form.has_client_state:
    result += (new_client_states,)
  if form.has_client_outputs:
    result += (client_outputs,)
  return result


def _aggregate(form, updates, merge_seed):
  if merge_seed is None:
    accumulator = form.zero()
    for update in updates:
      accumulator = form.accumulate(accumulator, update)
    return accumulator
  rng = np.random.default_rng(merge_seed)
  order = rng.permutation(len(updates))
  num_groups = int(rng.integers(1, max(len(updates), 1) + 1))
  groups = np.array_split(order, num_groups)
  accumulators = []
  for group in groups:
    accumulator = form.zero()
    for i in group:
      accumulator = form.accumulate(accumulator, updates[i])
    accumulators.append(accumulator)
  while len(accumulators) > 1:  # Merge random pairs: a random binary tree.
    i, j = sorted(rng.choice(len(accumulators), 2, replace=False))
    merged = form.merge(accumulators[i], accumulators[j])
    accumulators = [a for k, a in enumerate(accumulators) if k not in (i, j)]
    accumulators.append(merged)
  return accumulators[0]
