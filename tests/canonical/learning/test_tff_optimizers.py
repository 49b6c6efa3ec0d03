"""`tff.learning.optimizers` of TFF 0.87: `initialize` / `next`, TFF's state
and numbers, hyperparameters in the state, and optimizers passed to FedAvg.

EXPECTED holds TFF 0.87's own weights after four steps of each builder on
the problem below, computed by tensorflow-federated 0.87.0 (TensorFlow 2.14)
with its state's numbers as the tensors TFF types them as (float32, int32);
ours matched them bit for bit on 2026-11-27.
"""

import collections
import json
import os
import subprocess
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import model_fns

optimizers = tff.learning.optimizers

_START = ([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], [0.1, -0.2])
_TARGET = ([[1.0, 0.0], [1.0, -1.0], [0.0, 1.0]], [-0.5, 0.5])
_STEPS = 4

_ADAM_KEYS = ['learning_rate', 'beta_1', 'beta_2', 'epsilon', 'step',
              'accumulator', 'preconditioner']
# (builder, arguments, TFF's state keys, TFF's weights after _STEPS steps)
EXPECTED = [
    ('build_sgdm', dict(learning_rate=0.1), ['learning_rate'],
     ([[0.5264855, -0.6996834], [1.6698457, -0.2067930],
       [-0.5932529, 1.4019586]], [0.0233900, -0.0828228])),
    ('build_sgdm', dict(learning_rate=0.05, momentum=0.9),
     ['learning_rate', 'momentum', 'accumulator'],
     ([[0.5318237, -0.5947418], [1.5563446, -0.4129138],
       [-0.5516778, 1.3828520]], [0.0061925, -0.0532391])),
    ('build_sgdm', dict(), ['learning_rate'],  # TFF's default rate, 0.01
     ([[0.5029620, -0.9579567], [1.9541301, 0.1761936],
       [-0.7306440, 1.4891378]], [0.0911175, -0.1858146])),
    ('build_adam', dict(learning_rate=0.01), _ADAM_KEYS,
     ([[0.5395519, -0.9600731], [1.9600660, 0.2100616],
       [-0.7100966, 1.4600798]], [0.0601520, -0.1601206])),
    ('build_adam',
     dict(learning_rate=0.1, beta_1=0.5, beta_2=0.9, epsilon=1e-3),
     _ADAM_KEYS,
     ([[0.6203242, -0.6421904], [1.6370043, -0.1142500],
       [-0.4061239, 1.1386313]], [-0.2039067, 0.1258607])),
    ('build_adamw', dict(learning_rate=0.01), _ADAM_KEYS + ['weight_decay'],
     ([[0.5394710, -0.9599158], [1.9597492, 0.2100241],
       [-0.7099794, 1.4598427]], [0.0601385, -0.1600911])),
    ('build_yogi', dict(learning_rate=0.01), _ADAM_KEYS,
     ([[0.5293981, -0.9608902], [1.9608161, 0.2105244],
       [-0.7118677, 1.4631958]], [0.0639295, -0.1625229])),
    ('build_yogi',
     dict(learning_rate=0.1, beta_1=0.8, beta_2=0.99, epsilon=1e-4,
          initial_preconditioner_value=0.5), _ADAM_KEYS,
     ([[0.5063949, -0.9121653], [1.9046502, 0.1039402],
       [-0.7080428, 1.4765036]], [0.0808149, -0.1693261])),
    ('build_adagrad', dict(learning_rate=0.1),
     ['learning_rate', 'epsilon', 'preconditioner'],
     ([[0.5632612, -0.7660488], [1.7614104, 0.0070967],
       [-0.5431328, 1.3162529]], [-0.0488372, -0.0158763])),
    ('build_adagrad',
     dict(learning_rate=0.5, initial_preconditioner_value=0.0, epsilon=1e-3),
     ['learning_rate', 'epsilon', 'preconditioner'],
     ([[0.5686209, -0.3304987], [1.2454833, -0.4487498],
       [-0.1560663, 0.6317683]], [-0.2336234, 0.2364228])),
    ('build_rmsprop', dict(learning_rate=0.01),
     ['learning_rate', 'decay', 'epsilon', 'preconditioner'],
     ([[0.5721806, -0.9130000], [1.9126550, 0.1624611],
       [-0.6640764, 1.4131712]], [0.0165148, -0.1151698])),
    ('build_rmsprop', dict(learning_rate=0.1, decay=0.5, epsilon=1e-3),
     ['learning_rate', 'decay', 'epsilon', 'preconditioner'],
     ([[0.5917312, -0.6098478], [1.5996559, -0.1510158],
       [-0.3836247, 1.0943921]], [-0.1917676, 0.1315355])),
]
_IDS = [f'{name}-{i}' for i, (name, *_) in enumerate(EXPECTED)]


