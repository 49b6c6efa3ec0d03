"""DP-FTRL's tree aggregation (`DifferentiallyPrivateFactory.tree_aggregation`
and `.tree_adaptive`): TFF 0.87's results without noise, the tree's noise
law with it (against tensorflow_privacy's algorithm, re-derived below), the
restarts, the releases a compiled form carries, and DP-FTRL learning."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.aggregators import tree_aggregation
from canonical.core import privacy_releases
from canonical.executors import compiled

import aggregator_rounds
from tensor_asserts import assert_same
from tff_087_examples import client_data
from tff_087_examples import model_fn

DPF = tff.aggregators.DifferentiallyPrivateFactory
SPEC = tf.TensorSpec([3], tf.float32)
VALUE = tff.TensorType(np.float32, [3])


def _values(r):
  """Round r's three clients: norms 0.5 (1 + r/2), 3 and ~0.4."""
  return [np.array([0.3, -0.4, 0.0], np.float32) * (1 + 0.5 * r),
          np.array([2.0, 1.0, -2.0], np.float32),
          np.array([0.1 * r, 0.2, 0.3], np.float32)]


def _form(factory, value_type=VALUE):
  return tff.compile(aggregator_rounds.as_round(factory.create(value_type)))


def _rounds(factory, rounds, reference=False):
  """(result, measurements, state) of each round of `_values`, compiled;
  with `reference`, each checked against the reference executor's."""
  process = factory.create(VALUE)
  form = tff.compile(aggregator_rounds.as_round(process))
  state, form_state, outputs = process.initialize(), form.initialize(), []
  for r in range(rounds):
    form_state, (result, measurements) = tff.run_round(form, form_state,
                                                       _values(r))
    if reference:
      output = process.next(state, _values(r))
      assert_same((form_state, result, measurements), output, exact=True,
                  what=f'compiled round {r}')
      state = output.state
    outputs.append((result, measurements, form_state))
  return outputs


# ---------------------------------------------------------------------------
# Without noise: TFF 0.87's numbers.

# TFF 0.87: DifferentiallyPrivateFactory.tree_aggregation(0.0, 2, 1.0,
# tf.TensorSpec([3], tf.float32)).create(...).next over _values(0..4);
# every round's dp_query_metrics was OrderedDict(tree_agg_dpftrl_clip=1.0).
TREE_AGGREGATION_087 = [
    [0.4833333492279053, 0.06666667014360428, -0.18333333730697632],
    [0.6083333492279053, -0.03333333879709244, -0.18333333730697632],
    [0.7333333492279053, -0.13333332538604736, -0.18333333730697632],
    [0.7833333015441895, -0.13333332538604736, -0.18333333730697632],
    [0.8333333134651184, -0.13333335518836975, -0.18333333730697632]]

# TFF 0.87: DifferentiallyPrivateFactory.tree_adaptive(0.0, 2, tf.TensorSpec(
# [3], tf.float32), initial_l2_norm_clip=0.4, restart_warmup=2,
# restart_frequency=3, clipped_count_stddev=0.0) over _values(0..8):
# (result, current_clip, estimate_clip) per round. The clip changes after
# rounds 1, 4 and 7: the restarts.
TREE_ADAPTIVE_087 = [
    ([0.25333333015441895, 0.006666660308837891, 0.01666666567325592],
     0.4, 0.42050844),
    ([0.3033333718776703, 0.006666660308837891, 0.01666666567325592],
     0.44206837, 0.44206837),
    ([0.37997663021087646, -0.00314929336309433, 0.002643883228302002],
     0.44206837, 0.4647337),
    ([0.4213505983352661, -0.008900001645088196, -0.0059821754693984985],
     0.44206837, 0.5136102),
    ([0.4441567063331604, -0.02105925977230072, -0.024221070110797882],
     0.5676271, 0.5676271),
    ([0.5897004008293152, -0.04036504030227661, -0.05108711123466492],
     0.5676271, 0.62732494),
    ([0.6027659177780151, -0.051356732845306396, -0.067574642598629],
     0.5676271, 0.6933013),
    ([0.611807644367218, -0.06035763770341873, -0.08107595890760422],
     0.7662165, 0.7662165),
    ([0.8345443606376648, -0.09146537631750107, -0.12442779541015625],
     0.7662165, 0.84680027)]


