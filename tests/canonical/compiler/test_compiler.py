"""The compiler's passes, each on its own: check, partition, emit.

Errors name the offending operation and the user's line: each offending call
below carries a `# line:<name>` marker, and `_where(name)` is its `file:line`.
"""


import numpy as np
import pytest
import tensorflow as tf

import canonical as cf
from canonical import compiler
from canonical.core import computations
from canonical import form as form_lib

import marked_lines

F = tf.TensorSpec([], tf.float32)
I = tf.TensorSpec([], tf.int32)
F2 = tf.TensorSpec([2], tf.float32)


_where = marked_lines.finder(__file__)


@cf.tf_computation(F)
def _double(x):
  return 2.0 * x


@cf.tf_computation(F, F)
def _add(a, b):
  return a + b


_zero_state = cf.tf_computation(lambda: tf.constant(0.0))


def _process(next_fn, **kwargs):
  return cf.IterativeProcess(kwargs.pop('initialize', _zero_state), next_fn,
                             **kwargs)


def _compile_error(next_fn, **kwargs):
  with pytest.raises(cf.FederatedError) as error:
    cf.compile(_process(next_fn, **kwargs))
  return str(error.value)


def _process_error(next_fn, **kwargs):
  with pytest.raises(cf.FederatedError) as error:
    _process(next_fn, **kwargs)
  return str(error.value)


# ----------------------------------------------------------------------------
# check: the round's dependency rules


def test_broadcast_of_an_aggregated_value_is_rejected():

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    total = cf.federated_sum(data)  # line:first_sum
    again = cf.federated_broadcast(total)  # line:late_broadcast
    return state, cf.federated_sum(cf.federated_map(_add, (data, again)))

  # The aggregation that follows is named with both ends and the broadcast.
  message = _compile_error(next_fn)
  assert _where('first_sum') in message
  assert _where('late_broadcast') in message


def test_broadcast_after_aggregation_feeding_client_state():

  @cf.federated_computation(cf.server(F), cf.clients(F), cf.clients(F))
  def next_fn(state, data, client_state):
    del client_state
    total = cf.federated_sum(data)  # line:sum_then_keep
    kept = cf.federated_broadcast(total)  # line:broadcast_then_keep
    return state, total, kept

  message = _compile_error(next_fn, client_state_initializer=_zero_state)
  assert message.startswith('federated_broadcast at ' +
                            _where('broadcast_then_keep'))
  assert 'federated_sum at ' + _where('sum_then_keep') in message
  assert 'next round' in message


def test_aggregation_depending_on_another_is_rejected():

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    mean = cf.federated_mean(data)  # line:mean_first
    shared = cf.federated_broadcast(mean)  # line:via
    centered = cf.federated_map(_add, (data, shared))
    spread = cf.federated_max(centered)  # line:max_second
    return state, spread

  message = _compile_error(next_fn)
  assert message.startswith('federated_max at ' + _where('max_second'))
  assert 'federated_mean at ' + _where('mean_first') in message
  assert 'federated_broadcast at ' + _where('via') in message


def test_check_pass_on_its_own():
  """check takes the traced graph; purity first, then the round's rules."""

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    total = cf.federated_sum(data)
    shared = cf.federated_broadcast(total)
    return state, cf.federated_sum(cf.federated_map(_add, (data, shared)))

  process = _process(next_fn)  # Its signature is fine; its round is not.
  graph = process.next.trace()
  compiler.check_purity(process, graph)  # Pure.
  with pytest.raises(cf.FederatedError, match='same round'):
    compiler.check_round(graph, has_client_state=False)
  with pytest.raises(cf.FederatedError, match='same round'):
    compiler.check(process, graph)


def test_dead_code_is_not_held_against_the_round():

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    total = cf.federated_sum(data)
    cf.federated_broadcast(total)  # Unused: never runs.
    return cf.federated_map(_add, (state, total)), ()

  form = cf.compile(_process(next_fn))
  assert form.broadcast_spec == ()


