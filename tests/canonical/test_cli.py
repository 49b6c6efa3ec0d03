"""python -m canonical compile / inspect: forms from the command line, clear errors."""

import os
import subprocess
import sys
import textwrap

import pytest

import canonical as cf
from canonical import __main__ as cli
from canonical.saving import envelope

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../..'))

_PROCESS_MODULE = textwrap.dedent('''
    import tensorflow as tf
    import canonical as cf

    F = tf.TensorSpec([], tf.float32)

    @cf.tf_computation
    def initialize():
      return tf.constant(1.0)

    @cf.tf_computation(F, F)
    def scale(x, s):
      return x * s

    @cf.federated_computation(cf.server(F), cf.clients(F))
    def next_round(state, data):
      s = cf.federated_broadcast(state)
      return cf.federated_sum(cf.federated_map(scale, (data, s))), cf.federated_mean(data)

    def process():
      return cf.IterativeProcess(initialize, next_round)

    def form():
      return cf.compile(process(), name='from_a_form')

    def not_a_process():
      return 42

    def broken():
      raise RuntimeError('the builder broke')

    NOT_CALLABLE = 3
''')


@pytest.fixture
def module(tmp_path, monkeypatch):
  """A module, named uniquely for each test, holding process builders."""
  name = f'cli_builders_{os.path.basename(tmp_path)}'.replace('-', '_')
  (tmp_path / f'{name}.py').write_text(_PROCESS_MODULE)
  monkeypatch.chdir(tmp_path)
  monkeypatch.syspath_prepend(str(tmp_path))
  yield name
  sys.modules.pop(name, None)


def _run(capsys, *argv):
  code = cli.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def test_compile_writes_a_loadable_form(module, tmp_path, capsys):
  code, out, _ = _run(capsys, 'compile', f'{module}:process', '-o', 'p.pb',
                      '--name', 'cli_form', '--description', 'from the CLI')
  assert code == 0
  assert 'wrote p.pb' in out and "CanonicalForm 'cli_form'" in out
  form = cf.load(tmp_path / 'p.pb')
  assert (form.name, form.description) == ('cli_form', 'from the CLI')
  state, metrics = cf.run_round(form, form.initialize(), [2.0, 4.0])
  assert (float(state), float(metrics)) == (6.0, 3.0)


def test_compile_accepts_a_form_and_a_file_path(module, tmp_path, capsys):
  code, _, _ = _run(capsys, 'compile', f'{tmp_path / module}.py:form', '-o',
                    str(tmp_path / 'f.pb'))
  assert code == 0
  assert cf.load(tmp_path / 'f.pb').name == 'from_a_form'


def test_inspect_prints_pieces_encoders_and_bits(module, tmp_path, capsys):
  assert _run(capsys, 'compile', f'{module}:process', '-o', 'p.pb')[0] == 0
  code, out, _ = _run(capsys, 'inspect', 'p.pb')
  assert code == 0
  for name in ('initialize', 'prepare', 'work', 'zero', 'accumulate', 'merge',
               'report', 'update'):
    assert f'\n  {name} ' in out
  assert 'work' in out and '(float32, <float32>) -> ' in out
  assert 'C (broadcast, per client): 32 bits' in out
  assert 'U (aggregated, per client): 64 bits' in out
  assert 'encoders: none' in out
  assert 'format version 1' in out


@pytest.mark.parametrize('target, problem', [
    ('no_such_module_here:process', "cannot import module "
     "'no_such_module_here'"),
    ('{module}:missing', "has no 'missing'"),
    ('{module}:NOT_CALLABLE', 'is a int, not a function'),
    ('{module}:not_a_process', 'returned a int; it must return a '
     'canonical.IterativeProcess or a canonical.CanonicalForm'),
    ('{module}:broken', 'raised RuntimeError: the builder broke'),
    ('{module}', 'expected MODULE:FUNCTION'),
    ('missing_file.py:process', "no such file 'missing_file.py'"),
])
def test_compile_errors(module, capsys, target, problem):
  code, _, err = _run(capsys, 'compile', target.format(module=module), '-o',
                      'x.pb')
  assert code == 1
  assert problem in err and err.startswith('python -m canonical compile: '
                                           'error:')
  assert 'Traceback' not in err
  assert not os.path.exists('x.pb')


@pytest.mark.parametrize('contents, problem', [
    (None, 'cannot read the form'),
    (b'', 'empty'),
    (b'not a form', 'not a saved canonical form'),
    (envelope.wrap(b'', version=9), 'format version 9 is newer'),
])
def test_inspect_errors(tmp_path, capsys, contents, problem):
  path = tmp_path / 'bad.pb'
  if contents is not None:
    path.write_bytes(contents)
  code, _, err = _run(capsys, 'inspect', str(path))
  assert code == 1
  assert problem in err and str(path) in err


def test_inspect_names_ops_refused_by_default(tmp_path, capsys):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  form = cf.compile(cf.IterativeProcess(*_tiny()))

  def work(data, broadcast):
    doubled = tf.py_function(lambda v: v * 2.0, [data], tf.float32)
    doubled.set_shape([])
    return (doubled * broadcast[0],), ()

  pieces = dict(form.pieces, work=cf.Piece('work', work,
                                           form.work.input_specs))
  cf.save(cf.CanonicalForm(**pieces), tmp_path / 'py.pb')
  code, out, _ = _run(capsys, 'inspect', str(tmp_path / 'py.pb'))
  assert code == 0
  assert "refused by default: op 'EagerPyFunc' in work" in out


def _tiny():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  f = tf.TensorSpec([], tf.float32)

  @cf.tf_computation
  def initialize():
    return tf.constant(1.0)

  @cf.tf_computation(f, f)
  def scale(x, s):
    return x * s

  @cf.federated_computation(cf.server(f), cf.clients(f))
  def next_round(state, data):
    s = cf.federated_broadcast(state)
    return state, cf.federated_sum(cf.federated_map(scale, (data, s)))

  return initialize, next_round


@pytest.mark.slow
def test_the_module_runs_from_the_shell(module, tmp_path):
  env = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2', 'PYTHONPATH': ROOT}
  run = subprocess.run(
      [sys.executable, '-m', 'canonical', 'compile', f'{module}:process', '-o',
       'shell.pb'], cwd=tmp_path, capture_output=True, text=True, timeout=300,
      env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  run = subprocess.run(
      [sys.executable, '-m', 'canonical', 'inspect', 'shell.pb'],
      cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  assert 'C (broadcast, per client): 32 bits' in run.stdout
  run = subprocess.run(
      [sys.executable, '-m', 'canonical', 'inspect', f'{module}.py'],
      cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
  assert run.returncode == 1
  assert 'not a saved canonical form' in run.stderr
  assert 'Traceback' not in run.stderr


def test_bad_usage_exits_with_code_2(capsys):
  with pytest.raises(SystemExit) as exit_:
    cli.main(['inspect'])
  assert exit_.value.code == 2
  assert 'the following arguments are required: form' in capsys.readouterr().err
