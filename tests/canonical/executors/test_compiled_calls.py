"""A federated computation called from Python runs as its compiled form:
the results, structures and dtypes the reference executor gives, bit for
bit; the reference only where the compiler refuses."""

import collections
import re

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import compiler
from canonical import errors
from canonical.core import context
from canonical.core import unrolled_datasets
from canonical.executors import batched_work
from canonical.executors import compiled
from canonical.executors import dataset_elements
from canonical.executors import reference

import example_processes
import tff_087_examples

F = tf.TensorSpec([], tf.float32)
F2 = tf.TensorSpec([2], tf.float32)


@pytest.fixture(params=['batched', 'per_client'])
def clients_run(request, monkeypatch):
  """Both ways a compiled round runs its clients: their datasets read as
  elements and their work batched (what a round of many clients takes), or
  work called once per client on the data as given (a round of few)."""
  monkeypatch.setattr(compiled, 'BATCH_FROM',
                      1 if request.param == 'batched' else 10**9)
  return request.param


def _assert_identical(actual, expected):
  """Same structures (containers included), dtypes and bits."""
  assert (tf.nest.map_structure(lambda _: 0, actual) ==
          tf.nest.map_structure(lambda _: 0, expected))
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    a, e = np.asarray(a), np.asarray(e)
    assert a.dtype == e.dtype and a.shape == e.shape
    np.testing.assert_array_equal(a, e)


def _reference(computation, *args):
  return context.as_numpy(reference.run(computation, *args))


def _check_rounds(process, rounds, state=None, client_states=None):
  """Runs `rounds` (each the clients' data, built afresh for each way, as a
  dataset may change between its iterations) through `process.next` called
  from Python and by the reference; returns the last result."""
  assert compiled.compiled_round(process.next) is not None
  state = process.initialize() if state is None else state
  for make_data in rounds:
    args = [state, make_data()] + ([client_states] if client_states else [])
    expected = _reference(process.next, *args)
    args[1] = make_data()
    actual = process.next(*args)
    _assert_identical(actual, expected)
    state = actual[0] if isinstance(actual, tuple) else actual
    if client_states:
      client_states = [s for s in actual[2]] if not isinstance(
          actual[2], tuple) else actual[2]
  return actual


def _keras_data(seed, clients=3, batch=2):
  """A function making the same clients' datasets afresh at each call."""
  sizes = [5, 3, 1, 4, 2][:clients]

  def make():
    rng = np.random.default_rng(seed)
    datasets = []
    for n in sizes:
      x = rng.normal(size=(n, 4)).astype(np.float32)
      y = (x[:, 0] > 0).astype(np.int32)
      datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))
    return datasets

  return make


def _sgd(rate):
  return tff.learning.optimizers.build_sgdm(learning_rate=rate)


LEARNING = {
    'weighted_fed_avg': lambda: tff.learning.algorithms.build_weighted_fed_avg(
        tff_087_examples.model_fn, _sgd(0.1), _sgd(1.0)),
    'unweighted_fed_avg': lambda: (
        tff.learning.algorithms.build_unweighted_fed_avg(
            tff_087_examples.model_fn, _sgd(0.1))),
    'fed_sgd': lambda: tff.learning.algorithms.build_fed_sgd(
        tff_087_examples.model_fn),
    'fed_eval': lambda: tff.learning.algorithms.build_fed_eval(
        tff_087_examples.model_fn),
    'compression': lambda: tff.learning.algorithms.build_weighted_fed_avg(
        tff_087_examples.model_fn, _sgd(0.1),
        model_aggregator=tff.learning.compression_aggregator()),
    'dp': lambda: tff.learning.algorithms.build_unweighted_fed_avg(
        tff_087_examples.model_fn, _sgd(0.1),
        model_aggregator=tff.learning.dp_aggregator(
            noise_multiplier=0.1, clients_per_round=3)),
    'secure': lambda: tff.learning.algorithms.build_weighted_fed_avg(
        tff_087_examples.model_fn, _sgd(0.1),
        model_aggregator=tff.learning.secure_aggregator()),
}