def _weights(values=_START):
  return [tf.constant(v, tf.float32) for v in values]


def _gradients(weights):
  """Of a cubic bowl: they change with the weights, as a model's do."""
  return [(w - t) ** 3 + 0.1 * w for w, t in zip(weights, _weights(_TARGET))]


def _specs(weights):
  return [tf.TensorSpec.from_tensor(w) for w in weights]


def _run(optimizer, steps=_STEPS):
  weights = _weights()
  state = optimizer.initialize(_specs(weights))
  for _ in range(steps):
    state, weights = optimizer.next(state, weights, _gradients(weights))
  return state, weights


# ---------------------------------------------------------------------------
# TFF's numbers and state.


@pytest.mark.parametrize('name, kwargs, keys, expected', EXPECTED, ids=_IDS)
def test_builders_take_tffs_steps(name, kwargs, keys, expected):
  optimizer = getattr(optimizers, name)(**kwargs)
  assert isinstance(optimizer, optimizers.Optimizer)
  state, weights = _run(optimizer)
  assert list(state) == keys
  for got, want in zip(weights, expected):
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6)
  for key in optimizer.get_hparams(state):
    assert state[key].dtype == tf.float32 and state[key].shape == []
  if 'step' in state:
    assert state['step'].dtype == tf.int32 and int(state['step']) == _STEPS


def test_adams_state_follows_its_formula():
  optimizer = optimizers.build_adam(learning_rate=0.1)
  w, g = tf.constant([1.0, -2.0]), tf.constant([0.5, 4.0])
  state, (new_w,) = optimizer.next(optimizer.initialize([_specs([w])[0]]),
                                   [w], [g])
  np.testing.assert_allclose(state['accumulator'][0], 0.1 * g.numpy(),
                             rtol=1e-6)
  np.testing.assert_allclose(state['preconditioner'][0],
                             0.001 * g.numpy() ** 2, rtol=1e-4)
  # Step one: corrected moments are g and g^2, so the step is about lr sign(g).
  np.testing.assert_allclose(new_w, w.numpy() - 0.1 * np.sign(g), rtol=1e-5)


def test_default_arguments_are_tffs():
  state = optimizers.build_yogi(0.1).initialize(_specs(_weights()))
  assert float(state['epsilon']) == pytest.approx(1e-3)
  np.testing.assert_allclose(state['preconditioner'][0], 1e-6)
  state = optimizers.build_adagrad(0.1).initialize(_specs(_weights()))
  np.testing.assert_allclose(state['preconditioner'][1], 0.1)
  assert float(optimizers.build_sgdm().initialize([])['learning_rate']) == (
      pytest.approx(0.01))
  assert float(optimizers.build_adamw(0.1).initialize([])['weight_decay']) == (
      pytest.approx(0.004))
  assert optimizers.LEARNING_RATE_KEY == 'learning_rate'
  with pytest.raises(TypeError):
    optimizers.build_adam()  # pylint: disable=no-value-for-parameter


def test_the_optimizer_base_is_abstract():
  with pytest.raises(TypeError):
    optimizers.Optimizer()  # pylint: disable=abstract-class-instantiated


# ---------------------------------------------------------------------------
# Hyperparameters in the state.


def test_get_hparams_and_set_hparams_change_the_next_step():
  optimizer = optimizers.build_sgdm(learning_rate=0.1, momentum=0.5)
  state = optimizer.initialize(_specs(_weights()))
  hparams = optimizer.get_hparams(state)
  assert list(hparams) == ['learning_rate', 'momentum']
  assert float(hparams['learning_rate']) == pytest.approx(0.1)
  hparams['learning_rate'] = 0.0
  frozen = optimizer.set_hparams(state, hparams)
  assert frozen['learning_rate'].dtype == tf.float32
  assert float(state['learning_rate']) == pytest.approx(0.1)  # not mutated
  frozen, weights = optimizer.next(frozen, _weights(), _gradients(_weights()))
  for got, start in zip(weights, _weights()):
    np.testing.assert_array_equal(got, start)
  assert float(tf.linalg.global_norm(frozen['accumulator'])) > 0.0


