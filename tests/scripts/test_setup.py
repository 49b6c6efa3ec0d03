"""scripts/setup installs only when pyproject.toml, the Python version or the
extras asked for changed (a stand-in .venv/bin/python records the installs)."""

import os
import shutil
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))

# Answers `-V` and records `-m pip install ...`; fails when told to.
_FAKE_PYTHON = '''#!/usr/bin/env bash
if [ "$1" = -V ]; then echo "Python ${FAKE_VERSION:-3.11.7}"; exit 0; fi
echo "$*" >> "$(dirname "$0")/../installs.log"
exit "${FAKE_PIP_STATUS:-0}"
'''


def _checkout(tmp_path):
  """A checkout whose .venv holds the stand-in python."""
  root = tmp_path / 'checkout'
  (root / 'scripts').mkdir(parents=True)
  shutil.copy(os.path.join(ROOT, 'scripts', 'setup'), root / 'scripts')
  shutil.copy(os.path.join(ROOT, 'pyproject.toml'), root)
  python = root / '.venv' / 'bin' / 'python'
  python.parent.mkdir(parents=True)
  python.write_text(_FAKE_PYTHON)
  python.chmod(0o755)
  # An apt-get that does nothing, should the dataset be missing here.
  (tmp_path / 'bin').mkdir()
  (tmp_path / 'bin' / 'apt-get').write_text('#!/bin/sh\nexit 0\n')
  (tmp_path / 'bin' / 'apt-get').chmod(0o755)
  return root


def _setup(root, *args, **env):
  path = f'{root.parent / "bin"}{os.pathsep}{os.environ["PATH"]}'
  run = subprocess.run(['bash', str(root / 'scripts' / 'setup'), *args],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PATH=path, **env))
  log = root / '.venv' / 'installs.log'
  installs = log.read_text().splitlines() if log.exists() else []
  if log.exists():
    log.unlink()
  return run, installs


def test_setup_installs_only_when_the_checkout_changed(tmp_path):
  root = _checkout(tmp_path)
  run, installs = _setup(root)
  assert run.returncode == 0, run.stderr
  assert installs == ['-m pip install --quiet --disable-pip-version-check '
                      '-e .']
  assert _setup(root)[1] == []  # Nothing changed: no pip at all.
  assert _setup(root, 'test')[1] == [
      '-m pip install --quiet --disable-pip-version-check -e .[test]']
  assert _setup(root)[1] == []  # The test extra covers a plain install.
  assert _setup(root, 'test')[1] == []
  with open(root / 'pyproject.toml', 'a', encoding='utf-8') as f:
    f.write('\n# changed\n')
  # A changed pyproject reinstalls, with the extras installed before.
  assert _setup(root)[1] == [
      '-m pip install --quiet --disable-pip-version-check -e .[test]']
  assert _setup(root, 'test')[1] == []
  assert len(_setup(root, FAKE_VERSION='3.12.1')[1]) == 1  # Another Python.


def test_a_failed_install_is_tried_again(tmp_path):
  root = _checkout(tmp_path)
  run, installs = _setup(root, FAKE_PIP_STATUS='1')
  assert run.returncode != 0 and len(installs) == 1
  run, installs = _setup(root)
  assert run.returncode == 0 and len(installs) == 1
  assert _setup(root)[1] == []
