"""Hundreds of mutated form files, each loaded and run in a child process
(`scripts/fuzz_forms.py`): a form that loads and runs, a FormError, or a round
that fails with an exception; never an abort, a crash or a hang."""

import importlib.util
import os
import warnings

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))


def _fuzz_module():
  spec = importlib.util.spec_from_file_location(
      'fuzz_forms', os.path.join(ROOT, 'scripts', 'fuzz_forms.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.slow
def test_mutated_forms_load_run_or_are_refused_and_nothing_aborts():
  counts, findings, unconfirmed = _fuzz_module().fuzz(
      400, seed=11, timeout=60.0, print_fn=lambda line: None)
  assert not findings, findings
  for crash in unconfirmed:  # In the CI log; see scripts/fuzz_forms.py.
    warnings.warn(f'unconfirmed fuzz crash (not reproduced): {crash}')
  assert sum(counts.values()) == 400
  # The mutations reach the loader's checks and the pieces, not only the
  # parser. The base form's function names depend on what the process
  # traced before (here, the tests before this one), so its bytes, and
  # which mutations land where, vary from run to run. Since function bodies
  # are built at load, a round rarely fails after loading (2 of 2,000 at
  # seed 0 in a fresh process): that outcome is not required.
  assert counts['refused'] > 100 and counts['ran'] > 10, counts


def test_mutations_are_deterministic_and_keep_the_checksum_valid():
  fuzz = _fuzz_module()
  from canonical.saving import envelope  # pylint: disable=g-import-not-at-top
  base = fuzz.base_form_bytes()
  first = [fuzz.mutate(base, i, seed=3) for i in range(20)]
  assert first == [fuzz.mutate(base, i, seed=3) for i in range(20)]
  assert base not in first and len(set(first)) > 15
  for data in first:
    envelope.unwrap(data, 'mutation')  # A valid envelope: checks behind it.


class _FakeChildren:
  """`_run_child` as a script of crashes: (first, last) -> crash index."""

  def __init__(self, crashes):
    self.crashes, self.calls = crashes, []

  def __call__(self, first, last, seed, base_path, timeout, counts,
               print_fn):
    del seed, base_path, timeout, print_fn
    self.calls.append((first, last))
    crash = self.crashes.get((first, last))
    stop = last if crash is None else crash
    counts['refused'] += stop - first
    if crash is None:
      return None, None
    return crash, {'index': crash, 'outcome': 'crash', 'why': 'exit -6'}


@pytest.mark.parametrize('crashes, confirmed, reruns', [
    # Neither alone nor after the 20 before it: unconfirmed.
    ({(0, 30): 25}, False, [(25, 26), (5, 26)]),
    ({(0, 30): 25, (25, 26): 25}, True, [(25, 26)]),  # Alone.
    ({(0, 30): 25, (5, 26): 25}, True, [(25, 26), (5, 26)]),  # After them.
])
def test_a_crash_counts_as_a_finding_only_if_it_reproduces(
    crashes, confirmed, reruns, monkeypatch):
  fuzz = _fuzz_module()
  children = _FakeChildren(crashes)
  monkeypatch.setattr(fuzz, '_run_child', children)
  monkeypatch.setattr(fuzz, 'base_form_bytes', lambda: b'form')
  counts, findings, unconfirmed = fuzz.fuzz(30, print_fn=lambda line: None)
  # The fuzz reruns the crash, then goes on after it.
  assert children.calls == [(0, 30)] + reruns + [(26, 30)]
  assert [f['index'] for f in findings] == ([25] if confirmed else [])
  assert [c['index'] for c in unconfirmed] == ([] if confirmed else [25])
  assert sum(counts.values()) == 30  # Mutation 25 counted once.