def test_set_hparams_refuses_what_the_state_does_not_hold():
  optimizer = optimizers.build_adam(0.1)
  state = optimizer.initialize(_specs(_weights()))
  with pytest.raises(errors.InvalidValueError, match=r"\['momentum'\]"):
    optimizer.set_hparams(state, {'momentum': 0.9})
  fixed = learning.adam(0.1)
  assert fixed.get_hparams(fixed.init(_weights())) == collections.OrderedDict()
  with pytest.raises(ValueError, match='fixes them in the graph'):
    fixed.set_hparams(fixed.init(_weights()), {'learning_rate': 0.2})


def test_schedule_learning_rate_sets_each_steps_rate():
  schedule = lambda step: 0.1 / tf.cast(step + 1, tf.float32)
  optimizer = optimizers.schedule_learning_rate(
      optimizers.build_sgdm(learning_rate=5.0), schedule)
  state = optimizer.initialize(_specs(_weights()))
  assert list(state) == ['round_num', 'optimizer']
  assert float(state['optimizer']['learning_rate']) == pytest.approx(0.1)
  weights, by_hand = _weights(), [w.numpy() for w in _weights()]
  for step in range(3):
    state, weights = optimizer.next(state, weights, _gradients(weights))
    by_hand = [w - 0.1 / (step + 1) * g.numpy()
               for w, g in zip(by_hand, _gradients(_weights(by_hand)))]
  assert int(state['round_num']) == 3
  for got, want in zip(weights, by_hand):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="has no 'learning_rate'"):
    optimizers.schedule_learning_rate(learning.sgd(0.1), schedule).initialize(
        _specs(_weights()))
  with pytest.raises(TypeError, match='must be a tff.learning.optimizers'):
    optimizers.schedule_learning_rate(keras.optimizers.SGD(), schedule)


# ---------------------------------------------------------------------------
# Pure: in tf.function and Dataset.reduce, with None and sparse gradients.


@pytest.mark.parametrize('make', [
    lambda: optimizers.build_sgdm(0.05, momentum=0.9),
    lambda: optimizers.build_adam(0.01),
    lambda: optimizers.build_yogi(0.01),
    lambda: optimizers.schedule_learning_rate(
        optimizers.build_rmsprop(0.01),
        lambda i: 0.01 * 0.5 ** tf.cast(i, tf.float32)),
], ids=['sgdm', 'adam', 'yogi', 'scheduled_rmsprop'])
def test_steps_run_inside_dataset_reduce_with_no_variables(make):
  optimizer = make()
  targets = _weights(_TARGET)

  @tf.function
  def train(start):
    # Tuples, not lists: Dataset.reduce would stack a list into one tensor.
    state = optimizer.initialize(tuple(_specs(start)))

    def step(carry, _):
      state, weights = carry
      gradients = tuple((w - t) ** 3 + 0.1 * w
                        for w, t in zip(weights, targets))
      return optimizer.next(state, weights, gradients)

    return tf.data.Dataset.range(_STEPS).reduce((state, tuple(start)), step)

  (state, weights) = train(tuple(_weights()))
  eager_state, eager_weights = _run(optimizer)
  for got, want in zip(weights, eager_weights):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  tf.nest.assert_same_structure(state, eager_state, check_types=False)
  graph = train.get_concrete_function(
      tuple(_specs(_weights()))).graph.as_graph_def()
  ops = {n.op for n in graph.node} | {
      n.op for f in graph.library.function for n in f.node_def}
  assert not ops & {'VarHandleOp', 'VariableV2', 'AssignVariableOp',
                    'RandomUniform', 'RandomStandardNormal'}, ops


def test_a_none_gradient_leaves_its_weight_and_slots():
  optimizer = optimizers.build_adam(0.1)
  weights = _weights()
  state = optimizer.initialize(_specs(weights))
  state, new = optimizer.next(state, weights, [_gradients(weights)[0], None])
  np.testing.assert_array_equal(new[1], weights[1])
  np.testing.assert_array_equal(state['accumulator'][1], np.zeros(2))
  assert not np.allclose(new[0], weights[0])


