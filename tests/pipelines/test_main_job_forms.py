"""What the main job computes for each of its aggregations is what it
computed before the one aggregation stack (issue 37): the form its code
builds today from a set of flags runs two rounds to the results of the form
the code of commit feb7b67 built from the same flags (saved in
tests/data/main_job_forms/ by scripts/record_main_job_forms.py), both run
here, on one CPU. A form saved byte for byte as recorded is the same
computation: nothing to run (most forms carry build-time names or seeds that
differ from build to build, and run).
"""

import numpy as np
import pytest

import canonical as cf
from canonical.saving import form_file
import form_rounds
import main_job_flags


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(main_job_flags.FLAGS))
def test_the_main_jobs_form_computes_what_it_computed(name):
  form = cf.compile(main_job_flags.process(name))
  with open(main_job_flags.form_path(name), 'rb') as f:
    saved = f.read()
  if form_file.to_bytes(form) == saved:
    return
  recorded = form_rounds.run_rounds(form_file.from_bytes(saved, where=name),
                                    main_job_flags.clients)
  today = form_rounds.run_rounds(form, main_job_flags.clients)
  assert len(today) == len(recorded)
  for i, (a, b) in enumerate(zip(today, recorded)):
    assert a.dtype == b.dtype and a.shape == b.shape, f'leaf {i}'
    np.testing.assert_array_equal(a, b, err_msg=f'leaf {i}')


def test_the_record_differs_between_flags():
  """A record that every flag set matched alike would prove nothing."""
  runs = {name: form_rounds.run_rounds(cf.load(main_job_flags.form_path(
      name)), main_job_flags.clients, rounds=1)
          for name in ('plain', 'uniform8_both_ways', 'dp')}
  weights = {name: np.concatenate([leaf.ravel() for leaf in run[:6]])
             for name, run in runs.items()}
  assert not np.array_equal(weights['plain'], weights['uniform8_both_ways'])
  assert not np.array_equal(weights['plain'], weights['dp'])
