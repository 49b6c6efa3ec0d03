"""canonical.save / canonical.load: self-contained form files that run bit for bit alike."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.saved_model import nested_structure_coder

import canonical as cf
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
from canonical.learning import models
from canonical.saving import envelope
from canonical.saving import form_file
from canonical.saving import op_allowlist
from canonical.saving import GraphPiece
import encoders as te

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../../..'))
F = tf.TensorSpec([], tf.float32)
_SIZES = (16, 24, 8)


def _smoke_process():
  @cf.tf_computation
  def initialize():
    return tf.constant(0.5)

  @cf.tf_computation(F, F)
  def scale(x, s):
    return x * s

  @cf.tf_computation(F)
  def plus_one(x):
    return x + 1.0

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_round(state, data):
    s = cf.federated_broadcast(cf.federated_map(plus_one, state))
    total = cf.federated_sum(cf.federated_map(scale, (data, s)))
    return cf.federated_map(plus_one, total), cf.federated_mean(data)

  return cf.IterativeProcess(initialize, next_round)


@pytest.fixture(scope='module')
def smoke():
  return cf.compile(_smoke_process(), description='a small test form')


def _client_arrays(n, seed):
  rng = np.random.default_rng(seed)
  return (rng.uniform(size=(n, 8, 8, 1)).astype(np.float32),
          rng.integers(0, 4, n).astype(np.int32))


def _datasets(arrays):
  return [tf.data.Dataset.from_tensor_slices(a).batch(8) for a in arrays]


def _encoder(wrap, make):
  def build(spec):
    encoder = make() if spec.shape.num_elements() > 100 else (
        te.encoders.identity())
    return wrap(encoder, spec)
  return build


@pytest.fixture(scope='module')
def model():
  return learning.KerasFunctionalModel.from_keras(models.small_8x8, seed=0)


@pytest.fixture(scope='module')
def encoded(model):
  """Federated averaging with 8-bit encoded broadcast and mean."""
  eight_bits = lambda: te.encoders.uniform_quantization(bits=8)
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model, _encoder(te.encoders.as_simple_encoder, eight_bits)),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, _encoder(te.encoders.as_gather_encoder, eight_bits)))
  return cf.compile(process)


@pytest.fixture(scope='module')
def feedback(model):
  """Client state (top-k error feedback residuals) and Dataset client data."""
  top_k = lambda: te.encoders.top_k(fraction=0.05)
  process = algorithms.build_federated_averaging_process(
      model, lambda: learning.sgd(0.1),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, _encoder(te.encoders.as_gather_encoder, top_k),
          error_feedback=True))
  return cf.compile(process)


def _reload(form, tmp_path, name='form.pb'):
  path = tmp_path / name
  cf.save(form, path)
  return cf.load(path)


def _assert_identical(actual, expected):
  tf.nest.assert_same_structure(actual, expected, check_types=False)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    a, e = np.asarray(a), np.asarray(e)
    assert a.dtype == e.dtype and a.shape == e.shape
    np.testing.assert_array_equal(a, e)


# ---------------------------------------------------------------------------
# Round trips: bit-identical results.


def test_smoke_form_round_trip(smoke, tmp_path):
  loaded = _reload(smoke, tmp_path)
  assert all(isinstance(p, GraphPiece) for p in loaded.pieces.values())
  assert loaded.name == smoke.name
  assert loaded.description == 'a small test form'
  assert loaded.broadcast_bits == smoke.broadcast_bits == 32
  assert loaded.aggregated_bits == smoke.aggregated_bits == 64
  for name, piece in smoke.pieces.items():
    assert loaded.pieces[name].signature() == piece.signature()
    assert loaded.pieces[name].op_count() > 0
  data = [tf.constant(float(i)) for i in range(5)]
  for seed in (None, 3):
    _assert_identical(
        cf.run_round(loaded, tf.constant(1.5), data, merge_seed=seed),
        cf.run_round(smoke, tf.constant(1.5), data, merge_seed=seed))
  assert 'C (broadcast, per client): 32 bits' in loaded.summary(print_fn=None)


def test_encoded_fedavg_round_trip_is_bit_identical(encoded, tmp_path):
  loaded = _reload(encoded, tmp_path)
  assert loaded.encoders == encoded.encoders
  assert any('uniform_quantization' in e for e in loaded.encoders.values())
  assert loaded.broadcast_bits == encoded.broadcast_bits
  assert loaded.aggregated_bits == encoded.aggregated_bits
  clients = _datasets([_client_arrays(n, i) for i, n in enumerate(_SIZES)])
  expected_state, state = encoded.initialize(), loaded.initialize()
  _assert_identical(state, expected_state)
  for r in range(2):
    expected_state, expected_metrics = cf.run_round(
        encoded, expected_state, clients, merge_seed=r)
    state, metrics = cf.run_round(loaded, state, clients, merge_seed=r)
    _assert_identical(state, expected_state)
    _assert_identical(metrics, expected_metrics)
  # Named tuples keep their field names.
  assert state.global_model_weights.trainable[0].shape == (3, 3, 1, 8)


def test_client_state_and_dataset_round_trip(feedback, tmp_path):
  loaded = _reload(feedback, tmp_path)
  assert loaded.has_client_state
  clients = _datasets([_client_arrays(n, 10 + i) for i, n in
                       enumerate(_SIZES)])
  expected = (feedback.initialize(), None, None)
  actual = (loaded.initialize(), None, None)
  for r in range(2):
    expected = cf.run_round(feedback, expected[0], clients, expected[2],
                            merge_seed=r)
    actual = cf.run_round(loaded, actual[0], clients, actual[2], merge_seed=r)
    _assert_identical(actual, expected)
  assert float(tf.linalg.global_norm(actual[2][0])) > 0.0  # residuals kept


def test_captured_eager_tensors_become_constants(smoke, tmp_path):
  weights = tf.range(1000, dtype=tf.float32)  # Captured, not inlined.
  piece = cf.Piece('initialize', lambda: tf.reduce_sum(weights) / 1e6, ())
  assert piece.concrete_function.graph.captures
  form = cf.CanonicalForm(**dict(smoke.pieces, initialize=piece))
  loaded = _reload(form, tmp_path)
  assert float(loaded.initialize()) == float(form.initialize())
  assert not any(n.op == 'Placeholder'
                 for n in loaded.initialize.graph_def.node)


def test_loaded_pieces_check_their_arguments(smoke, tmp_path):
  loaded = _reload(smoke, tmp_path)
  with pytest.raises(TypeError, match="'prepare' takes 1 arguments"):
    loaded.prepare()
  with pytest.raises(TypeError, match=r"'prepare'.*expected float32, got "
                     r'int32\.'):
    loaded.prepare(tf.constant(1))


@pytest.mark.parametrize('loaded', [False, True])
def test_a_piece_of_no_tensors_runs_once(loaded, tmp_path):
  """The accumulate of an all-secure U (no tensors in or out) gives one empty
  result: called once, not for ~1 ms of TF's per client; a piece of tensors
  runs every time."""

  @cf.federated_computation(cf.server(tf.TensorSpec([], tf.int32)),
                            cf.clients(tf.TensorSpec([3], tf.int32)))
  def next_fn(state, data):
    return state, cf.federated_secure_sum_bitwidth(data, 8)

  form = cf.compile(cf.IterativeProcess(
      cf.tf_computation(lambda: tf.constant(0)), next_fn))
  if loaded:
    form = _reload(form, tmp_path)
  runs = []
  for piece in (form.accumulate, form.prepare):
    real = piece._call  # pylint: disable=protected-access
    piece._call = lambda *args, _real=real, _name=piece.name: (  # pylint: disable=protected-access
        runs.append(_name) or _real(*args))
  assert [form.accumulate((), ()) for _ in range(3)] == [(), (), ()]
  for _ in range(3):
    form.prepare(tf.constant(1))
  assert runs == ['accumulate'] + ['prepare'] * 3
  with pytest.raises(TypeError, match="'accumulate'.*do not fit"):
    form.accumulate((), (tf.constant(1),))  # Still checked.
  with pytest.raises(TypeError, match="'accumulate' takes 2 arguments"):
    form.accumulate(())


def test_saving_a_piece_that_captures_a_variable_fails_and_keeps_the_old_file(
    smoke, tmp_path):
  path = tmp_path / 'form.pb'
  cf.save(smoke, path)
  before = path.read_bytes()
  variable = tf.Variable(1.0)
  piece = cf.Piece('initialize', lambda: variable + 0.0, ())
  form = cf.CanonicalForm(**dict(smoke.pieces, initialize=piece))
  with pytest.raises(cf.FormError, match="'initialize'.*captures"):
    cf.save(form, path)
  assert path.read_bytes() == before
  assert os.listdir(tmp_path) == ['form.pb']  # No temporary file left.
  cf.save(smoke, path)  # Overwrites in place, atomically.
  assert os.listdir(tmp_path) == ['form.pb']


def test_file_records_versions_and_bits(encoded, tmp_path):
  path = tmp_path / 'form.pb'
  cf.save(encoded, path)
  proto = form_file.parse(path.read_bytes())
  assert proto.format_version == 1  # Version 2 only with privacy releases.
  assert proto.tensorflow_version == tf.__version__
  assert proto.producer_version.startswith('fedcanon')
  assert proto.broadcast_bits == encoded.broadcast_bits
  assert proto.aggregated_bits == encoded.aggregated_bits
  assert [p.name for p in proto.pieces] == list(encoded.pieces)
  assert [(e.tensor, e.encoder) for e in proto.encoders] == list(
      encoded.encoders.items())


# ---------------------------------------------------------------------------
# A fresh process that never imports the builders.

_CHILD = textwrap.dedent('''
    import json, sys
    import numpy as np
    import tensorflow as tf
    import canonical
    form = canonical.load(sys.argv[1])
    arrays = np.load(sys.argv[2])
    clients = [tf.data.Dataset.from_tensor_slices(
        (arrays[f"x{i}"], arrays[f"y{i}"])).batch(8) for i in range(3)]
    state = form.initialize()
    for r in range(2):
      state, metrics = canonical.run_round(form, state, clients, merge_seed=r)
    flat = tf.nest.flatten((state, metrics))
    np.savez(sys.argv[3], *[np.asarray(v) for v in flat])
    print(json.dumps(sorted(sys.modules)))
''')


@pytest.mark.slow
def test_loaded_form_runs_in_a_process_without_the_builders(encoded, tmp_path):
  form_path = tmp_path / 'form.pb'
  cf.save(encoded, form_path)
  arrays = [_client_arrays(n, 20 + i) for i, n in enumerate(_SIZES)]
  np.savez(tmp_path / 'clients.npz',
           **{f'{k}{i}': a[j] for i, a in enumerate(arrays)
              for j, k in enumerate('xy')})
  state = encoded.initialize()
  for r in range(2):
    state, metrics = cf.run_round(encoded, state, _datasets(arrays),
                                  merge_seed=r)
  (tmp_path / 'child.py').write_text(_CHILD)
  run = subprocess.run(
      [sys.executable, 'child.py', str(form_path), 'clients.npz', 'out.npz'],
      cwd=tmp_path, capture_output=True, text=True, timeout=300,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2',
           'PYTHONPATH': ROOT})
  assert run.returncode == 0, run.stderr[-3000:]
  modules = set(json.loads(run.stdout.strip().splitlines()[-1]))
  assert 'canonical' in modules and 'canonical.saving' in modules
  for builder in ('canonical.fedavg', 'canonical.learning',
                  __name__, 'tests.canonical.saving.test_saving'):
    assert builder not in modules, builder
  out = np.load(tmp_path / 'out.npz')
  expected = tf.nest.flatten((state, metrics))
  assert len(out.files) == len(expected)
  for i, value in enumerate(expected):
    np.testing.assert_array_equal(out[f'arr_{i}'], np.asarray(value))


# ---------------------------------------------------------------------------
# Bad files: a FormError naming the file and the problem.


@pytest.fixture(scope='module')
def smoke_bytes(smoke):
  return form_file.to_bytes(smoke)


def _a_graph_def():
  graph_def = tf.compat.v1.GraphDef()
  graph_def.node.add(name='x', op='Const')
  return graph_def.SerializeToString()


def _write(tmp_path, data, name='bad.pb'):
  path = tmp_path / name
  path.write_bytes(data)
  return path


@pytest.mark.parametrize('make, problem', [
    (lambda d: b'', 'empty'),
    (lambda d: d[:30], 'truncated'),
    (lambda d: d[:len(d) // 2], 'truncated'),
    (lambda d: d + b'\0', 'unexpected bytes after'),
    (lambda d: d[:-10] + bytes(b ^ 0xff for b in d[-10:]), 'corrupted'),
    (lambda d: b'\x89PNG\r\n\x1a\n' + bytes(100), 'not a saved canonical form'),
    (lambda d: _a_graph_def(), 'not a saved canonical form'),
    (lambda d: b'hello, world\n', 'not a saved canonical form'),
    (lambda d: envelope.wrap(d[envelope.HEADER_BYTES:], version=envelope.FORMAT_VERSION + 1),
     f'format version {envelope.FORMAT_VERSION + 1} is newer'),
    (lambda d: envelope.wrap(b'\xff\xff\xff'), 'does not parse'),
])
def test_bad_files_raise_form_errors(smoke_bytes, tmp_path, make, problem):
  path = _write(tmp_path, make(smoke_bytes))
  with pytest.raises(cf.FormError, match=problem) as error:
    cf.load(path)
  assert str(path) in str(error.value)


def test_missing_file_and_directory(tmp_path):
  for path in (tmp_path / 'missing.pb', tmp_path):
    with pytest.raises(cf.FormError, match='cannot read the form') as error:
      cf.load(path)
    assert str(path) in str(error.value)


def _edited(data, edit):
  """`data` with its Form message edited by `edit(proto)`, re-wrapped."""
  proto = form_file.parse(data)
  edit(proto)
  return envelope.wrap(proto.SerializeToString())


def _piece(proto, name):
  return next(p for p in proto.pieces if p.name == name)


def _set_dtype(structure, dtype):
  structure.tuple_value.values[0].tensor_spec_value.dtype = dtype


def _add_placeholder(proto):
  node = _piece(proto, 'report').graph.node.add(name='stray', op='Placeholder')
  node.attr['dtype'].type = tf.float32.as_datatype_enum


def _vector_initialize(proto):
  other = cf.compile(_vector_state_process())
  vector = form_file.to_proto(other)
  _piece(proto, 'initialize').CopyFrom(_piece(vector, 'initialize'))


def _vector_state_process():
  vector = tf.TensorSpec([2], tf.float32)

  @cf.tf_computation
  def initialize():
    return tf.zeros([2])

  @cf.federated_computation(cf.server(vector), cf.clients(F))
  def next_round(state, data):
    return state, cf.federated_sum(data)

  return cf.IterativeProcess(initialize, next_round)


def _ragged_output(proto):
  ragged = tf.RaggedTensorSpec([None, None], tf.float32)
  _piece(proto, 'report').output_structure.CopyFrom(
      nested_structure_coder.encode_structure((ragged, ragged)))


@pytest.mark.parametrize('edit, problem', [
    (lambda p: p.pieces.pop(), "lacks piece"),
    (lambda p: p.pieces.append(p.pieces[0]), "'initialize' appears 2 times"),
    (lambda p: setattr(p.pieces[0], 'name', 'bogus'), "unknown piece 'bogus'"),
    (lambda p: setattr(p, 'format_version', 7), 'says format version 7'),
    (lambda p: _piece(p, 'prepare').input_tensors.__setitem__(0, 'nope:0'),
     "'prepare'.*input tensor 'nope:0' is not in the graph"),
    (lambda p: _piece(p, 'prepare').output_tensors.append('Identity:0'),
     "'prepare'.*2 output tensors bound for 1 outputs"),
    (lambda p: _set_dtype(_piece(p, 'zero').output_structure,
                          tf.int32.as_datatype_enum),
     "'zero'.*output tensor 'Identity:0' is float32.*declares int32"),
    (_add_placeholder, "'report'.*placeholder 'stray' is bound to no input"),
    (_ragged_output, "'report': bad input or output structure"),
    (lambda p: _piece(p, 'merge').graph.node.add(name='x', op='NoSuchOp'),
     "'merge' holds op 'NoSuchOp'"),
    (lambda p: _piece(p, 'merge').graph.node.add(
        name='x', op='AddV2', input=['missing:0', 'missing:0']),
     "'merge': its graph does not import"),
    (_vector_initialize, r'initialize: its result is float32\[2\], but '
     r'prepare takes S = float32\b'),
    (lambda p: setattr(p, 'broadcast_bits', 31),
     'the file says C is 31 bits per client, its pieces say 32'),
])
def test_inconsistent_forms_raise_form_errors(smoke_bytes, tmp_path, edit,
                                              problem):
  path = _write(tmp_path, _edited(smoke_bytes, edit))
  with pytest.raises(cf.FormError, match=problem) as error:
    cf.load(path)
  assert str(path) in str(error.value)


# ---------------------------------------------------------------------------
# Ops outside the allowlist.


def _with_work(smoke, work):
  return cf.CanonicalForm(**dict(
      smoke.pieces, work=cf.Piece('work', work, smoke.work.input_specs)))


def test_python_code_in_a_form_is_refused_unless_allowed(smoke, tmp_path):
  def work(data, broadcast):
    doubled = tf.py_function(lambda v: v * 2.0, [data], tf.float32)
    doubled.set_shape([])
    return (doubled * broadcast[0], data), ()

  path = tmp_path / 'py.pb'
  cf.save(_with_work(smoke, work), path)
  with pytest.raises(cf.FormError, match=r"piece 'work' holds op "
                     r"'EagerPyFunc'.*allow_ops") as error:
    cf.load(path)
  assert str(path) in str(error.value)
  loaded = cf.load(path, allow_ops={'EagerPyFunc'})
  assert loaded.work.op_count() > 0
  assert cf.load(path, allow_any_op=True).has_client_state is False


def test_file_io_inside_a_function_library_is_refused(smoke, tmp_path):
  @tf.function(autograph=False)
  def read(x):
    contents = tf.io.read_file('/etc/hostname')
    return x + tf.cast(tf.strings.length(contents), tf.float32)

  def work(data, broadcast):
    return (read(data) * broadcast[0], data), ()

  path = tmp_path / 'io.pb'
  cf.save(_with_work(smoke, work), path)
  with pytest.raises(cf.FormError, match=r"piece 'work' holds op 'ReadFile' "
                     r"\(node .* of function"):
    cf.load(path)
  cf.load(path, allow_ops={'ReadFile'})


def test_default_allowlist_refuses_dangerous_ops():
  allowed = cf.saving.default_allowed_ops()
  for op in ('PyFunc', 'EagerPyFunc', 'ReadFile', 'WriteFile', 'Save',
             'SaveV2', 'Restore', 'RestoreV2', 'MatchingFiles', 'PrintV2',
             'TFRecordDatasetV2', 'ImmutableConst', 'CacheDataset', 'Abort',
             'RemoteCall', 'VarHandleOp', 'RandomUniform'):
    assert op not in allowed, op
  for op in ('Conv2D', 'StatefulPartitionedCall', 'ReduceDataset',
             'StatelessRandomUniformFullIntV2', 'TopKV2', 'Placeholder'):
    assert op in allowed, op


def test_the_allowlist_table_holds_what_its_rules_allow():
  """The table the loader and the TF-free reader read is the rules' answer
  for the installed TensorFlow (after an upgrade: python -m
  canonical.saving.op_allowlist, and read what changed)."""
  table = op_allowlist.default_allowed_ops()
  derived = op_allowlist.ops_the_rules_allow()
  assert table == derived, (
      f'canonical/saving/allowed_ops.txt is stale: the rules add '
      f'{sorted(derived - table)}, drop {sorted(table - derived)}')
  with open(op_allowlist.TABLE, encoding='utf-8') as f:
    assert f.read() == op_allowlist.table_text(derived)


# ---------------------------------------------------------------------------
# Fuzzing: a loaded form or a FormError, nothing else.


def _mutate(data, rng):
  data = bytearray(data)
  kind = rng.integers(4)
  position = int(rng.integers(len(data)))
  if kind == 0:
    for _ in range(int(rng.integers(1, 4))):
      data[int(rng.integers(len(data)))] = int(rng.integers(256))
  elif kind == 1:
    del data[position:position + int(rng.integers(1, 16))]
  elif kind == 2:
    data[position:position] = bytes(rng.integers(0, 256, int(
        rng.integers(1, 8))).astype(np.uint8))
  else:
    data[position] ^= 1 << int(rng.integers(8))
  return bytes(data)


def test_fuzzed_files_load_or_raise_form_errors(smoke_bytes):
  rng = np.random.default_rng(0)
  payload = smoke_bytes[envelope.HEADER_BYTES:]
  outcomes = {'loaded': 0, 'refused': 0}
  for i in range(300):
    if i % 3 == 0:  # The raw file: the envelope catches it.
      data = _mutate(smoke_bytes, rng)
    else:  # The payload behind a valid checksum: the parser and checks.
      data = envelope.wrap(_mutate(payload, rng))
    try:
      form_file.from_bytes(data, where='fuzzed.pb')
      outcomes['loaded'] += 1
    except cf.FormError as e:
      assert str(e).startswith('fuzzed.pb'), e
      outcomes['refused'] += 1
  assert outcomes['refused'] > 100, outcomes