@pytest.mark.parametrize('use_efficient', [True, False])
def test_without_noise_tree_aggregation_gives_tff_087s_results(
    use_efficient):
  outputs = _rounds(DPF.tree_aggregation(0.0, 2, 1.0, SPEC,
                                         use_efficient=use_efficient), 5)
  for (result, measurements, _), expected in zip(outputs,
                                                 TREE_AGGREGATION_087):
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-7)
    assert measurements == collections.OrderedDict(
        dp_query_metrics=collections.OrderedDict(tree_agg_dpftrl_clip=1.0),
        dp=())


def test_without_noise_tree_adaptive_gives_tff_087s_clips_and_restarts():
  outputs = _rounds(DPF.tree_adaptive(
      0.0, 2, SPEC, initial_l2_norm_clip=0.4, restart_warmup=2,
      restart_frequency=3, clipped_count_stddev=0.0), 9, reference=True)
  for (result, measurements, _), (mean, current, estimate) in zip(
      outputs, TREE_ADAPTIVE_087):
    np.testing.assert_allclose(result, mean, rtol=1e-5, atol=1e-7)
    metrics = measurements['dp_query_metrics']
    assert list(metrics) == ['current_clip', 'estimate_clip']
    np.testing.assert_allclose(
        [metrics['current_clip'], metrics['estimate_clip']],
        [current, estimate], rtol=1e-6)
  # The trees restart where TFF's did: the round within the tree goes back
  # to 0 and both trees take a new seed.
  trees = [s['query_state']['numerator_state'] for _, _, s in outputs]
  assert [int(t['tree_state']['round']) for t in trees] == [
      1, 0, 1, 2, 0, 1, 2, 0, 1]
  for seed_of in (lambda t: t['tree_state']['seed'], lambda t: t[
      'quantile_estimator_state']['below_tree_state']['seed']):
    seeds = [tuple(seed_of(t)) for t in trees]
    changed = [r for r in range(1, 9) if seeds[r] != seeds[r - 1]]
    assert changed == [1, 4, 7]


def test_without_a_warmup_the_trees_restart_every_restart_frequency():
  outputs = _rounds(DPF.tree_adaptive(
      0.0, 2, SPEC, restart_warmup=None, restart_frequency=2,
      clipped_count_stddev=0.0), 5)
  rounds = [int(s['query_state']['numerator_state']['tree_state']['round'])
            for _, _, s in outputs]
  assert rounds == [1, 0, 1, 0, 1]


# ---------------------------------------------------------------------------
# Argument checks, named as TFF names the arguments.

BAD = [
    (lambda: DPF.tree_aggregation(-1.0, 2, 1.0, SPEC), ValueError,
     'noise_multiplier must be nonnegative'),
    (lambda: DPF.tree_aggregation(1.0, 0.0, 1.0, SPEC), ValueError,
     'clients_per_round must be positive'),
    (lambda: DPF.tree_aggregation(1.0, 2, 0.0, SPEC), ValueError,
     'l2_norm_clip must be positive'),
    (lambda: DPF.tree_aggregation(1.0, 2, 1.0, [3]), TypeError,
     'record_specs must be a structure of tf.TensorSpecs'),
    (lambda: DPF.tree_aggregation(
        1.0, 2, 1.0, SPEC,
        record_aggregation_factory=tff.aggregators.MeanFactory()),
     TypeError, 'record_aggregation_factory must be a '
     'UnweightedAggregationFactory'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, restart_warmup=0), ValueError,
     'restart_warmup must be None or between 1 and restart_frequency - 1 '
     '= 1023, got 0'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, restart_warmup=5,
                               restart_frequency=5), ValueError,
     'restart_warmup must be None or between 1 and restart_frequency - 1'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, restart_frequency=0),
     ValueError, 'restart_frequency must be at least 1'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, restart_warmup=1.5),
     TypeError, 'restart_warmup must be an int'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, target_unclipped_quantile=1.5),
     ValueError, r'target_unclipped_quantile must be in \[0, 1\]'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, clip_learning_rate=-0.1),
     ValueError, 'clip_learning_rate must be nonnegative'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, initial_l2_norm_clip=0.0),
     ValueError, 'initial_l2_norm_clip must be positive'),
    (lambda: DPF.tree_adaptive(1.0, 100, SPEC, clipped_count_stddev=-1.0),
     ValueError, 'clipped_count_stddev must be nonnegative'),
    # TFF's default count stddev, clients_per_round / 20 = 0.1, is too low
    # for a total noise multiplier of 1.
    (lambda: DPF.tree_adaptive(1.0, 2, SPEC), ValueError,
     r'clipped_count_stddev = 0.1 \(by default 0.05 \* clients_per_round\) '
     'is too low'),
    (lambda: DPF.tree_aggregation(0.0, 2, 1.0, tf.TensorSpec(
        [4], tf.float32)).create(VALUE), TypeError,
     r'record_specs give tensors of shapes \[\(4,\)\], but the values '
     r'aggregated have shapes \[\(3,\)\]'),
]