@pytest.mark.parametrize('name', sorted(LEARNING))
def test_learning_processes_called_from_python_are_the_reference(
    name, clients_run):
  del clients_run
  process = LEARNING[name]()
  _check_rounds(process, [_keras_data(1), _keras_data(2, clients=5)])


def test_element_lists_and_datasets_give_the_same_rounds():
  process = LEARNING['weighted_fed_avg']()
  state = process.initialize()
  datasets = _keras_data(3)()
  lists = [list(d.as_numpy_iterator()) for d in datasets]
  _assert_identical(process.next(state, lists),
                    _reference(process.next, state, _keras_data(3)()))
  _assert_identical(process.next(state, lists), process.next(state, datasets))


@pytest.mark.parametrize('name', [
    'sum_process', 'weighted_mean_process', 'max_process',
    'two_broadcasts_process', 'no_broadcast_process', 'secure_sums_process',
    'client_outputs_process'])
def test_example_rounds_called_from_python_are_the_reference(
    name, clients_run):
  del clients_run
  process = getattr(example_processes, name)()
  member = process.next.parameter_types[1].member

  def data():
    rng = np.random.default_rng(5)
    return [tf.nest.map_structure(
        lambda s: rng.normal(size=s.shape).astype(s.dtype.as_numpy_dtype)
        if s.dtype.is_floating else rng.integers(
            0, 9, size=s.shape).astype(s.dtype.as_numpy_dtype),
        member) for _ in range(4)]

  _check_rounds(process, [data, data])


def test_a_round_keeping_client_state(clients_run):
  del clients_run
  process = example_processes.client_state_process()
  clients = list(example_processes.client_state_data().values())[:4]
  states = [process.client_state_initializer() for _ in clients]
  state = process.initialize()
  expected = _reference(process.next, state, clients, states)
  actual = process.next(state, clients, states)
  _assert_identical(actual, expected)
  _assert_identical(process.next(actual[0], clients, actual[2]),
                    _reference(process.next, expected[0], clients,
                               expected[2]))


def test_a_next_returning_only_the_state():

  @tff.federated_computation(tff.type_at_server(F),
                             tff.type_at_clients(tff.SequenceType(F)))
  def next_fn(state, data):
    total = tff.federated_sum(tff.federated_map(
        tff.tf_computation(lambda d: d.reduce(0.0, lambda a, x: a + x)),
        data))
    return tff.federated_map(tff.tf_computation(lambda s, t: s + t),
                             (state, total))

  process = tff.templates.IterativeProcess(
      tff.federated_computation(
          lambda: tff.federated_value(0.0, tff.SERVER)), next_fn)
  data = [[1.0, 2.0], [3.0], []]
  assert compiled.compiled_round(next_fn) is not None
  assert float(process.next(1.0, data)) == 7.0
  _assert_identical(next_fn(1.0, data), _reference(next_fn, 1.0, data))


def _tff_summing_round():
  """A TFF 0.87 program's own text: its round over sequences of float32."""

  @tff.tensorflow.computation(tff.SequenceType(np.float32))
  def local_sum(ds):
    return ds.reduce(np.float32(0), lambda a, x: a + x)

  @tff.tensorflow.computation(np.float32, np.float32)
  def add(a, b):
    return a + b

  @tff.federated_computation(
      tff.FederatedType(np.float32, tff.SERVER),
      tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS))
  def next_fn(state, data):
    total = tff.federated_sum(tff.federated_map(local_sum, data))
    return tff.federated_map(add, (state, total)), total

  return next_fn


# Elements given from Python in every form TFF 0.87 took for float32 (a
# Python float, int or bool; numpy float64 and int32, cast), and what it
# gave: (9.0, 8.0) from state 1. Misfits it refused: another shape, a string.
_ELEMENTS = [[1.0, 2], [True], [np.float64(3)], [np.int32(1)], []]
_MISFITS = (
    ([3.0, [4.0, 5.0]], r'element 1\b.*expected shape \(\), got \(2,\)'),
    ([1.5, 'x'], r'element 1\b.*expected float32, got <U1'))


