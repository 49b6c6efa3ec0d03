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


# Answering without TensorFlow: `--help`, bad usage and `inspect` of an
# intact form import neither TensorFlow nor Beam (tf_free_reader.py), and
# `inspect` prints what the loader's own modules print.

_IMPORTS_AT_EXIT = textwrap.dedent('''
    import runpy, sys
    sys.argv = ['canonical'] + sys.argv[1:]
    try:
      runpy.run_module('canonical', run_name='__main__', alter_sys=True)
    except SystemExit:
      pass
    print(sorted({m.split('.')[0] for m in sys.modules} &
                 {'tensorflow', 'apache_beam'}))
''')
FORMS = os.path.join(ROOT, 'tests', 'data', 'forms_before_layout')


def _heavy_imports(*argv):
  """What `python -m canonical ARGV` imported of TensorFlow and Beam."""
  run = subprocess.run([sys.executable, '-c', _IMPORTS_AT_EXIT, *argv],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
  return run.stdout.strip().splitlines()[-1], run.stdout, run.stderr


@pytest.mark.parametrize('argv', [
    ['--help'], ['inspect', '--help'], ['--bogus'], ['inspect'],
    ['inspect', os.path.join(FORMS, 'fedavg_secure8.pb')]])
def test_answers_without_tensorflow(argv):
  heavy, out, err = _heavy_imports(*argv)
  assert heavy == '[]', (out, err)
  if argv[-1].endswith('.pb'):
    assert 'secure sum 2: federated_secure_sum, max_input 4538' in out


def _tensorflow_text(data, where):
  """What inspect printed before it read forms without TensorFlow."""
  from canonical.saving import form_file  # pylint: disable=g-import-not-at-top
  from canonical.saving import inspection  # pylint: disable=g-import-not-at-top
  return inspection.describe(form_file.parse(data, where), where, len(data))


def _tf_free_text(path):
  """The reader's text, or None where it is unsure."""
  from canonical.saving import inspection  # pylint: disable=g-import-not-at-top
  from canonical.saving import tf_free_reader  # pylint: disable=g-import-not-at-top
  reading = tf_free_reader.read(path)
  if reading is None:
    return None
  try:
    return inspection.describe(reading.proto, str(path), reading.size,
                               reading.leaves)
  except tf_free_reader.Unsure:
    return None


@pytest.mark.parametrize('name', ['fedavg_secure8.pb', 'fedavg_uniform8.pb',
                                  'fedavg_topk_error_feedback.pb'])
def test_the_tf_free_reader_prints_what_the_loader_prints(name):
  # TensorFlow is loaded in this process too: the reader's schema lives in a
  # descriptor pool of its own.
  path = os.path.join(FORMS, name)
  with open(path, 'rb') as f:
    expected = _tensorflow_text(f.read(), path)
  assert _tf_free_text(path) == expected


def test_the_tf_free_reader_renders_server_state_secure_sums_and_bits(
    tmp_path):
  from canonical.saving import tf_free_reader  # pylint: disable=g-import-not-at-top
  from canonical.saving import canonical_form_pb2  # pylint: disable=g-import-not-at-top
  from canonical.secagg import sums  # pylint: disable=g-import-not-at-top
  leaves = tf_free_reader.Leaves()
  for kind in sums.KINDS:
    for parameters in ((), (8,), (8, 8), (3, 9, 3)):
      for from_server in (False, True):
        entry = canonical_form_pb2.SecureSum(
            kind=kind, static_parameters=parameters,
            from_server_state=from_server)
        assert leaves.secure_sum(entry, 'f') == sums.SecureSum(
            kind, None if from_server else parameters).describe()
  # One function prints bits for both readers (canonical.core.bits_text).
  assert [leaves.bits(b) for b in (None, 999, 123456, 7 * 10**12)] == [
      'varies', '999 bits', '123456 bits (123.46 kbit)',
      '7000000000000 bits (7000.00 Gbit)']
  form = cf.compile(cf.IterativeProcess(*_tiny()))
  cf.save(form, tmp_path / 'tiny.pb')
  data = (tmp_path / 'tiny.pb').read_bytes()
  assert _tf_free_text(tmp_path / 'tiny.pb') == _tensorflow_text(
      data, str(tmp_path / 'tiny.pb'))


def _structures():
  """Hostile or odd StructuredValues: (name, value)."""
  from tensorflow.core.protobuf import struct_pb2  # pylint: disable=g-import-not-at-top
  sv = struct_pb2.StructuredValue

  def tensor(dtype=1, dims=(), unknown_rank=False):
    value = sv()
    value.tensor_spec_value.dtype = dtype
    value.tensor_spec_value.shape.unknown_rank = unknown_rank
    for d in dims:
      value.tensor_spec_value.shape.dim.add(size=d)
    return value

  def tuple_of(*items):
    value = sv()
    value.tuple_value.SetInParent()
    for item in items:
      value.tuple_value.values.add().CopyFrom(item)
    return value

  def named(name, **fields):
    value = sv()
    value.named_tuple_value.name = name
    for key, item in fields.items():
      pair = value.named_tuple_value.values.add(key=key)
      pair.value.CopyFrom(item)
    return value

  def dataset(*state, kind=struct_pb2.TypeSpecProto.DATA_DATASET_SPEC):
    value = sv()
    value.type_spec_value.type_spec_class = kind
    value.type_spec_value.type_spec_class_name = 'DatasetSpec'
    value.type_spec_value.type_state.CopyFrom(tuple_of(*state))
    return value

  shape = sv()
  shape.tensor_shape_value.dim.add(size=-1)
  deep = tensor()
  for _ in range(70):
    deep = tuple_of(deep)
  cases = {
      'dtypes': tuple_of(*[tensor(d) for d in (1, 7, 10, 20, 21, 101)]),
      'bad dtype': tuple_of(tensor(999)),
      'invalid dtype': tuple_of(tensor(0)),
      'shapes': tuple_of(tensor(dims=(-1, 0, 3)), tensor(unknown_rank=True),
                         tensor(dims=(2,), unknown_rank=True)),
      'negative dim': tuple_of(tensor(dims=(-5,))),
      'dict': tuple_of(sv(dict_value={'fields': {'b': tensor(),
                                                 'a': tensor(3)}})),
      'named': tuple_of(named('P', x=tensor(), y=tuple_of())),
      'named bad name': tuple_of(named('a b', x=tensor())),
      'named keyword': tuple_of(named('P', **{'class': tensor()})),
      'named underscore': tuple_of(named('P', _x=tensor())),
      'dataset': tuple_of(dataset(tuple_of(tensor(dims=(-1, 2))), shape)),
      'nested dataset': tuple_of(dataset(dataset(tensor(), shape), shape)),
      'dataset of a shape': tuple_of(dataset(shape, shape)),
      'dataset short': tuple_of(dataset(tensor())),
      'dataset long': tuple_of(dataset(tensor(), shape, shape)),
      'ragged spec': tuple_of(dataset(
          tensor(), shape, kind=struct_pb2.TypeSpecProto.RAGGED_TENSOR_SPEC)),
      'int leaf': tuple_of(sv(int64_value=3)),
      'none leaf': tuple_of(sv(none_value={})),
      'inputs a dict': sv(dict_value={'fields': {'a': tensor()}}),
      'inputs a tensor': tensor(),
      'inputs a list': sv(list_value={'values': [tensor()]}),
      'deep': tuple_of(deep),
  }
  for depth in (62, 63, 64, 65):
    value = tensor()
    for _ in range(depth):
      value = tuple_of(value)
    cases[f'depth {depth}'] = value
  assert sorted(cases) == sorted(_STRUCTURES)
  return cases


_STRUCTURES = (
    'dtypes', 'bad dtype', 'invalid dtype', 'shapes', 'negative dim', 'dict',
    'named', 'named bad name', 'named keyword', 'named underscore', 'dataset',
    'nested dataset', 'dataset of a shape', 'dataset short', 'dataset long',
    'ragged spec', 'int leaf', 'none leaf', 'inputs a dict', 'inputs a tensor',
    'inputs a list', 'deep', 'depth 62', 'depth 63', 'depth 64', 'depth 65')


# Structures the loader describes but the reader leaves to it.
_UNSURE_THOUGH_FINE = ('dataset of a shape', 'dataset short')


@pytest.mark.parametrize('case', _STRUCTURES)
@pytest.mark.parametrize('field', ['input_structure', 'output_structure'])
def test_the_tf_free_reader_is_unsure_unless_it_agrees(tmp_path, case, field):
  from canonical.saving import canonical_form_pb2  # pylint: disable=g-import-not-at-top
  from canonical.saving import inspection  # pylint: disable=g-import-not-at-top
  with open(os.path.join(FORMS, 'fedavg_uniform8.pb'), 'rb') as f:
    payload, _ = envelope.unwrap(f.read(), 'form')
  proto = canonical_form_pb2.Form.FromString(payload)
  piece = next(p for p in proto.pieces if p.name == 'zero')
  getattr(piece, field).CopyFrom(_structures()[case])
  data = envelope.wrap(proto.SerializeToString())
  path = tmp_path / 'odd.pb'
  path.write_bytes(data)
  try:
    expected = _tensorflow_text(data, str(path))
  except cf.Error as e:
    expected = e
  except Exception as e:  # pylint: disable=broad-except
    expected = e
  text = _tf_free_text(path)
  if isinstance(expected, Exception):
    assert text is None, (case, expected)
  else:
    assert text in (None, expected)
    assert (text is None) == (case in _UNSURE_THOUGH_FINE), case
  try:  # And describe_file: the same text, or the loader's error.
    described = inspection.describe_file(path)
  except cf.Error as e:
    described = e
  except Exception as e:  # pylint: disable=broad-except
    described = e
  assert (str(described) == str(expected) and
          type(described) is type(expected)), case


def test_the_tf_free_reader_leaves_what_it_cannot_vouch_for(tmp_path):
  from canonical.saving import tf_free_reader  # pylint: disable=g-import-not-at-top
  good = os.path.join(FORMS, 'fedavg_uniform8.pb')
  assert tf_free_reader.read(good) is not None
  with open(good, 'rb') as f:
    data = f.read()
  for name, contents in (('flipped', data[:-1] + bytes([data[-1] ^ 1])),
                         ('short', data[:-10]), ('empty', b''),
                         ('foreign', b'x' * 100),
                         ('newer', envelope.wrap(data[52:], version=3))):
    (tmp_path / name).write_bytes(contents)
    assert tf_free_reader.read(tmp_path / name) is None, name
  assert tf_free_reader.read(tmp_path / 'missing') is None
  assert tf_free_reader.read('s3://bucket/form.pb') is None


def test_the_tf_free_reader_names_dtypes_as_the_loader_does():
  """Its names come from the schema's DataType enum; the loader's from
  TensorFlow's dtypes."""
  from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.core.protobuf import struct_pb2  # pylint: disable=g-import-not-at-top
  from canonical.core import naming  # pylint: disable=g-import-not-at-top
  from canonical.saving import structure_coding  # pylint: disable=g-import-not-at-top
  from canonical.saving import tf_free_reader  # pylint: disable=g-import-not-at-top
  names = tf_free_reader._schema().dtype_names  # pylint: disable=protected-access
  checked = 0
  for number in types_pb2.DataType.values():
    scalar = struct_pb2.StructuredValue()
    scalar.tensor_spec_value.dtype = number
    try:
      expected = naming.form_text(structure_coding.decode(scalar))
    except structure_coding.StructureError:
      continue  # Not a dtype a TensorSpec takes.
    assert names.get(number) == expected, number
    checked += 1
  assert checked > 20 and names[1] == 'float32' and names[7] == 'str'
  assert tf_free_reader._schema().dataset_spec == (  # pylint: disable=protected-access
      struct_pb2.TypeSpecProto.DATA_DATASET_SPEC)


def test_importing_canonical_loads_the_language_only_on_use():
  code = textwrap.dedent('''
      import sys
      import canonical
      from canonical import errors, io
      assert 'tensorflow' not in sys.modules, 'import canonical loaded TF'
      import tensorflow as tf
      # Reached through its module, a computation still runs by the
      # reference executor, as when the package imported everything.
      from canonical.core.computations import tf_computation
      print(tf_computation(lambda: tf.constant(2.0))())
      print(canonical.federated_computation is
            sys.modules['canonical.core.computations'].federated_computation)
  ''')
  run = subprocess.run([sys.executable, '-c', code], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.split() == ['2.0', 'True']