@pytest.mark.parametrize('make, kind, message', BAD)
def test_bad_arguments_are_refused_by_name(make, kind, message):
  with pytest.raises(kind, match=message):
    make()


# ---------------------------------------------------------------------------
# With noise: the tree's law.


def _reference(rounds, efficient):
  """Each round's residual noise as coefficients over independent unit node
  noises, by tensorflow_privacy's algorithm (Tree/EfficientTreeAggregator):
  a buffer of the left nodes of the current cover, lowest level first; a
  new leaf merges the buffer's levels 0, 1, ... (efficient: node =
  own + (left + right) / 2) and the cumulative noise is the buffer's sum,
  efficient weighted 1 / (2 - 2^-level)."""
  count = [0]

  def fresh():
    v = np.zeros(4 * rounds)
    v[count[0]] = 1.0
    count[0] += 1
    return v

  buffer, previous, residuals = [(0, fresh())], np.zeros(4 * rounds), []
  for _ in range(rounds):
    cumulative = sum((1 / (2 - 0.5**level) if efficient else 1.0) * v
                     for level, v in buffer)
    residuals.append(cumulative - previous)
    previous = cumulative
    new, level = fresh(), 0
    while buffer and buffer[0][0] == level:
      _, left = buffer.pop(0)
      new = fresh() + (0.5 * (left + new) if efficient else 0.0)
      level += 1
    buffer.insert(0, (level, new))
  residuals = np.array(residuals)
  return residuals @ residuals.T  # Their covariance, node stddev 1.


# Two tensors, so the tree's one noise vector is split across them.
BIG = (tf.TensorSpec([100, 100], tf.float32), tf.TensorSpec([10000],
                                                             tf.float32))
BIG_TYPE = tff.StructType([tff.TensorType(np.float32, [100, 100]),
                           tff.TensorType(np.float32, [10000])])
ZEROS = (np.zeros([100, 100], np.float32), np.zeros([10000], np.float32))


def _noise(factory, rounds):
  """Each round's result for a client of zeros: (rounds, 20000)."""
  form = _form(factory, BIG_TYPE)
  state, out = form.initialize(), []
  for _ in range(rounds):
    state, (result, _) = tff.run_round(form, state, [ZEROS])
    out.append(np.concatenate([np.ravel(result[0]), result[1]]))
  return np.array(out)


@pytest.mark.parametrize('use_efficient', [False, True])
def test_the_residual_noise_has_the_trees_variance_and_correlations(
    use_efficient):
  # Node stddev 0.5 * 3 = 1.5, divided by 2 clients: 0.75.
  noise = _noise(DPF.tree_aggregation(3.0, 2, 0.5, BIG, noise_seed=5,
                                      use_efficient=use_efficient), 8)
  exact = 0.75**2 * _reference(8, use_efficient)
  if not use_efficient:
    # Round t adds its new node and takes away the j nodes it replaces
    # (j the trailing zeros of t + 1): variance j + 1 node variances.
    np.testing.assert_allclose(
        np.diag(exact), 0.75**2 * np.array([1, 2, 1, 3, 1, 2, 1, 4]))
  measured = noise @ noise.T / noise.shape[1]
  np.testing.assert_allclose(np.diag(measured), np.diag(exact), rtol=0.05)
  np.testing.assert_allclose(measured, exact, atol=0.05)
  # What the rounds release sums to the prefix's noise: at t = 2^L - 1 one
  # node of level L, of variance 1 (plain) or 2^L / (2^(L+1) - 1).
  for level in (1, 2, 3):
    prefix = noise[:2**level].sum(axis=0)
    node = tree_aggregation.node_variance(level, use_efficient)
    assert node == (1.0 if not use_efficient else
                    2**level / (2**(level + 1) - 1))
    np.testing.assert_allclose(prefix.var(), 0.75**2 * node, rtol=0.05)


