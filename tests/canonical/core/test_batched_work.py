"""Many clients in one call (`canonical.executors.batched_work`): the same
round as one call per client, bit for bit (on Beam:
tests/beam_runner/test_batched_work_beam.py)."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.executors import batched_work
from regression_process import BATCH, clients as _clients, dataset as _dataset
from regression_process import DATA, W, regression_process as _regression_process
from regression_process import same as _same

@pytest.mark.parametrize('saved', [False, True])
def test_element_lists_run_in_one_call_to_the_per_client_result(
    tmp_path, saved):
  form = cf.compile(_regression_process())
  if saved:
    cf.save(form, str(tmp_path / 'form.pb'))
    form = cf.load(str(tmp_path / 'form.pb'))
  assert batched_work.BatchedWork.of(form) is not None
  clients = list(_clients(12).values())
  by_dataset = by_elements = form.initialize()
  for _ in range(3):
    by_dataset, loss = cf.run_round(form, by_dataset,
                                    [_dataset(c) for c in clients])
    by_elements, same_loss = cf.run_round(form, by_elements, clients)
    assert _same(by_elements, by_dataset) and _same(same_loss, loss)


def test_a_client_with_a_non_finite_update_is_skipped_under_drop():
  form = cf.compile(_regression_process())
  clients = list(_clients(5).values())
  clients[2] = [(np.full((2, 2), np.nan, np.float32), np.zeros(2, np.float32))]
  broadcast = form.prepare(form.initialize())
  accumulator, ok = batched_work.BatchedWork.of(form, 'drop')(
      None, broadcast, clients)
  assert ok.tolist() == [True, True, False, True, True]
  expected = form.zero()
  for client in clients[:2] + clients[3:]:
    expected = form.accumulate(expected, form.work(_dataset(client),
                                                   broadcast)[0])
  assert _same(accumulator, expected)
  kept, ok = batched_work.BatchedWork.of(form, 'keep')(None, broadcast,
                                                       clients)
  assert ok.all() and any(np.isnan(a).any() for a in tf.nest.flatten(kept))
  none, ok = batched_work.BatchedWork.of(form, 'drop')(None, broadcast,
                                                       clients[2:3])
  assert none is None and ok.tolist() == [False]


def test_forms_whose_clients_keep_something_are_not_batched():
  state = tf.TensorSpec([], tf.int32)

  @cf.tf_computation(DATA, state, W)
  def count(data, seen, weights):
    del data
    return weights, seen + 1

  @cf.federated_computation(cf.server(W), cf.clients(DATA), cf.clients(state))
  def next_fn(weights, data, seen):
    delta, new_seen = cf.federated_map(
        count, (data, seen, cf.federated_broadcast(weights)))
    return cf.federated_mean(delta), (), new_seen

  process = cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([2])), next_fn,
      client_state_initializer=cf.tf_computation(lambda: tf.constant(0)))
  assert batched_work.BatchedWork.of(cf.compile(process)) is None
