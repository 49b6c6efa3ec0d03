"""TFF's FedAvg with error feedback (our extension of TFF's API) on Beam:
each sampled client's residual is its client state, kept between rounds as
the reference keeps it, and a run stopped after a round resumes with every
client's residual to the uninterrupted run's result. (On Dask:
test_tff_087_new_processes_dask.py.)"""

import numpy as np
import tensorflow as tf

import beam_runner
from beam_runner import testing
from beam_runner.worker_io import tensor_io
import canonical as tff
import error_feedback_examples as ef


def test_fed_avg_with_error_feedback_on_beam_is_the_reference(tmp_path):
  testing.assert_rounds_match(ef.fed_avg(), ef.client_data(), rounds=3,
                              clients_per_round=2,
                              output_dir=str(tmp_path / 'run'))


def test_a_stopped_run_resumes_with_each_clients_residual(tmp_path):
  form = tff.compile(ef.fed_avg())
  data = ef.client_data()
  whole = beam_runner.run(form, data, 3, 2, tmp_path / 'whole',
                          progress=lambda _: None)
  beam_runner.run(form, data, 1, 2, tmp_path / 'part',
                  progress=lambda _: None)
  lines = []
  resumed = beam_runner.run(form, data, 3, 2, tmp_path / 'part',
                            progress=lines.append)
  assert [line.split(':')[0] for line in lines] == ['round 2/3', 'round 3/3']
  for a, b in zip(tf.nest.flatten(resumed.state),
                  tf.nest.flatten(whole.state)):
    np.testing.assert_array_equal(a, b)
  kept = beam_runner.RunDir(tmp_path / 'part').client_state_paths()
  kept_whole = beam_runner.RunDir(tmp_path / 'whole').client_state_paths()
  assert sorted(kept) == sorted(kept_whole) and len(kept) >= 2
  for client, path in kept.items():
    residual = tensor_io.read_tensors(path, form.client_state_spec)
    assert np.count_nonzero(residual[0])
    for a, b in zip(tf.nest.flatten(residual), tf.nest.flatten(
        tensor_io.read_tensors(kept_whole[client], form.client_state_spec))):
      np.testing.assert_array_equal(a, b)