def test_the_noise_repeats_with_its_seed_and_differs_across_rounds():
  def noise(seed):
    return _noise(DPF.tree_aggregation(1.0, 1, 1.0, BIG, noise_seed=seed), 3)
  first, again, other = noise(7), noise(7), noise(8)
  np.testing.assert_array_equal(first, again)
  assert not np.any(first == other)
  assert not np.any(first[0] == first[1]) and not np.any(first[1] ==
                                                         first[2])
  # Without a seed, each process draws a secret one into its state.
  unseeded = [DPF.tree_aggregation(1.0, 1, 1.0, SPEC, use_efficient=False)
              .create(VALUE).initialize()['query_state']['numerator_state']
              ['tree_state']['seed'] for _ in range(2)]
  assert tuple(unseeded[0]) != tuple(unseeded[1])


def test_the_adaptive_count_is_noised_by_its_own_tree():
  def run(seed):
    # Total 0.5 with the count's multiplier 2 * 0.5: the value's is 3**-0.5.
    return _rounds(DPF.tree_adaptive(
        0.5, 2, SPEC, initial_l2_norm_clip=0.4, restart_warmup=2,
        restart_frequency=3, clipped_count_stddev=0.5, noise_seed=seed), 3)

  def estimates(outputs):
    return [float(m['dp_query_metrics']['estimate_clip'])
            for _, m, _ in outputs]
  outputs = run(1)
  noisy = estimates(outputs)
  quiet = [e for _, _, e in TREE_ADAPTIVE_087[:3]]
  assert estimates(run(2)) != noisy
  assert all(abs(a - b) > 1e-6 for a, b in zip(noisy, quiet))
  # The value tree's node stddev follows the clip it adopts at a restart.
  for _, measurements, state in outputs:
    tree = state['query_state']['numerator_state']['tree_state']
    clip = measurements['dp_query_metrics']['current_clip']
    assert float(tree['stddev']) == pytest.approx(float(clip) * 3**-0.5,
                                                  rel=1e-6)
    below = state['query_state']['numerator_state'][
        'quantile_estimator_state']['below_tree_state']
    assert float(below['stddev']) == 0.5


@pytest.mark.parametrize('efficient', [False, True])
def test_the_released_residuals_add_up_to_the_trees_prefix_noise(efficient):
  """The one-walk residual against the prefix summed node by node over the
  cover of [0, t], over 16 rounds (a tree of depth 4)."""
  seed, previous = tf.constant([0, 11], tf.int64), np.zeros(5)

  @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
  def both(t):
    return (tree_aggregation.prefix_noise(seed, t, 5, efficient),
            tree_aggregation.residual_noise(seed, t, 5, efficient))
  for t in range(16):
    prefix, residual = both(tf.constant(t, tf.int64))
    np.testing.assert_allclose(residual, prefix - previous, atol=1e-5)
    previous = prefix.numpy()


# ---------------------------------------------------------------------------
# What a compiled form says it releases.


def test_a_compiled_round_carries_its_tree_releases():
  form = _form(DPF.tree_aggregation(0.7, 5, 1.0, SPEC, noise_seed=1,
                                    use_efficient=False))
  never = {'restart_warmup': 0, 'restart_frequency': 0}
  assert form.privacy_releases == (privacy_releases.Release(
      'DifferentiallyPrivateFactory', 0.7, mechanism='tree',
      parameters=never),)
  # Adaptive: the total 0.7 splits into the value's multiplier and the
  # count's 2 * (50 / 20), as gaussian_adaptive's; both trees restart alike.
  factory = DPF.tree_adaptive(0.7, 50, SPEC, noise_seed=1)
  value_z = (0.7**-2 - 5.0**-2)**-0.5
  assert factory.noise_multiplier == 0.7
  assert factory.value_noise_multiplier == pytest.approx(value_z)
  restarts = {'restart_warmup': 128, 'restart_frequency': 1024}
  releases = _form(factory).privacy_releases
  assert [(r.mechanism, r.parameters) for r in releases] == [
      ('tree', restarts)] * 2
  assert [r.noise_multiplier for r in releases] == pytest.approx(
      [value_z, 5.0])
  assert privacy_releases.combined_noise_multiplier(
      [r.noise_multiplier for r in releases]) == pytest.approx(0.7)


# ---------------------------------------------------------------------------
# DP-FTRL, as TFF's tutorial builds it.