def test_client_value_returned_as_server_state_or_metrics():

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def as_state(state, data):
    del state
    return cf.federated_map(_double, data), ()  # line:client_state_out

  message = _process_error(as_state)
  assert 'new server state' in message
  assert 'federated_map at ' + _where('client_state_out') in message
  assert 'aggregation' in message

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def as_metrics(state, data):
    return state, data

  message = _process_error(as_metrics)
  assert 'metrics' in message and "parameter 'data'" in message


def test_server_value_returned_as_client_state():

  @cf.federated_computation(cf.server(F), cf.clients(F), cf.clients(F))
  def next_fn(state, data, client_state):
    del data, client_state
    return state, (), cf.federated_map(_double, state)  # line:server_as_client

  message = _process_error(next_fn, client_state_initializer=_zero_state)
  assert 'client state' in message
  assert 'federated_map at ' + _where('server_as_client') in message


# ----------------------------------------------------------------------------
# check: purity


def _map_process(computation, spec=F):
  """A process that maps `computation` over the client data."""

  @cf.federated_computation(cf.server(F), cf.clients(spec))
  def next_fn(state, data):
    mapped = cf.federated_map(computation, data)  # line:map_use
    return state, cf.federated_sum(mapped)

  return next_fn


def test_stateful_random_op_is_rejected_with_its_line():

  @cf.tf_computation(F)
  def noisy(x):
    return x + tf.random.uniform([])  # line:uniform

  message = _compile_error(_map_process(noisy))
  assert "tf_computation 'noisy'" in message
  assert 'RandomUniform' in message and 'stateful random' in message
  assert 'created at ' + _where('uniform') in message
  assert 'federated_map at ' + _where('map_use') in message


def test_py_function_is_rejected_with_its_line():

  @cf.tf_computation(F)
  def calls_python(x):
    y = tf.py_function(np.square, [x], tf.float32)  # line:py_function
    return tf.ensure_shape(y, [])

  message = _compile_error(_map_process(calls_python))
  assert 'EagerPyFunc' in message and 'calls Python' in message
  assert _where('py_function') in message


def test_a_variable_made_inside_a_computation_is_lowered_into_values():

  @cf.tf_computation(F)
  def counts(x):
    counter = tf.Variable(1.0)
    counter.assign_add(x)
    return x + counter

  form = cf.compile(_process(_map_process(counts)))
  for piece in form_lib.PIECES:
    assert not computations.impure_ops(getattr(form, piece).concrete_function)
  _, total = cf.run_round(form, form.initialize(),
                          [tf.constant(1.0), tf.constant(2.0)])
  assert float(total) == (1.0 + 2.0) + (2.0 + 3.0)


def test_reading_a_captured_variable_is_rejected_with_its_line():
  outside = tf.Variable(3.0)

  @cf.tf_computation(F)
  def reads_state(x):
    return x * outside  # line:read_variable

  message = _compile_error(_map_process(reads_state))
  assert 'ReadVariableOp' in message and _where('read_variable') in message


def test_stateful_generator_is_rejected():
  generator = tf.random.Generator.from_seed(1)

  @cf.tf_computation(F)
  def draws(x):
    return x + generator.normal([])  # line:generator

  message = _compile_error(_map_process(draws))
  assert 'not pure' in message and _where('generator') in message


def test_impure_op_inside_a_nested_tf_function():

  @tf.function
  def helper(x):
    return x + tf.random.normal([])  # line:nested_normal

  @cf.tf_computation(F)
  def outer(x):
    return helper(x) * 2.0

  message = _compile_error(_map_process(outer))
  assert 'RandomStandardNormal' in message
  assert _where('nested_normal') in message


