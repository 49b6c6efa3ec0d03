"""Code written against the layout before 2026-11-27 keeps working: every
module path of then imports (with a DeprecationWarning naming the new home),
and every public name each module had is still there, but for the internals
listed below (helpers no user code reached, replaced by the intrinsic
registry or by TFF's composition)."""

import importlib
import json
import os
import sys
import warnings

import pytest

_DATA = os.path.join(os.path.dirname(__file__), '..', 'data',
                     'names_before_layout.json')
with open(_DATA, encoding='utf-8') as f:
  OLD_NAMES = json.load(f)

# Internals of the language core that the intrinsic registry replaced: what
# they did is a rule of each intrinsic's spec now (registry.of(op)).
RETIRED = {
    'canonical.aggregations': {'of', 'secure_parameters'},
    'canonical.evaluation': {'evaluate_op'},
    'canonical.intrinsics': {'AGGREGATIONS', 'SECURE_AGGREGATIONS',
                             'zero_computation'},
    'canonical.sequences': {'KINDS', 'evaluate'},
    # The older FedAvg builder composes TFF's now: what it imported to build
    # its own round (each still public where it lives) is no longer there.
    'canonical.fedavg.averaging': {'client_update', 'federated_computation',
                                   'server_update', 'tf_computation'},
}


def _has(module, name):
  """Whether `module.name` is there, as an attribute or as a submodule."""
  if hasattr(module, name):
    return True
  try:
    importlib.import_module(f'{module.__name__}.{name}')
  except ImportError:
    return False
  return True


@pytest.mark.parametrize('name', sorted(OLD_NAMES))
def test_an_old_module_path_keeps_its_names(name):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    module = importlib.import_module(name)
  missing = [n for n in OLD_NAMES[name]
             if n not in RETIRED.get(name, ()) and not _has(module, n)]
  assert not missing, f'{name} lost {missing}'


def test_a_moved_path_warns_naming_its_new_home():
  import canonical  # pylint: disable=g-import-not-at-top
  sys.modules.pop('canonical.storage', None)  # As in a fresh process.
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    import canonical.storage as old  # pylint: disable=g-import-not-at-top
  caught = [w for w in caught if issubclass(w.category, DeprecationWarning)]
  assert old is canonical.io
  assert len(caught) == 1
  assert 'canonical.storage has moved to canonical.io' in str(caught[0].message)
  assert caught[0].filename == __file__  # Points at the importing line.


def test_a_split_module_gathers_its_homes():
  from canonical import fedavg  # pylint: disable=g-import-not-at-top
  from canonical import aggregators  # pylint: disable=g-import-not-at-top
  from canonical.learning import algorithms  # pylint: disable=g-import-not-at-top
  from canonical.learning import framework  # pylint: disable=g-import-not-at-top
  assert fedavg.build_dp_mean_process is aggregators.build_dp_mean_process
  assert (fedavg.build_federated_averaging_process is
          algorithms.build_federated_averaging_process)
  assert (fedavg.build_encoded_mean_process_from_model is
          framework.build_encoded_mean_process_from_model)
  from canonical.fedavg import dp_secure_mean  # pylint: disable=g-import-not-at-top
  assert dp_secure_mean.sensitivity is aggregators.dp_secure_mean.sensitivity


def test_an_unknown_name_is_still_an_error():
  import canonical  # pylint: disable=g-import-not-at-top
  with pytest.raises(AttributeError, match='no_such_thing'):
    canonical.no_such_thing  # pylint: disable=pointless-statement
  with pytest.raises(ModuleNotFoundError):
    importlib.import_module('canonical.no_such_module')