def test_a_call_takes_python_element_lists_as_tff_takes_them():
  next_fn = _tff_summing_round()
  assert compiled.compiled_round(next_fn) is not None  # The fast path.
  state, total = next_fn(np.float32(1), _ELEMENTS)
  assert (float(state), float(total)) == (9.0, 8.0)
  for misfit, why in _MISFITS:
    with pytest.raises(errors.FederatedError) as caught:
      next_fn(np.float32(1), [[1.0], misfit])
    assert '(client 1): ' in str(caught.value)
    assert re.search(why, str(caught.value)), str(caught.value)


@pytest.mark.parametrize('merge_seed', [None, 3])  # Batched; per client.
def test_a_forms_round_takes_python_element_lists_and_names_a_misfit(
    merge_seed):
  """Python numbers take the element's dtype, as in a call of the
  process; a typed value of another dtype (which a call casts, as TFF
  does), another shape or a string is refused naming the piece, the client
  and the element."""
  form = tff.backends.mapreduce.get_map_reduce_form_for_computation(
      _tff_summing_round())
  state, total = tff.run_round(form, np.float32(1), [[1.0, 2], [True], []],
                               merge_seed=merge_seed)
  assert (float(state), float(total)) == (5.0, 4.0)
  for misfit, why in _MISFITS + (
      ([np.float64(3)], r'element 0\b.*expected float32, got float64'),):
    with pytest.raises(errors.InvalidTypeError) as caught:
      tff.run_round(form, np.float32(1), [[1.0], misfit],
                    merge_seed=merge_seed)
    message = str(caught.value)
    assert "Piece 'work'" in message and 'client 1: ' in message
    assert re.search(why, message), message


def test_a_computation_the_compiler_refuses_runs_by_the_reference():

  @tff.federated_computation(tff.type_at_clients(F))
  def clients_only(values):
    return tff.federated_sum(values)

  @tff.federated_computation(tff.type_at_server(F), tff.type_at_clients(F))
  def returns_clients(state, values):
    return state, values

  for computation, args, want in ((clients_only, ([1.0, 2.5],), 3.5),
                                  (returns_clients, (1.0, [2.0]), None)):
    assert compiled.compiled_round(computation) is None
    result = computation(*args)
    if want is not None:
      assert float(result) == want
  assert returns_clients(1.0, [2.0, 3.0])[1] == [2.0, 3.0]


def test_a_round_is_compiled_once(monkeypatch):
  process = LEARNING['unweighted_fed_avg']()
  calls = []
  real = compiler.compile
  monkeypatch.setattr(compiler, 'compile',
                      lambda *a, **k: calls.append(1) or real(*a, **k))
  state = process.initialize()
  for _ in range(3):
    state = process.next(state, _keras_data(4)()).state
  assert len(calls) == 1


def test_datasets_of_the_wrong_type_are_named_as_the_reference_names_them():
  process = LEARNING['weighted_fed_avg']()
  state = process.initialize()
  wrong = [tf.data.Dataset.from_tensor_slices(
      (np.zeros([2, 4], np.float32), np.zeros([2], np.float32))).batch(1)]
  with pytest.raises(tff.FederatedError) as from_python:
    process.next(state, wrong)
  with pytest.raises(tff.FederatedError) as by_reference:
    reference.run(process.next, state, wrong)
  assert str(from_python.value) == str(by_reference.value)
  assert 'client 0' in str(from_python.value)


def test_no_clients(clients_run):
  del clients_run
  process = LEARNING['weighted_fed_avg']()
  state = process.initialize()
  _assert_identical(process.next(state, []),
                    _reference(process.next, state, []))


# ---------------------------------------------------------------------------
# Datasets read as their elements