# TFF 0.87: build_unweighted_fed_avg(model_fn, client_optimizer_fn=
# build_sgdm(learning_rate=0.1), server_optimizer_fn=build_sgdm(
# learning_rate=1.0, momentum=0.9), model_aggregator=DifferentiallyPrivate
# Factory.tree_aggregation(0.0, 2, 0.05, specs)) on tff_087_examples'
# model_fn and client_data, specs = tff.types.type_to_tf_tensor_specs(
# tff.learning.models.weights_type_from_model(model_fn).trainable):
# (kernel's first row, bias) after each of 3 rounds.
DP_FTRL_087 = [
    ([-0.020505087450146675, 0.013843070715665817, 0.006662017200142145],
     [0.024266403168439865, -0.006706408224999905, -0.017559994012117386]),
    ([-0.05948949605226517, 0.04022740200161934, 0.01926209218800068],
     [0.07029393315315247, -0.019344553351402283, -0.050949376076459885]),
    ([-0.11514278501272202, 0.07806068658828735, 0.037082087248563766],
     [0.13574014604091644, -0.037094224244356155, -0.09864592552185059])]


def test_dp_ftrl_learning_runs_compiled_and_gives_tff_087s_weights():
  specs = tff.types.type_to_tf_tensor_specs(
      tff.learning.models.weights_type_from_model(model_fn).trainable)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0, momentum=0.9),
      model_aggregator=DPF.tree_aggregation(0.0, 2, 0.05, specs))
  assert compiled.compiled_round(process.next) is not None
  state, data = process.initialize(), client_data()
  for row, bias in DP_FTRL_087:
    output = process.next(state, data)
    state = output.state
    kernel, got_bias = process.get_model_weights(state).trainable
    np.testing.assert_allclose(np.asarray(kernel)[0], row, atol=2e-6)
    np.testing.assert_allclose(got_bias, bias, atol=2e-6)
    assert output.metrics['aggregator'] == collections.OrderedDict(
        dp_query_metrics=collections.OrderedDict(tree_agg_dpftrl_clip=0.05),
        dp=())


# Every argument form below is one a real TFF 0.87 accepted: the same calls
# and `create` ran under TFF's sync test context without an error
# (2026-11-30; TFF refuses some forms accepted here, e.g. an int clip).
_F32_3 = tff.TensorType(np.float32, [3])
_F32_2 = tff.TensorType(np.float32, [2])
TFF_ACCEPTS = {
    'int clients': (lambda: DPF.tree_aggregation(0.5, 10, 1.0, SPEC),
                    _F32_3),
    'specs as a list': (lambda: DPF.tree_aggregation(0.5, 10, 1.0, [SPEC]),
                        tff.StructWithPythonType([_F32_3], list)),
    'specs as a tuple': (
        lambda: DPF.tree_aggregation(
            0.5, 10, 1.0, (SPEC, tf.TensorSpec([2], tf.float32))),
        tff.StructWithPythonType([_F32_3, _F32_2], tuple)),
    'specs as an OrderedDict': (
        lambda: DPF.tree_aggregation(0.5, 10, 1.0,
                                     collections.OrderedDict(a=SPEC)),
        tff.StructWithPythonType(collections.OrderedDict(a=_F32_3),
                                 collections.OrderedDict)),
    'specs as a TFF type': (lambda: DPF.tree_aggregation(0.5, 10, 1.0, _F32_3),
                            _F32_3),
    'every keyword': (lambda: DPF.tree_aggregation(
        noise_multiplier=0.5, clients_per_round=10, l2_norm_clip=1.0,
        record_specs=SPEC, noise_seed=3, use_efficient=False,
        record_aggregation_factory=tff.aggregators.SumFactory()), _F32_3),
    'a numpy seed': (lambda: DPF.tree_aggregation(
        0.5, 10, 1.0, SPEC, noise_seed=np.int64(3)), _F32_3),
    'tree_adaptive, every keyword': (lambda: DPF.tree_adaptive(
        noise_multiplier=0.5, clients_per_round=100, record_specs=SPEC,
        initial_l2_norm_clip=0.2, restart_warmup=None, restart_frequency=10,
        target_unclipped_quantile=0.7, clip_learning_rate=0.1,
        clipped_count_stddev=5.0, noise_seed=2), _F32_3),
    'tree_adaptive, a numpy warmup': (lambda: DPF.tree_adaptive(
        0.5, 100, SPEC, restart_warmup=np.int64(5), restart_frequency=10),
                                      _F32_3),
}


@pytest.mark.parametrize('make, value_type', TFF_ACCEPTS.values(),
                         ids=TFF_ACCEPTS)
def test_every_argument_form_tff_087_accepts_is_accepted(make, value_type):
  process = make().create(value_type)
  assert process.next.type_signature.result.result.member == value_type