def test_sparse_gradients_of_gather_are_taken():
  table = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
  with tf.GradientTape() as tape:
    tape.watch(table)
    loss = tf.reduce_sum(tf.gather(table, [0, 2]))
  gradient = tape.gradient(loss, table)
  assert isinstance(gradient, tf.IndexedSlices)
  optimizer = optimizers.build_sgdm(learning_rate=0.5)
  _, (new,) = optimizer.next(optimizer.initialize([_specs([table])[0]]),
                             [table], [gradient])
  np.testing.assert_allclose(new, [[0.5, 1.5], [3.0, 4.0], [4.5, 5.5]])


def test_float64_weights_keep_their_dtype():
  weights = {'a': tf.constant([1.0, 2.0], tf.float64)}
  optimizer = optimizers.build_adam(0.1)
  state = optimizer.initialize({'a': tf.TensorSpec([2], tf.float64)})
  state, new = optimizer.next(state, weights, {'a': weights['a']})
  assert new['a'].dtype == tf.float64
  assert state['preconditioner']['a'].dtype == tf.float64


def test_mismatched_gradients_and_states_are_named():
  optimizer = optimizers.build_sgdm(0.1, momentum=0.9)
  weights = _weights()
  state = optimizer.initialize(_specs(weights))
  with pytest.raises(ValueError, match='structure of the weights'):
    optimizer.next(state, weights, weights[:1])
  with pytest.raises(ValueError, match=r'tensor 1 is float32\[3\]'):
    optimizer.next(state, weights, [weights[0], tf.zeros([3])])
  wrong = optimizer.initialize(_specs(weights[:1]))
  with pytest.raises(ValueError, match="state's 'accumulator'"):
    optimizer.next(wrong, weights, _gradients(weights))


@pytest.mark.parametrize('build, message', [
    (lambda: optimizers.build_sgdm(0.1, momentum=1.5),
     r'build_sgdm: momentum must be in \[0, 1\], got 1.5'),
    (lambda: optimizers.build_adam(-0.1),
     'build_adam: learning_rate must be non-negative'),
    (lambda: optimizers.build_yogi(0.1, initial_preconditioner_value=-1.0),
     'build_yogi: initial_preconditioner_value'),
    (lambda: optimizers.build_rmsprop(0.1, decay=2.0), 'build_rmsprop: decay'),
    (lambda: optimizers.build_adagrad(0.1, epsilon=-1.0),
     'build_adagrad: epsilon'),
    (lambda: optimizers.build_adamw(0.1, weight_decay=-0.1),
     'build_adamw: weight_decay'),
])
def test_builders_refuse_arguments_out_of_range(build, message):
  with pytest.raises(errors.InvalidValueError, match=message):
    build()


# ---------------------------------------------------------------------------
# One implementation: the builders before TFF's are the same optimizers.


def test_the_older_builders_are_optimizers_of_the_same_maths():
  pairs = [(learning.sgd(0.05, momentum=0.9),
            optimizers.build_sgdm(0.05, momentum=0.9)),
           (learning.adam(0.01), optimizers.build_adam(0.01)),
           (learning.adagrad(0.1), optimizers.build_adagrad(0.1))]
  for old, new in pairs:
    assert isinstance(old, optimizers.Optimizer)
    old_state, old_weights = _run(old)
    new_state, new_weights = _run(new)
    for a, b in zip(old_weights, new_weights):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not set(new.get_hparams(new_state)) & set(old_state)
  assert list(_run(learning.adam(0.01))[0]) == ['step', 'm', 'v']


# ---------------------------------------------------------------------------
# In federated averaging, as TFF 0.87 passes them.


def _model():
  return learning.KerasFunctionalModel.from_keras(
      lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]),
      seed=0)