def test_impure_op_inside_while_loop_bodies():

  @cf.tf_computation(F)
  def explicit_loop(x):
    def body(i, total):
      return i + 1, total + tf.random.uniform([])  # line:while_body
    return tf.while_loop(lambda i, _: i < 3, body, (0, x))[1]

  message = _compile_error(_map_process(explicit_loop))
  assert _where('while_body') in message

  @cf.tf_computation(F)
  def autograph_loop(x):
    for _ in tf.range(3):
      x += tf.random.shuffle(tf.range(4.0))[0]  # line:autograph_body
    return x

  message = _compile_error(_map_process(autograph_loop))
  assert 'RandomShuffle' in message and _where('autograph_body') in message


def test_impure_op_inside_a_dataset_function():
  spec = tf.data.DatasetSpec(F)

  @cf.tf_computation(spec)
  def jittered_sum(dataset):
    return dataset.map(
        lambda v: v + tf.random.uniform([])  # line:dataset_map
    ).reduce(0.0, lambda a, b: a + b)

  message = _compile_error(_map_process(jittered_sum, spec))
  assert 'RandomUniform' in message and _where('dataset_map') in message


def test_impure_aggregation_and_initialize_are_rejected():
  acc = tf.TensorSpec([], tf.float32)

  @cf.tf_computation(acc, F)
  def noisy_add(a, v):
    return a + v + tf.random.normal([])  # line:noisy_accumulate

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    aggregate = cf.federated_aggregate
    noisy = aggregate(data, 0.0, noisy_add, _add, _double)  # line:agg_use
    return state, noisy

  message = _compile_error(next_fn)
  assert _where('noisy_accumulate') in message
  assert 'federated_aggregate at ' + _where('agg_use') in message

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def fine(state, data):
    return state, cf.federated_sum(data)

  noisy_init = cf.tf_computation(
      lambda: tf.random.uniform([]))  # line:noisy_init
  message = _compile_error(fine, initialize=noisy_init)
  assert 'IterativeProcess initialize' in message
  assert _where('noisy_init') in message


def test_stateless_random_ops_are_pure():

  @cf.tf_computation(F)
  def dithered(x):
    seed = tf.stack([tf.bitcast(x, tf.int32), 7])
    return x + tf.random.stateless_uniform([], seed)

  cf.compile(_process(_map_process(dithered)))


def test_forbidden_op_families():
  assert computations.forbidden_reason('ResourceApplyAdam')
  assert computations.forbidden_reason('RandomUniform')
  assert computations.forbidden_reason('StatefulUniformFullInt')
  assert computations.forbidden_reason('StatelessRandomUniformV2') is None
  assert computations.forbidden_reason('StatefulPartitionedCall') is None
  assert computations.forbidden_reason('ReduceDataset') is None


# ----------------------------------------------------------------------------
# partition


@cf.tf_computation((F, I))
def _server_scale(state):
  return state[0] * 2.0


@cf.tf_computation((F, I), F, F)
def _server_next(state, scale, total):
  return state[0] + scale * total, state[1] + 1


def _partition(next_fn, has_client_state=False):
  return compiler.partition(next_fn.trace(), has_client_state)


def test_partition_places_server_logic_before_and_after():

  @cf.federated_computation(cf.server((F, I)), cf.clients(F))
  def next_fn(state, data):
    scale = cf.federated_map(_server_scale, state)
    scaled = cf.federated_map(_add, (data, cf.federated_broadcast(scale)))
    total = cf.federated_sum(scaled)
    return cf.federated_map(_server_next, (state, scale, total)), total

  plan = _partition(next_fn)
  kinds = lambda ops: [op.kind for op in ops]
  assert kinds(plan.prepare_ops) == ['federated_map']
  assert kinds(plan.work_ops) == ['federated_zip', 'federated_map']
  assert kinds(plan.update_ops) == ['federated_map', 'federated_zip',
                                    'federated_map']
  assert kinds(plan.aggregations) == ['federated_sum']
  # The scale is needed on both sides: update recomputes it.
  assert plan.recomputed_ops == plan.prepare_ops
  assert all(op.output.placement == cf.CLIENTS for op in plan.work_ops)