def _datasets():
  x = np.arange(14, dtype=np.float32).reshape(7, 2)
  y = np.arange(7, dtype=np.int32)
  words = np.array([b'a', b'bb', b'c', b'd', b'e', b'f', b'g'])
  bases = {
      'dict': tf.data.Dataset.from_tensor_slices(
          collections.OrderedDict(x=x, y=y)),
      'strings': tf.data.Dataset.from_tensor_slices((x, y, words)),
      'scalars': tf.data.Dataset.from_tensor_slices(y),
      'one_tensor': tf.data.Dataset.from_tensors((x, y)),
      'empty': tf.data.Dataset.from_tensor_slices(y[:0]),
      'range': tf.data.Dataset.range(5),
      'mapped': tf.data.Dataset.from_tensor_slices((x, y)).map(
          lambda a, b: (a * 2, b)),
  }
  shapes = {
      'whole': lambda d: d,
      'batch3': lambda d: d.batch(3),
      'batch3_drop': lambda d: d.batch(3, drop_remainder=True),
      'batch1': lambda d: d.batch(1),
      'batch10_drop': lambda d: d.batch(10, drop_remainder=True),
      'prefetched': lambda d: d.batch(3).prefetch(1),
      'repeated': lambda d: d.batch(3).repeat(2),
  }
  return {f'{b}_{s}': (lambda b=b, s=s: shapes[s](bases[b]))
          for b in bases for s in shapes}


DATASETS = _datasets()


@pytest.mark.parametrize('name', sorted(DATASETS))
def test_a_dataset_read_as_its_elements(name):
  dataset = DATASETS[name]()
  read = dataset_elements.encoded(dataset)
  assert read is not None
  elements = read.elements()
  expected = list(dataset.as_numpy_iterator())
  assert len(elements) == len(expected) == len(read)
  for got, want in zip(elements, expected):
    _assert_identical(got, want)
  assert dataset_elements.encoded(dataset) is read  # Read once.


def test_encodings_of_several_clients_concatenate_as_their_elements_do():
  spec = DATASETS['dict_batch3']().element_spec
  clients = [dataset_elements.encoded(DATASETS[n]())
             for n in ('dict_batch3', 'dict_batch10_drop', 'dict_batch1')]
  as_lists = [c.elements() for c in clients]
  joined = unrolled_datasets.concatenate(spec, clients)
  for got, want in zip(joined, unrolled_datasets.concatenate(spec, as_lists)):
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


@pytest.mark.parametrize('make', [
    lambda d: d.shuffle(7, seed=1),
    lambda d: d.map(lambda e: e + tf.random.uniform([], dtype=tf.int32,
                                                    maxval=3)),
    lambda d: tf.data.Dataset.from_generator(lambda: iter([1, 2]),
                                             output_signature=tf.TensorSpec(
                                                 [], tf.int32)),
    lambda d: tf.data.Dataset.sample_from_datasets([d, d], seed=1),
])
def test_a_dataset_whose_iterations_may_differ_stays_a_dataset(make):
  dataset = make(tf.data.Dataset.range(7).map(lambda i: tf.cast(i, tf.int32)))
  assert not dataset_elements.repeatable(dataset)
  assert dataset_elements.encoded(dataset) is None


def test_a_shuffled_clients_round_still_gives_the_reference(clients_run):
  del clients_run
  # Each epoch of work sees the order TensorFlow gives that iteration.

  @tff.tf_computation(tff.SequenceType(F))
  def two_epochs(data):
    first = data.reduce(0.0, lambda a, x: a * 2.0 + x)
    return data.reduce(first, lambda a, x: a * 3.0 + x)

  @tff.federated_computation(tff.type_at_server(F),
                             tff.type_at_clients(tff.SequenceType(F)))
  def next_fn(state, data):
    return state, tff.federated_sum(tff.federated_map(two_epochs, data))

  def data():
    return [tf.data.Dataset.from_tensor_slices(
        np.arange(6, dtype=np.float32) + i).shuffle(6, seed=i)
            for i in range(3)]

  _assert_identical(next_fn(0.0, data()), _reference(next_fn, 0.0, data()))


