"""A loaded form is sealed: its calls resolve only inside the file, its
functions never meet another form's, and what would abort TensorFlow is
refused at load.

Loads that could abort the process run in a child process, so a regression
fails one test instead of ending the session.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical.saving import envelope
from canonical.saving import form_file
from example_processes import summed_process
from example_processes import weighted_data
from example_processes import weighted_mean_process

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../../..'))


@tf.function(autograph=False)
def _triple(x):
  return 3.0 * x


def _work(x):
  return _triple(x)


def _process_with_a_library_function():
  """Its work calls `_triple` (a function in the work piece's library)."""
  return summed_process(_work)


@pytest.fixture(scope='module')
def form_bytes():
  return form_file.to_bytes(cf.compile(_process_with_a_library_function()))


def _edited(data, edit):
  proto = form_file.parse(data)
  edit(next(p for p in proto.pieces if p.name == 'work').graph)
  return envelope.wrap(proto.SerializeToString())


def _calls(graph_def):
  """The NodeDefs (graph and library) that call a function by attribute."""
  nodes = list(graph_def.node) + [n for f in graph_def.library.function
                                  for n in f.node_def]
  return [n for n in nodes if n.op in ('PartitionedCall',
                                       'StatefulPartitionedCall')]


def _triple_function(graph_def):
  return next(f for f in graph_def.library.function
              if 'triple' in f.signature.name)


def test_the_work_piece_calls_a_library_function(form_bytes):
  graph = next(p for p in form_file.parse(form_bytes).pieces
               if p.name == 'work').graph
  assert any(c.attr['f'].func.name == _triple_function(graph).signature.name
             for c in _calls(graph))
  form = form_file.from_bytes(form_bytes)
  update, _ = form.work(np.float32(2.0), ())
  assert float(update[0]) == 6.0


def test_a_call_to_a_function_the_file_does_not_define_is_refused(
    form_bytes):
  # The process has `_triple` registered (it compiled the form), so TF
  # would resolve this call at run time: the bypass of the allowlist.
  def drop_the_definition(graph):
    name = _triple_function(graph).signature.name
    kept = [f for f in graph.library.function if f.signature.name != name]
    del graph.library.function[:]
    graph.library.function.extend(kept)

  with pytest.raises(cf.FormError, match=r"bad\.pb: piece 'work': node .* "
                     r"calls function '.*triple.*', which the piece does "
                     'not define'):
    form_file.from_bytes(_edited(form_bytes, drop_the_definition), 'bad.pb')

  def call_elsewhere(graph):
    for call in _calls(graph):
      call.attr['f'].func.name = 'our_own_tfrecord_reader'

  with pytest.raises(cf.FormError, match="'our_own_tfrecord_reader', which "
                     'the piece does not define'):
    form_file.from_bytes(_edited(form_bytes, call_elsewhere), 'bad.pb')


def test_a_function_that_calls_itself_is_refused(form_bytes):
  def recurse(graph):
    function = _triple_function(graph)
    call = function.node_def.add(name='again', op='PartitionedCall')
    call.attr['f'].func.name = function.signature.name

  with pytest.raises(cf.FormError, match=r"function '.*triple.*' calls "
                     r'itself \(.*triple.* -> .*triple.*\)'):
    form_file.from_bytes(_edited(form_bytes, recurse), 'bad.pb')


def test_loaded_functions_get_names_of_their_content(form_bytes):
  form = form_file.from_bytes(form_bytes)
  names = [f.signature.name for f in form.work.graph_def.library.function]
  assert names and all('_form_' in n for n in names)
  called = {c.attr['f'].func.name for c in _calls(form.work.graph_def)}
  assert called and called <= set(names)


def _compile_in_child(tmp_path, scale):
  """A weighted-mean form saved by a fresh process: TF names its functions
  by a per-process counter, so two such processes reuse names."""
  path = tmp_path / f'scale{scale}.pb'
  code = textwrap.dedent(f'''
      import sys
      sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, 'tests', 'support')!r}]
      import canonical as cf
      from example_processes import weighted_mean_process
      cf.save(cf.compile(weighted_mean_process({scale})), {str(path)!r})
  ''')
  subprocess.run([sys.executable, '-c', code], check=True, timeout=300,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  return path


@pytest.mark.slow
def test_two_forms_compiled_apart_load_and_run_in_one_process(tmp_path):
  half, double = (cf.load(_compile_in_child(tmp_path, s)) for s in (0.5, 2.0))
  names = lambda form: {f.signature.name.split('_form_')[0]
                        for f in form.update.graph_def.library.function}
  assert names(half) & names(double), 'no shared names: nothing tested'
  data = list(weighted_data(0, 5).values())
  for form, scale in ((half, 0.5), (double, 2.0)):
    expected = cf.compile(weighted_mean_process(scale))
    state = expected.initialize()
    for _ in range(2):
      state, _ = cf.run_round(expected, state, data)
    loaded_state = half.initialize()
    for _ in range(2):
      loaded_state, _ = cf.run_round(form, loaded_state, data)
    np.testing.assert_allclose(loaded_state, state, rtol=1e-6)
  assert not np.allclose(cf.run_round(half, state, data)[0],
                         cf.run_round(double, state, data)[0])
  # What they compute, whichever process compiled them and however loaded.
  assert cf.fingerprint(double) == cf.fingerprint(
      cf.compile(weighted_mean_process(2.0)))
  assert cf.fingerprint(half) != cf.fingerprint(double)


def test_saving_twice_gives_the_same_bytes(form_bytes):
  form = cf.compile(_process_with_a_library_function())
  assert form_file.to_bytes(form) == form_file.to_bytes(form)
  loaded = form_file.from_bytes(form_bytes)
  assert form_file.to_bytes(loaded) == form_file.to_bytes(loaded)


# ---------------------------------------------------------------------------
# Constants TensorFlow would abort on, each loaded in a child process.


def _const_edits():
  """name -> (edit of a Const's AttrValue map, expected message)."""
  def dtype_mismatch(attr):
    attr['value'].tensor.dtype = tf.int64.as_datatype_enum

  def huge_from_one_value(attr):
    tensor = attr['value'].tensor
    tensor.ClearField('tensor_content')
    del tensor.tensor_shape.dim[:]
    tensor.tensor_shape.dim.add(size=1 << 28)
    del tensor.float_val[:]
    tensor.float_val.append(1.0)

  def content_of_another_size(attr):
    attr['value'].tensor.tensor_content = b'\0' * 12

  def negative_dimension(attr):
    attr['value'].tensor.tensor_shape.dim.add(size=-3)

  return {
      'dtype_mismatch': (dtype_mismatch, 'declared float32 holds a int64'),
      'huge_from_one_value': (huge_from_one_value,
                              'states 1 values for 1024 MiB'),
      'content_of_another_size': (content_of_another_size,
                                  'holds 12 bytes of content'),
      'negative_dimension': (negative_dimension, 'undefined shape'),
  }


def _with_float_constant(graph):
  """The work's `3.0` constant, in its library function."""
  node = next(n for n in _triple_function(graph).node_def
              if n.op == 'Const' and n.attr['dtype'].type ==
              tf.float32.as_datatype_enum)
  return node.attr


@pytest.mark.parametrize('name', sorted(_const_edits()))
def test_constants_tensorflow_would_abort_on_are_refused(form_bytes, tmp_path,
                                                         name):
  edit, message = _const_edits()[name]
  path = tmp_path / f'{name}.pb'
  path.write_bytes(_edited(form_bytes,
                           lambda graph: edit(_with_float_constant(graph))))
  code = textwrap.dedent(f'''
      import json, sys
      sys.path.insert(0, {ROOT!r})
      import canonical as cf
      try:
        cf.load({str(path)!r})
        print(json.dumps('loaded'))
      except cf.FormError as e:
        print(json.dumps(str(e)))
  ''')
  child = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, timeout=300,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  assert child.returncode == 0, child.stderr[-2000:]
  error = json.loads(child.stdout.strip().splitlines()[-1])
  assert error.startswith(f"{path}: piece 'work': node "), error
  assert message in error, error


# ---------------------------------------------------------------------------
# Shape hints TensorFlow trusts: refused when they disagree with the graph,
# dropped at load.

_PLAIN = os.path.join(ROOT, 'tests', 'data', 'main_job_forms_tff', 'plain.pb')


def _hinted(function_name, dims, edit):
  """The main job's plain form with `edit` applied to the hint of `work`'s
  first function argument named like `function_name` hinted `dims`."""
  with open(_PLAIN, 'rb') as f:
    proto = form_file.parse(f.read())
  edited = 0
  for function in next(p for p in proto.pieces
                       if p.name == 'work').graph.library.function:
    if function_name not in function.signature.name:
      continue
    for argument in function.arg_attr.values():
      hint = argument.attr.get('_output_shapes')
      if hint is not None and not edited and [
          d.size for d in hint.list.shape[0].dim] == dims:
        edit(hint.list.shape[0].dim)
        edited += 1
  assert edited == 1
  return proto


@pytest.mark.parametrize('function, dims, given', [
    # A ReduceDataset's function: its element, as the dataset states it.
    ('reduce_train_on_batch', [-1, 8, 8, 1], r'\(None, 8, 8, 1\)'),
    # The FilterDataset predicate before it.
    ('Dataset_filter_has_examples', [-1, 8, 8, 1], r'\(None, 8, 8, 1\)'),
    # A function fed by another call's output, as TensorFlow infers it.
    ('__inference_traced_417', [3, 3, 1, 8], r'\(3, 3, 1, 8\)'),
])
def test_a_shape_hint_disagreeing_with_its_input_is_refused_at_load(
    function, dims, given):
  """The main job's work trains in a function whose element argument is
  hinted [-1, 8, 8, 1], as the dataset feeding it says; a file that hints
  [8, 8, 1] instead aborted TensorFlow mid-round (`Check failed: d <
  dims()`). The loader refuses such a file, naming the function, the
  argument and both shapes, wherever the argument's input has a shape the
  graph states or TensorFlow infers."""
  proto = _hinted(function, dims, lambda dims: dims.pop(0))
  claimed = r'\(' + ', '.join(str(d) for d in dims[1:]) + r'\)'
  with pytest.raises(cf.FormError, match=r"piece 'work': function "
                     rf"'__inference_{function.replace('__inference_', '')}"
                     rf"(_\d+)?' claims shape {claimed} for its argument "
                     rf"\d+ \('args_\d+'\), whose input has shape {given}"):
    form_file.from_bytes(envelope.wrap(proto.SerializeToString()), 'f')


def test_a_loaded_form_keeps_no_shape_hints():
  """Hints that agree are dropped too: TensorFlow infers the shapes from
  what each function is given (loaded forms run bit for bit like their
  builders' forms: test_saving.py)."""
  with open(_PLAIN, 'rb') as f:
    data = f.read()
  assert b'_output_shapes' in data
  loaded = form_file.from_bytes(data)
  assert not any('_output_shapes' in argument.attr
                 for piece in loaded.pieces.values()
                 for function in piece.graph_def.library.function
                 for argument in function.arg_attr.values())