def test_partition_zips_broadcasts_and_shares_repeated_ones():

  @cf.federated_computation(cf.server((F, I)), cf.clients(F))
  def next_fn(state, data):
    first = cf.federated_broadcast(state[0])
    second = cf.federated_broadcast(state[1])
    again = cf.federated_broadcast(state[0])
    del second
    return state, (cf.federated_sum(cf.federated_map(_add, (data, first))),
                   cf.federated_sum(cf.federated_map(_add, (data, again))))

  plan = _partition(next_fn)
  assert len(plan.broadcasts) == 2  # The unused one is dead code.
  assert len(plan.broadcast_values) == 1
  assert {plan.broadcast_slot(op) for op in plan.broadcasts} == {0}
  assert len(plan.aggregations) == 2


def test_partition_of_rounds_without_broadcast_or_aggregation():

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def no_broadcast(state, data):
    return state, cf.federated_sum(data)

  plan = _partition(no_broadcast)
  assert plan.broadcasts == [] and plan.prepare_ops == []
  assert [op.kind for op in plan.aggregations] == ['federated_sum']

  @cf.federated_computation(cf.server(F), cf.clients(F), cf.clients(F))
  def no_aggregation(state, data, client_state):
    return state, (), cf.federated_map(_add, (data, client_state))

  plan = _partition(no_aggregation, has_client_state=True)
  assert plan.aggregations == [] and plan.update_ops == []
  assert [op.kind for op in plan.work_ops] == ['federated_zip',
                                               'federated_map']


def test_partition_runs_several_client_maps_in_one_work():

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    shared = cf.federated_broadcast(state)
    a = cf.federated_map(_double, data)
    b = cf.federated_map(_add, (a, shared))
    c = cf.federated_map(_double, b)
    return state, (cf.federated_sum(b), cf.federated_max(c),
                   cf.federated_mean(a))

  plan = _partition(next_fn)
  assert [op.kind for op in plan.work_ops].count('federated_map') == 3
  form = cf.compile(_process(next_fn))
  assert len(form.client_update_spec) == 3
  assert len(form.accumulator_spec) == 3


# ----------------------------------------------------------------------------
# emit


def _two_broadcast_process():

  @cf.federated_computation(cf.server((F, I)), cf.clients(F))
  def next_fn(state, data):
    scale = cf.federated_map(_server_scale, state)
    scaled = cf.federated_map(_add, (data, cf.federated_broadcast(scale)))
    shifted = cf.federated_map(
        cf.tf_computation(lambda x, n: x + tf.cast(n, tf.float32), F, I),
        (data, cf.federated_broadcast(state[1])))
    total = cf.federated_sum(scaled)
    return (cf.federated_map(_server_next, (state, scale, total)),
            cf.federated_max(shifted))

  return cf.IterativeProcess(
      cf.tf_computation(lambda: (tf.constant(1.0), tf.constant(0))), next_fn)


def test_emit_pass_on_its_own():
  process = _two_broadcast_process()
  plan = compiler.partition(process.next.trace(), has_client_state=False)
  form = compiler.emit(process, plan, name='by_hand', description='two C')
  assert isinstance(form, cf.CanonicalForm) and form.name == 'by_hand'
  assert form.summary(print_fn=None).startswith(
      "CanonicalForm 'by_hand': two C")
  broadcast = form.prepare((tf.constant(3.0), tf.constant(4)))
  assert [float(broadcast[0]), int(broadcast[1])] == [6.0, 4]
  update, client_state = form.work(1.0, broadcast)
  assert [float(u) for u in update] == [7.0, 5.0] and client_state == ()


