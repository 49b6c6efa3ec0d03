"""scripts/import_guard.py: every import edge readable by tools, the
layering kept, nothing imported that is not there."""

import importlib.util
import os
import textwrap

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def _guard():
  spec = importlib.util.spec_from_file_location(
      'import_guard', os.path.join(ROOT, 'scripts', 'import_guard.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_the_project_keeps_its_import_rules():
  assert _guard().problems(ROOT) == []


def test_lazy_names_and_old_paths_are_edges():
  guard = _guard()
  path = os.path.join(ROOT, 'canonical', '__init__.py')
  edges = list(guard.edges_of(ROOT, path, guard._parse(path)))  # pylint: disable=protected-access
  assert any(e.kind == 'lazy' and e.module == 'canonical.compiler' and
             e.name == 'compile' for e in edges)
  assert any(e.kind == 'old path' and e.module == 'canonical.io'
             for e in edges)


def _write(root, files):
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_it_finds_each_kind_of_problem(tmp_path):
  _write(tmp_path, {
      'canonical/__init__.py': '''
          from typing import TYPE_CHECKING
          from canonical import _lazy
          if TYPE_CHECKING:
            from canonical.core import real
            from canonical.core import gone
          _lazy.register_old_paths({'canonical.old': ['canonical.moved']})
          ''',
      'canonical/_lazy.py': 'def register_old_paths(table): pass\n',
      'canonical/errors.py': 'class Error(Exception): pass\n',
      'canonical/form.py': 'import beam_runner.x\n',
      'canonical/core/__init__.py': 'real = 1\n',
      'canonical/core/types.py': 'from canonical.core.leaf_types import T\n',
      'canonical/core/leaf_types.py': 'T = 1\n',
      'canonical/compiler.py': 'from canonical.core.leaf_types import T\n',
      'beam_runner/__init__.py': '',
      'beam_runner/x.py': 'from pipelines import job\n',
      'encoders/__init__.py': 'from canonical import errors\n'
                              'from canonical import form\n',
      'pipelines/__init__.py': '',
      'pipelines/job.py': 'import importlib\n'
                          'def load(name):\n'
                          '  return importlib.import_module(name)\n',
  })
  found = '\n'.join(_guard().problems(str(tmp_path)))
  assert "imports 'gone' from canonical.core (lazy), which neither" in found
  assert "'real'" not in found
  assert 'imports canonical.moved (old path), which does not exist' in found
  assert ('canonical/form.py:1: canonical.form imports beam_runner.x '
          '(import): canonical must not import beam_runner') in found
  assert 'beam_runner must not import pipelines' in found
  assert ('encoders/__init__.py:2: encoders imports canonical.form (import): '
          'encoders must not import canonical') in found
  assert ('encoders/__init__.py:1: encoders imports canonical.errors '
          '(import): encoders must not import canonical') in found
  assert 'pipelines/job.py:3: import_module of a computed name' in found
  assert ('canonical/compiler.py:1: canonical.compiler imports '
          'canonical.core.leaf_types (import): import it from '
          'canonical.core.types.') in found
  assert 'canonical/core/types.py' not in found
  assert len(found.splitlines()) == 8, found
