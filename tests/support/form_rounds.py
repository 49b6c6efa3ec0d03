"""Rounds of a form run locally (`canonical.run_round`) with fixed seeds, as
tests that compare two forms, or a form and a record, run them."""

import numpy as np
import tensorflow as tf

import canonical as cf


def round_outputs(form, clients, rounds=2):
  """Each round's `run_round` output: (state, metrics) and, with client
  state, the clients' new states."""
  state, client_states, results = form.initialize(), None, []
  for _ in range(rounds):
    kwargs = dict(merge_seed=1)
    if form.has_secure_sums:
      kwargs['secure_seed'] = 5
    if form.has_client_state:
      kwargs['client_states'] = client_states
    out = cf.run_round(form, state, clients(), **kwargs)
    state = out[0]
    if form.has_client_state:
      client_states = out[2]
    results.append(out)
  return results


def run_rounds(form, clients, rounds=2):
  """Every leaf of each round's results (state, metrics and, with client
  state, the clients' new states), flattened to numpy arrays."""
  return [np.asarray(x) for x in tf.nest.flatten(
      round_outputs(form, clients, rounds))]