def test_emitted_signatures_and_summary():
  form = cf.compile(_two_broadcast_process())
  assert form.broadcast_spec == (F, I)
  assert form.client_update_spec == (F, F)
  assert form.accumulator_spec == (F, F)
  assert form.state_spec == (F, I)
  assert form.broadcast_bits == 64 and form.aggregated_bits == 64
  text = form.summary(print_fn=None)
  for name in form_lib.PIECES:
    assert f'  {name} ' in text
  assert '(float32, <float32,int32>) -> <<float32,float32>,<>>' \
      in text
  assert 'C (broadcast, per client): 64 bits' in text
  assert 'U (aggregated, per client): 64 bits' in text
  printed = []
  form.summary(print_fn=printed.append)
  assert printed == [text]


def _assert_pieces_pure(form):
  for name, piece in form.pieces.items():
    for op_type, node in computations.graph_op_types(piece.concrete_function):
      assert op_type not in computations.FORBIDDEN_OPS, (name, node)
      assert computations.forbidden_reason(op_type) is None, (name, node)


def test_every_emitted_piece_is_pure():
  _assert_pieces_pure(cf.compile(_two_broadcast_process()))
  rows = tf.TensorSpec([None], tf.float32)

  @cf.tf_computation(tf.data.DatasetSpec(F), F)
  def local(dataset, seed):
    total = dataset.reduce(0.0, lambda a, b: a + b)
    noise = tf.random.stateless_uniform([], tf.cast(tf.stack([seed, 1.0]),
                                                    tf.int32))
    return total + noise, total

  @cf.federated_computation(cf.server(F), cf.clients(tf.data.DatasetSpec(F)),
                            cf.clients(F))
  def with_everything(state, data, client_state):
    value, kept = cf.federated_map(local, (data, cf.federated_broadcast(state)))
    stack = cf.federated_aggregate(
        value, np.zeros([0], np.float32),
        cf.tf_computation(lambda s, v: tf.concat([s, [v]], 0), rows, F),
        cf.tf_computation(lambda a, b: tf.concat([a, b], 0), rows, rows),
        cf.tf_computation(tf.reduce_sum, rows))
    return (cf.federated_map(_add, (state, stack)), cf.federated_mean(value),
            cf.federated_map(_add, (kept, client_state)))

  form = cf.compile(_process(with_everything,
                             client_state_initializer=_zero_state))
  _assert_pieces_pure(form)
  assert 'client_state_init' in form.pieces


def test_pieces_call_the_traced_computations_without_retracing():
  calls = []

  @cf.tf_computation(F)
  def counted(x):
    calls.append(1)
    return x * 3.0

  @cf.federated_computation(cf.server(F), cf.clients(F))
  def next_fn(state, data):
    return state, cf.federated_sum(cf.federated_map(counted, data))

  form = cf.compile(_process(next_fn))
  for seed in (None, 1):
    _, total = cf.run_round(form, 0.0, [1.0, 2.0], merge_seed=seed)
    assert float(total) == 9.0
  assert len(calls) == 1
  assert form.work.concrete_function is form.work.concrete_function


def test_state_whose_shape_changes_between_rounds():
  """next declares S = float32[?]: prepare and update take any length."""
  history = tf.TensorSpec([None], tf.float32)

  @cf.tf_computation(history, F)
  def append(past, total):
    return tf.concat([past, [total]], 0)

  @cf.tf_computation(history)
  def last(past):
    return tf.concat([[0.0], past], 0)[-1]

  @cf.federated_computation(cf.server(history), cf.clients(F))
  def next_fn(state, data):
    shared = cf.federated_broadcast(cf.federated_map(last, state))
    total = cf.federated_sum(cf.federated_map(_add, (data, shared)))
    return cf.federated_map(append, (state, total)), total

  process = cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([0])), next_fn)
  form = cf.compile(process)
  assert form.state_spec.shape.as_list() == [None]
  state = form.initialize()
  for _ in range(3):
    state, _ = cf.run_round(form, state, [1.0, 2.0], merge_seed=0)
  np.testing.assert_array_equal(state, [3.0, 9.0, 21.0])