def test_element_lists_of_batches_of_several_sizes_as_tff_takes_them(
    clients_run):
  del clients_run
  # TFF 0.87 gives 6.0, 12.0 and 21.0 for these three calls.
  batches = tff.SequenceType(tff.TensorType(tf.float32, [None, 2]))

  @tff.tf_computation(batches)
  def total(data):
    return data.reduce(0.0, lambda a, x: a + tf.reduce_sum(x))

  @tff.federated_computation(tff.type_at_server(F),
                             tff.type_at_clients(batches))
  def next_fn(state, data):
    return state, tff.federated_sum(tff.federated_map(total, data))

  ones = np.ones([2, 2], np.float32)
  two_clients = [[ones, ones[:1]], [np.ones([3, 2], np.float32)]]
  assert float(next_fn(0.0, two_clients)[1]) == 12.0
  assert float(_reference(next_fn, 0.0, two_clients)[1]) == 12.0
  nested = [[[[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]]]]
  assert float(next_fn(0.0, nested)[1]) == 21.0
  assert float(_reference(next_fn, 0.0, nested)[1]) == 21.0
  with pytest.raises(tff.FederatedError, match=r'\(client 1\): element 0'):
    next_fn(0.0, [[ones], [np.ones([2, 3], np.float32)]])


def test_a_compiled_round_goes_with_its_computation():
  import gc  # pylint: disable=g-import-not-at-top
  process = LEARNING['unweighted_fed_avg']()
  process.next(process.initialize(), _keras_data(1)())
  before = len(compiled._ROUNDS)  # pylint: disable=protected-access
  del process
  gc.collect()
  assert len(compiled._ROUNDS) < before  # pylint: disable=protected-access


def test_a_round_keeping_client_state_with_outputs(clients_run):
  del clients_run
  process = example_processes.client_outputs_with_state_process()
  member = process.next.parameter_types[1].member
  rng = np.random.default_rng(3)
  clients = [rng.normal(size=member.shape).astype(np.float32)
             for _ in range(3)]
  states = [process.client_state_initializer() for _ in clients]
  state = process.initialize()
  _assert_identical(process.next(state, clients, states),
                    _reference(process.next, state, clients, states))


def test_many_clients_datasets_are_read_once_and_their_work_batched(
    monkeypatch):
  process = LEARNING['weighted_fed_avg']()
  state = process.initialize()
  datasets = _keras_data(6, clients=5)()
  reads = []
  real = dataset_elements.encoded
  monkeypatch.setattr(dataset_elements, 'encoded',
                      lambda d: reads.append(d) or real(d))
  monkeypatch.setattr(compiled, 'BATCH_FROM', 5)
  batched = []
  real_call = batched_work.BatchedWork.__call__
  monkeypatch.setattr(batched_work.BatchedWork, '__call__',
                      lambda self, *a: batched.append(1) or real_call(self,
                                                                      *a))
  first = process.next(state, datasets)
  assert len(reads) == 5 and len(batched) == 1
  again = process.next(state, datasets)
  assert all(dataset_elements.encoded(d) is real(d) for d in datasets)
  _assert_identical(first, again)
  process.next(state, datasets[:4])  # Fewer: work on the datasets.
  assert len(batched) == 2


def test_a_compiler_fault_is_said_and_the_reference_runs(monkeypatch):
  process = LEARNING['unweighted_fed_avg']()

  def broken(*args, **kwargs):
    raise KeyError('a fault')

  monkeypatch.setattr(compiler, 'compile', broken)
  state = process.initialize()
  with pytest.warns(RuntimeWarning, match="failed to compile.*KeyError.*"
                    'reference executor'):
    result = process.next(state, _keras_data(1)())
  _assert_identical(result, _reference(process.next, state, _keras_data(1)()))
