"""Forms saved before the package layout changed (2026-11-27, commit 8881eb8)
still load and run as they ran then, and saved again by today's code they
run alike.

`tests/data/forms_before_layout/` holds three federated averaging forms on
`small_8x8` (uniform 8-bit both ways; top-k with error feedback as client
state; updates through secure sums) and the results of two rounds of each,
computed by the code of that commit from the loaded file, with one
intra-op thread as the suite runs (tests/conftest.py), once per kind of CPU
kernels met so far: `NAME.expected.npz` on an AVX-512 CPU (oneDNN on),
`NAME.expected.avx2-onednn.npz` on an AVX2 one with oneDNN on (as
scripts/test runs). Another CPU's kernels round floats otherwise, and an
8-bit quantization turns a last-bit difference into a level (~1e-2 here),
so a run must match one recorded run, not all.
"""

import glob

import os

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.saving import form_file
import form_rounds

DATA = os.path.join(os.path.dirname(__file__), '..', '..', 'data',
                    'forms_before_layout')
NAMES = ('fedavg_uniform8', 'fedavg_topk_error_feedback', 'fedavg_secure8')


def _clients():
  rng = np.random.default_rng(1)
  return [tf.data.Dataset.from_tensor_slices(
      (rng.uniform(size=(n, 8, 8, 1)).astype(np.float32),
       rng.integers(0, 4, n).astype(np.int32))).batch(8) for n in (8, 16)]


@pytest.mark.parametrize('name', NAMES)
def test_an_old_form_saved_again_runs_alike(name):
  old = cf.load(os.path.join(DATA, f'{name}.pb'))
  again = form_file.from_bytes(form_file.to_bytes(old), where=name)
  for a, b in zip(form_rounds.run_rounds(old, _clients),
                  form_rounds.run_rounds(again, _clients)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('name', NAMES)
def test_an_old_form_runs_as_it_ran(name):
  form = cf.load(os.path.join(DATA, f'{name}.pb'))
  actual = form_rounds.run_rounds(form, _clients)
  recorded = sorted(glob.glob(os.path.join(DATA, f'{name}.expected*.npz')))
  assert len(recorded) == 2
  mismatches = []
  for path in recorded:
    try:
      _assert_same_run(actual, np.load(path))
      return
    except AssertionError as e:
      mismatches.append(f'{os.path.basename(path)}: {e}')
  raise AssertionError('\n'.join(mismatches))


def _assert_same_run(actual, expected):
  assert len(actual) == len(expected.files)
  for i, value in enumerate(actual):
    want = expected[f'a{i:04d}']
    assert value.dtype == want.dtype and value.shape == want.shape, i
    if value.dtype.kind in 'iub':
      np.testing.assert_array_equal(value, want, err_msg=f'leaf {i}')
    else:  # Threads and oneDNN's own choices may still reorder a sum.
      np.testing.assert_allclose(value, want, rtol=1e-3, atol=1e-3,
                                 err_msg=f'leaf {i}')