def test_new_state_must_keep_the_declared_shape():
  """Statically wrong at compile time; dynamically wrong when it runs."""

  @cf.tf_computation(tf.TensorSpec([None], tf.float32))
  def grow(state):
    return tf.concat([state, [1.0]], 0)

  @cf.federated_computation(cf.server(F2), cf.clients(F))
  def grows(state, data):
    del data
    return cf.federated_map(grow, state), ()  # line:grows

  process = cf.IterativeProcess(cf.tf_computation(lambda: tf.zeros([2])),
                                grows)
  with pytest.raises(cf.FederatedError) as error:
    cf.compile(process)
  assert 'new server state (made by federated_map at ' + _where('grows') in \
      str(error.value)
  assert 'float32[3], but next declares float32[2]' in str(error.value)

  @cf.tf_computation(F2, F)
  def tile(state, times):
    return tf.tile(state, [tf.cast(times, tf.int32)])

  @cf.federated_computation(cf.server(F2), cf.clients(F))
  def tiles(state, data):
    return cf.federated_map(tile, (state, cf.federated_sum(data))), ()

  form = cf.compile(cf.IterativeProcess(
      cf.tf_computation(lambda: tf.zeros([2])), tiles))
  assert form.update.output_spec[0] == F2
  state, _ = cf.run_round(form, tf.ones([2]), [1.0])
  np.testing.assert_array_equal(state, [1.0, 1.0])
  with pytest.raises(tf.errors.InvalidArgumentError):
    cf.run_round(form, tf.ones([2]), [1.0, 1.0])


# ----------------------------------------------------------------------------
# CanonicalForm: type checks between hand-made pieces


def _pieces(**overrides):
  """The pieces of a tiny sum-of-clients form; `overrides` replace some."""
  p = form_lib.Piece
  pieces = dict(
      initialize=p('initialize', lambda: tf.constant(0.0), ()),
      prepare=p('prepare', lambda s: (s,), (F,)),
      work=p('work', lambda d, c: ((d + c[0],), ()), (F, (F,))),
      zero=p('zero', lambda: (tf.constant(0.0),), ()),
      accumulate=p('accumulate', lambda a, u: (a[0] + u[0],), ((F,), (F,))),
      merge=p('merge', lambda a, b: (a[0] + b[0],), ((F,), (F,))),
      report=p('report', lambda a: a, ((F,),)),
      update=p('update', lambda s, r: (s + r[0], r[0]), (F, (F,))),
  )
  pieces.update(overrides)
  return pieces


def _form_error(**overrides):
  with pytest.raises(cf.FormError) as error:
    cf.CanonicalForm(name='hand', **_pieces(**overrides))
  return str(error.value)


def test_hand_made_form_runs():
  form = cf.CanonicalForm(name='hand', **_pieces())
  state, total = cf.run_round(form, 1.0, [1.0, 2.0, 3.0], merge_seed=5)
  assert float(total) == 9.0 and float(state) == 10.0


def test_mismatched_broadcast_type():
  message = _form_error(prepare=form_lib.Piece(
      'prepare', lambda s: (tf.cast(s, tf.int32),), (F,)))
  assert "Canonical form 'hand': work: its broadcast input C" in message
  assert 'prepare returns C = <int32>' in message


def test_mismatched_accumulator_types():
  message = _form_error(zero=form_lib.Piece(
      'zero', lambda: (tf.zeros([3]),), ()))
  assert 'zero: its result is <float32[3]>' in message
  assert 'accumulate takes A = <float32>' in message
  message = _form_error(merge=form_lib.Piece(
      'merge', lambda a, b: (a[0] + tf.cast(b[0], tf.float32),),
      ((F,), (I,))))
  assert 'merge: its second input' in message


def test_mismatched_client_update_and_report():
  message = _form_error(work=form_lib.Piece(
      'work', lambda d, c: ((d + c[0], d), ()), (F, (F,))))
  assert 'accumulate: its client update input U' in message
  message = _form_error(report=form_lib.Piece(
      'report', lambda a: (tf.cast(a[0], tf.int64),), ((F,),)))
  assert 'update: its aggregate input R' in message


