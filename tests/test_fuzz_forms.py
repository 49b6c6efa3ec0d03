"""Hundreds of mutated form files, each loaded and run in a child process
(`scripts/fuzz_forms.py`): a form that loads and runs, a FormError, or a round
that fails with an exception; never an abort, a crash or a hang."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fuzz_module():
  spec = importlib.util.spec_from_file_location(
      'fuzz_forms', os.path.join(ROOT, 'scripts', 'fuzz_forms.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.slow
def test_mutated_forms_load_run_or_are_refused_and_nothing_aborts():
  counts, findings = _fuzz_module().fuzz(400, seed=11, timeout=60.0,
                                         print_fn=lambda line: None)
  assert not findings, findings
  assert sum(counts.values()) == 400
  # The mutations reach every outcome: the test exercises the loader's
  # checks and the pieces, not only the parser.
  assert counts['refused'] > 100 and counts['ran'] > 20, counts
  assert counts['round_failed'] > 0, counts


def test_mutations_are_deterministic_and_keep_the_checksum_valid():
  fuzz = _fuzz_module()
  from canonical.saving import envelope  # pylint: disable=g-import-not-at-top
  base = fuzz.base_form_bytes()
  first = [fuzz.mutate(base, i, seed=3) for i in range(20)]
  assert first == [fuzz.mutate(base, i, seed=3) for i in range(20)]
  assert base not in first and len(set(first)) > 15
  for data in first:
    envelope.unwrap(data, 'mutation')  # A valid envelope: checks behind it.