def _client_data(seed, n=12):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 4)).astype(np.float32)
  y = (np.argmax(x[:, :3], axis=1)).astype(np.int32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


def _rounds(process, rounds=2):
  form = tff.compile(process)
  state, data = form.initialize(), [_client_data(1), _client_data(2)]
  for _ in range(rounds):
    expected, _ = tff.reference.run_round(process, state, data)
    state, metrics = tff.run_round(form, state, data)
    for got, want in zip(tf.nest.flatten(state), tf.nest.flatten(expected)):
      np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
  return state, metrics


def test_fedavg_takes_tff_optimizers_themselves_and_functions():
  model = _model()
  tff_style = algorithms.build_federated_averaging_process(
      model,
      client_optimizer_fn=optimizers.build_sgdm(learning_rate=0.02),
      server_optimizer_fn=lambda: optimizers.build_sgdm(1.0, momentum=0.9))
  state, metrics = _rounds(tff_style)
  assert list(state.finalizer) == ['learning_rate', 'momentum',
                                    'accumulator']
  assert float(state.finalizer['momentum']) == pytest.approx(0.9)
  assert float(metrics['client_work']['train']['num_examples']) == 24.0
  older = algorithms.build_federated_averaging_process(
      model, client_optimizer_fn=lambda: learning.sgd(0.02),
      server_optimizer_fn=lambda: learning.sgd(1.0, momentum=0.9))
  older_state, _ = _rounds(older)
  for got, want in zip(tf.nest.flatten(state.global_model_weights),
                       tf.nest.flatten(older_state.global_model_weights)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fedavg_takes_a_users_own_optimizer():

  class SignSGD(optimizers.Optimizer):
    """A TFF user's optimizer: only initialize and next."""

    def initialize(self, specs):
      return collections.OrderedDict(learning_rate=tf.constant(0.01))

    def next(self, state, weights, gradients):
      return state, tf.nest.map_structure(
          lambda w, g: w - state['learning_rate'] * tf.sign(g), weights,
          gradients)

  model = _model()
  process = algorithms.build_federated_averaging_process(
      model, client_optimizer_fn=SignSGD, server_optimizer_fn=SignSGD())
  state, _ = _rounds(process, rounds=1)
  # The server's sign step moves each weight by its rate, or not at all
  # where the clients' deltas cancel.
  moved = np.concatenate([np.abs(new - old).ravel() for new, old in zip(
      tf.nest.flatten(state.global_model_weights.trainable),
      tf.nest.flatten(model.initial_model_weights.trainable))])
  np.testing.assert_allclose(moved[moved > 0], 0.01, rtol=1e-4)
  assert np.mean(moved > 0) > 0.5


def test_what_is_not_an_optimizer_is_named():
  with pytest.raises(TypeError, match='client_optimizer_fn must be a pure '
                     'optimizer .* got str'):
    model_fns.optimizer_of('sgd', 'client_optimizer_fn')
  assert isinstance(model_fns.optimizer_of(keras.optimizers.SGD(0.1), 'x'),
                    optimizers.Optimizer)
  built = optimizers.build_adam(0.01)
  assert model_fns.optimizer_of(built, 'x') is built


# ---------------------------------------------------------------------------
# Against TFF 0.87 itself, where it is installed (not in CI).

_TFF_PYTHON = '/work/peers/venv-tff/bin/python'


@pytest.mark.skipif(not os.path.exists(_TFF_PYTHON),
                    reason='TFF 0.87 is not installed here')
def test_expected_numbers_are_tffs_own():
  script = textwrap.dedent(f'''
      import json
      import tensorflow as tf
      import tensorflow_federated as tff
      cases = {[(name, kwargs) for name, kwargs, *_ in EXPECTED]!r}
      start, target = {_START!r}, {_TARGET!r}
      out = []
      for name, kwargs in cases:
        opt = getattr(tff.learning.optimizers, name)(**kwargs)
        w = [tf.constant(v, tf.float32) for v in start]
        t = [tf.constant(v, tf.float32) for v in target]
        state = opt.initialize([tf.TensorSpec.from_tensor(x) for x in w])
        state = tf.nest.map_structure(
            lambda x: x if tf.is_tensor(x) else tf.constant(x), state)
        for _ in range({_STEPS}):
          state, w = opt.next(
              state, w, [(x - y) ** 3 + 0.1 * x for x, y in zip(w, t)])
        out.append([list(state), [x.numpy().tolist() for x in w]])
      print(json.dumps(out))
  ''')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
  result = subprocess.run([_TFF_PYTHON, '-c', script], capture_output=True,
                          text=True, timeout=300, env=env,
                          stdin=subprocess.DEVNULL, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  theirs = json.loads(result.stdout.strip().splitlines()[-1])
  for (name, _, keys, expected), (their_keys, their_weights) in zip(
      EXPECTED, theirs):
    assert their_keys == keys, name
    for got, want in zip(their_weights, expected):
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=name)