def test_mismatched_server_state():
  message = _form_error(update=form_lib.Piece(
      'update', lambda s, r: ((s, s), r[0]), (F, (F,))))
  assert 'update: its new server state' in message
  message = _form_error(initialize=form_lib.Piece(
      'initialize', lambda: tf.constant(0), ()))
  assert 'initialize: its result is int32' in message


def test_wrong_arity_and_shape_of_outputs():
  message = _form_error(accumulate=form_lib.Piece(
      'accumulate', lambda a: a, ((F,),)))
  assert 'accumulate must take 2 inputs' in message
  message = _form_error(update=form_lib.Piece(
      'update', lambda s, r: s + r[0], (F, (F,))))
  assert 'update must return a pair <S, X>' in message
  message = _form_error(zero=lambda: (0.0,))
  assert 'zero must be a Piece' in message


def test_piece_that_fails_to_trace():
  message = _form_error(merge=form_lib.Piece(
      'merge', lambda a, b: (a[0] @ b[0],), ((F,), (F,))))
  assert "Piece 'merge'" in message and 'failed to trace' in message


def test_client_state_types():
  p = form_lib.Piece
  with_state = dict(
      work=p('work', lambda d, c: ((d[0] + c[0],), d[1] + 1), ((F, I), (F,))),
      client_state_init=p('client_state_init', lambda: tf.constant(0), ()))
  form = cf.CanonicalForm(name='hand', **_pieces(**with_state))
  state, _, clients = cf.run_round(form, 0.0, [1.0, 2.0], [None, 5])
  assert [int(c) for c in clients] == [1, 6] and float(state) == 3.0
  message = _form_error(**dict(with_state, client_state_init=p(
      'client_state_init', lambda: tf.constant(0.0), ())))
  assert 'client_state_init: its result is float32' in message


def test_piece_call_with_wrong_arguments_names_the_piece():
  form = cf.CanonicalForm(name='hand', **_pieces())
  with pytest.raises(TypeError, match="Piece 'work'"):
    form.work(1.0)
  with pytest.raises(TypeError, match="Piece 'work'"):
    form.work(tf.constant([1.0, 2.0]), (1.0,))


# ----------------------------------------------------------------------------
# Compile speed


def _fedavg_process(model):
  from canonical import learning  # pylint: disable=g-import-not-at-top
  weights_spec = model.weights_spec
  data_spec = tf.data.DatasetSpec(model.batch_spec)
  initial = model.initial_model_weights

  @cf.tf_computation
  def initialize():
    return tf.nest.map_structure(tf.constant, initial)

  @cf.tf_computation(weights_spec, data_spec)
  def train(weights, dataset):
    output = learning.client_update(model, learning.sgd(0.1), weights,
                                    dataset)
    return output.weights_delta, output.num_examples, output.metrics

  @cf.tf_computation(weights_spec, weights_spec.trainable)
  def apply_delta(weights, delta):
    return learning.server_update(learning.sgd(1.0), (), weights, delta)[1]

  @cf.federated_computation(cf.server(weights_spec), cf.clients(data_spec))
  def next_fn(state, data):
    delta, num_examples, metrics = cf.federated_map(
        train, (cf.federated_broadcast(state), data))
    mean_delta = cf.federated_mean(delta, weight=num_examples)
    return (cf.federated_map(apply_delta, (state, mean_delta)),
            cf.federated_sum(metrics))

  return cf.IterativeProcess(initialize, next_fn)


@pytest.mark.slow
def test_fedavg_cnn_compiles_to_pure_pieces():
  """The tutorial CNN compiles (its speed is measured by benchmarks/compile.py)."""
  from canonical import learning  # pylint: disable=g-import-not-at-top
  model = learning.KerasFunctionalModel.from_keras(learning.models.cnn_28x28)
  form = cf.compile(_fedavg_process(model))
  assert form.broadcast_bits == 1_663_370 * 32
  _assert_pieces_pure(form)
