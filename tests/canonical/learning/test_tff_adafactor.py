"""`tff.learning.optimizers.build_adafactor`: TFF 0.87's steps on their own
(the expected numbers were printed by TensorFlow Federated 0.87 for the
same weights and gradients), and inside the learning algorithms, where TFF
0.87's own Adafactor fails (`KeyError 'steps'` as a client optimizer, a
dtype mismatch as a server optimizer)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from tff_087_examples import client_data
from tff_087_examples import model_fn

SHAPES = [(4, 3), (3,), (), (2, 3, 4)]
CONFIGS = {
    'default': dict(learning_rate=0.1),
    'fixed': dict(learning_rate=0.05, relative_step=False,
                  clip_threshold=0.5, beta_2_decay=-0.5, epsilon_2=0.01),
    'big': dict(learning_rate=2.0),
}
# TFF 0.87, four steps from the same weights along the same gradients: the
# kernel, the bias, the scalar and the first [3, 4] slice of the rank-3
# weight.
TFF_WEIGHTS = {
    'default': (
        [[1.789501, -2.7813554, 0.4875611], [-0.7530239, -0.9792714,
                                             -0.2909901],
         [-1.9283329, -0.3833428, -1.3414477], [3.2382619, 0.05275,
                                                -0.0897556]],
        [-0.4559248, -0.7496153, -1.047151], -0.3246943,
        [[0.52322, -0.2027588, 0.7775982, -0.398153],
         [0.1739895, 1.2987537, 0.5462132, -0.6804801],
         [0.0560042, 0.6268952, 2.0549352, -0.6073424]]),
    'fixed': (
        [[1.9807633, -2.6094913, 0.4383919], [-0.6139767, -0.573992,
                                              -0.2304979],
         [-2.0001159, -0.2676591, -0.983339], [3.2999327, 0.1854483,
                                               -0.2881606]],
        [-0.3235083, -0.6903757, -1.0542629], -0.3741104,
        [[0.4996296, -0.2279657, 0.9065881, -0.2330503],
         [0.0653232, 1.4788846, 0.5476412, -0.553439],
         [-0.1131894, 0.5694939, 1.9734644, -0.3662042]]),
    'big': (
        [[-0.6266459, -4.7118154, 1.06014], [-2.6953053, -6.1252074,
                                             -1.135458],
         [-0.8670115, -1.797859, -5.8998427], [2.4777884, -1.7410903,
                                               2.2456205]],
        [-1.5404058, -1.2329473, -0.8685982], 0.0005261,
        [[0.8503498, 0.1564082, -0.8461916, -2.0545814],
         [1.5466621, -0.7354932, 0.6948494, -2.3014963],
         [2.1717391, 1.3854314, 2.9796865, -3.5294268]]),
}
# ... and the kernel's factored moments (r over rows, c over columns) after
# the four steps of 'default'.
TFF_KERNEL_R = [0.5891843, 1.0667887, 1.3109107, 0.8538669]
TFF_KERNEL_C = [1.2244602, 0.7750503, 0.8660523]


def _weights_and_gradients():
  rng = np.random.default_rng(3)
  weights = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
  gradients = [[rng.normal(size=s).astype(np.float32) for s in SHAPES]
               for _ in range(4)]
  return weights, gradients


@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_adafactor_takes_tffs_steps(name):
  optimizer = tff.learning.optimizers.build_adafactor(**CONFIGS[name])
  weights, gradients = _weights_and_gradients()
  state = optimizer.initialize([tf.TensorSpec(s, tf.float32) for s in SHAPES])
  for step in gradients:
    state, weights = optimizer.next(state, weights, step)
  kernel, bias, scalar, cube = TFF_WEIGHTS[name]
  np.testing.assert_allclose(weights[0], kernel, atol=2e-6)
  np.testing.assert_allclose(weights[1], bias, atol=2e-6)
  np.testing.assert_allclose(weights[2], scalar, atol=2e-6)
  np.testing.assert_allclose(weights[3][0], cube, atol=2e-6)
  assert float(state['steps']) == 4.0
  if name == 'default':
    np.testing.assert_allclose(state['moments'][0].r, TFF_KERNEL_R,
                               rtol=1e-5)
    np.testing.assert_allclose(state['moments'][0].c, TFF_KERNEL_C,
                               rtol=1e-5)


def test_adafactor_state_keeps_its_type_and_its_hparams_can_be_set():
  optimizer = tff.learning.optimizers.build_adafactor(0.1)
  specs = [tf.TensorSpec(s, tf.float32) for s in SHAPES]
  state = optimizer.initialize(specs)
  assert list(state) == ['steps', 'moments', 'hparams']
  assert [m.r.shape for m in state['moments']] == [(4,), (0,), (0,), (2, 3)]
  assert [m.c.shape for m in state['moments']] == [(3,), (0,), (0,), (2, 4)]
  weights, gradients = _weights_and_gradients()
  stepped, _ = optimizer.next(state, weights, gradients[0])
  assert tf.nest.map_structure(lambda t: t.dtype, stepped) == (
      tf.nest.map_structure(lambda t: t.dtype, state))
  hparams = optimizer.get_hparams(state)
  assert list(hparams) == ['learning_rate', 'beta_2_decay', 'epsilon_1',
                           'epsilon_2', 'clip_threshold', 'relative_step']
  slower = optimizer.set_hparams(state, collections.OrderedDict(
      learning_rate=0.01))
  assert float(optimizer.get_hparams(slower)['learning_rate']) == (
      pytest.approx(0.01))
  assert len(slower['moments']) == 4  # The state, not its hparams alone.
  with pytest.raises(ValueError, match='learning_rate'):
    tff.learning.optimizers.build_adafactor(-1.0)


@pytest.mark.slow
@pytest.mark.parametrize('role', ['client', 'server'])
def test_adafactor_trains_inside_fed_avg_and_compiles(role):
  adafactor = tff.learning.optimizers.build_adafactor(0.1)
  sgd = tff.learning.optimizers.build_sgdm(0.1)
  process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=adafactor if role == 'client' else sgd,
      server_optimizer_fn=adafactor if role == 'server' else None)
  data = client_data()
  state = process.initialize()
  output = process.next(state, data)
  losses = [output.metrics['client_work']['train']['loss']]
  output = process.next(output.state, data)
  losses.append(output.metrics['client_work']['train']['loss'])
  assert losses[1] < losses[0]  # The model learns.
  form = tff.compile(process)
  compiled, _ = tff.run_round(form, form.initialize(), data)
  local = process.next(process.initialize(), data).state
  np.testing.assert_allclose(compiled.global_model_weights.trainable[0],
                             local.global_model_weights.trainable[0],
                             atol=1e-6)
