"""TFF 0.87's learning algorithms past FedAvg, written as TFF's users write
them: Mime Lite (weighted, unweighted, scheduled), FedAvg with a client
learning-rate schedule, unweighted FedProx, federated k-means and
Federated Reconstruction (training and evaluation). Every expected number
below was printed by TensorFlow Federated 0.87 running the same program on
the same model and data (tests/support/tff_087_examples.py; k-means and
reconstruction on the data made here)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical.learning.algorithms import averaging
from canonical.learning.templates import model_delta
from tff_087_examples import client_data
from tff_087_examples import model_fn
from tff_087_examples import recon_data
from tff_087_examples import recon_loss
from tff_087_examples import recon_metrics
from tff_087_examples import recon_model_fn

optimizers = tff.learning.optimizers
algorithms = tff.learning.algorithms

# TFF 0.87: the model's trainable weights (kernel, bias) after the last
# round, and each round's training loss and accuracy.
TFF_MIME_SGDM = dict(
    kernel=[[-0.3094373, 0.1921594, 0.1172779],
            [-0.0160555, 0.0057696, 0.0102859],
            [-0.0900424, 0.0503149, 0.0397275],
            [0.1294215, -0.0920167, -0.0374048]],
    bias=[0.3165717, -0.0825059, -0.2340658],
    losses=[1.0763588, 0.8775345], accuracies=[0.5, 0.875])
# ... and the server's momentum accumulator (bias part) after two rounds.
TFF_MIME_SGDM_ACCUMULATOR_BIAS = [-0.7268028, 0.1312979, 0.595505]
TFF_MIME_ADAM_UNIFORM = dict(
    kernel=[[-0.1221465, 0.1224574, 0.0845279],
            [0.0349595, -0.0339828, -0.0355547],
            [-0.0407949, 0.0091639, 0.0423956],
            [0.0465888, -0.0543265, 0.020327]],
    bias=[0.1217986, -0.0339253, -0.1245856],
    losses=[1.0678604, 0.9536256], accuracies=[0.625, 0.875])
TFF_UNWEIGHTED_MIME = dict(
    kernel=[[-0.2744503, 0.182503, 0.0919474],
            [0.0237758, -0.0122917, -0.0114841],
            [-0.1115922, 0.0481569, 0.0634353],
            [0.114636, -0.0943153, -0.0203207]],
    bias=[0.2965463, -0.0720366, -0.2245097],
    losses=[1.0763588, 0.8897966], accuracies=[0.5, 0.875])
TFF_SCHEDULED_MIME = dict(
    kernel=[[-0.3011721, 0.187882, 0.1132901],
            [-0.0142074, 0.0047304, 0.009477],
            [-0.0877052, 0.0483404, 0.0393648],
            [0.1275064, -0.0911423, -0.0363641]],
    bias=[0.307126, -0.0778539, -0.2292721],
    losses=[1.0763588, 0.9047069, 0.7868384], accuracies=[0.5, 0.875, 0.875])
TFF_SCHEDULED_FED_AVG = dict(
    kernel=[[-0.3542782, 0.2182821, 0.1359961],
            [-0.0315701, 0.0129288, 0.0186413],
            [-0.0964404, 0.0611185, 0.0353219],
            [0.1605463, -0.1089043, -0.051642]],
    bias=[0.3690352, -0.1028862, -0.2661489],
    losses=[1.0559776, 0.7897326, 0.7082755], accuracies=[0.5, 0.875, 0.875])
TFF_SCHEDULED_FED_AVG_ADAM = dict(
    kernel=[[-0.1898471, 0.190379, 0.1889642],
            [-0.1696897, 0.1540202, 0.1780978],
            [-0.1853702, 0.1877158, 0.1790776],
            [0.1936633, -0.1932131, -0.1946633]],
    bias=[0.1901521, -0.1848078, -0.1915388],
    losses=[1.0492628, 0.8772628], accuracies=[0.5, 0.875])
TFF_UNWEIGHTED_FED_PROX = dict(
    kernel=[[-0.1978811, 0.1272128, 0.0706684],
            [0.0057219, -0.0037624, -0.0019595],
            [-0.0741508, 0.0366712, 0.0374797],
            [0.0850251, -0.0644196, -0.0206055]],
    bias=[0.216468, -0.0582251, -0.1582429],
    losses=[1.0759749, 0.9226041], accuracies=[0.5, 0.875])


def _rounds(process, count, data=None):
  data = data or client_data()
  state = process.initialize()
  metrics = []
  for _ in range(count):
    output = process.next(state, data)
    state = output.state
    metrics.append(output.metrics)
  return state, metrics


def _assert_tffs(process, state, metrics, expected):
  kernel, bias = process.get_model_weights(state).trainable
  np.testing.assert_allclose(kernel, expected['kernel'], atol=2e-6)
  np.testing.assert_allclose(bias, expected['bias'], atol=2e-6)
  train = [m['client_work']['train'] for m in metrics]
  assert [t['loss'] for t in train] == pytest.approx(expected['losses'],
                                                     rel=1e-5)
  assert [t['sparse_categorical_accuracy'] for t in train] == (
      pytest.approx(expected['accuracies']))
  assert all((t['num_examples'], t['num_batches']) == (8, 5) for t in train)


@pytest.mark.slow
def test_weighted_mime_lite_keeps_tffs_global_optimizer_state():
  process = algorithms.build_weighted_mime_lite(
      model_fn, base_optimizer=optimizers.build_sgdm(0.1, momentum=0.9))
  state, metrics = _rounds(process, 2)
  _assert_tffs(process, state, metrics, TFF_MIME_SGDM)
  optimizer_state, gradient_state = state.client_work
  assert list(optimizer_state) == ['learning_rate', 'momentum',
                                   'accumulator']
  np.testing.assert_allclose(optimizer_state['accumulator'][1],
                             TFF_MIME_SGDM_ACCUMULATOR_BIAS, atol=2e-6)
  assert gradient_state == collections.OrderedDict(value_sum_process=(),
                                                   weight_sum_process=())
  assert metrics[-1]['aggregator'] == collections.OrderedDict(
      mean_value=(), mean_weight=())
  assert metrics[-1]['finalizer'] == collections.OrderedDict(
      update_non_finite=0)


def test_weighted_mime_lite_with_adam_uniform_weights_and_a_server_rate():
  process = algorithms.build_weighted_mime_lite(
      model_fn, base_optimizer=optimizers.build_adam(0.05),
      server_optimizer=optimizers.build_sgdm(0.5),
      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  state, metrics = _rounds(process, 2)
  _assert_tffs(process, state, metrics, TFF_MIME_ADAM_UNIFORM)
  assert int(state.client_work[0]['step']) == 2  # Stepped at the server.


def test_unweighted_mime_lite_counts_every_client_the_same():
  process = algorithms.build_unweighted_mime_lite(
      model_fn, base_optimizer=optimizers.build_sgdm(0.1, momentum=0.9))
  state, metrics = _rounds(process, 2)
  _assert_tffs(process, state, metrics, TFF_UNWEIGHTED_MIME)
  assert metrics[-1]['aggregator'] == collections.OrderedDict(
      mean_value=(), mean_count=())


@pytest.mark.slow
def test_mime_lite_with_a_schedule_sets_the_rate_of_the_next_round():
  process = algorithms.build_mime_lite_with_optimizer_schedule(
      model_fn, learning_rate_fn=lambda r: 0.1 / (1.0 + tf.cast(r, tf.float32)),
      base_optimizer=optimizers.build_sgdm(0.1, momentum=0.9))
  assert float(process.initialize().client_work[1][0]['learning_rate']) == (
      pytest.approx(0.1))
  state, metrics = _rounds(process, 3)
  _assert_tffs(process, state, metrics, TFF_SCHEDULED_MIME)
  round_num, (optimizer_state, _) = state.client_work
  assert int(round_num) == 3
  assert float(optimizer_state['learning_rate']) == pytest.approx(0.025)


def test_mime_lite_refuses_a_keras_optimizer_by_name():
  with pytest.raises(TypeError, match='base_optimizer.*tff.learning.'
                     'optimizers.Optimizer.*Keras'):
    algorithms.build_weighted_mime_lite(
        model_fn, base_optimizer=tf.keras.optimizers.SGD(0.1))


@pytest.mark.slow
def test_fed_avg_with_a_client_schedule_reports_each_rounds_rate():
  process = algorithms.build_weighted_fed_avg_with_optimizer_schedule(
      model_fn,
      client_learning_rate_fn=lambda r: 0.2 / (1.0 + tf.cast(r, tf.float32)),
      client_optimizer_fn=lambda rate: optimizers.build_sgdm(rate))
  state, metrics = _rounds(process, 3)
  _assert_tffs(process, state, metrics, TFF_SCHEDULED_FED_AVG)
  assert [m['client_work']['client_learning_rate'] for m in metrics] == (
      pytest.approx([0.2, 0.1, 0.2 / 3]))
  assert int(state.client_work) == 3


@pytest.mark.slow
def test_fed_avg_with_a_scheduled_keras_optimizer():
  # Keras's SGD steps as build_sgdm does: TFF's numbers again.
  process = algorithms.build_weighted_fed_avg_with_optimizer_schedule(
      model_fn,
      client_learning_rate_fn=lambda r: 0.2 / (1.0 + tf.cast(r, tf.float32)),
      client_optimizer_fn=lambda rate: tf.keras.optimizers.SGD(rate))
  state, metrics = _rounds(process, 3)
  _assert_tffs(process, state, metrics, TFF_SCHEDULED_FED_AVG)


@pytest.mark.slow
def test_fed_avg_with_a_client_schedule_and_a_server_adam():
  process = algorithms.build_weighted_fed_avg_with_optimizer_schedule(
      model_fn,
      client_learning_rate_fn=lambda r: 0.2 * 0.5 ** tf.cast(r, tf.float32),
      client_optimizer_fn=lambda rate: optimizers.build_sgdm(rate, 0.5),
      server_optimizer_fn=optimizers.build_adam(0.1))
  state, metrics = _rounds(process, 2)
  _assert_tffs(process, state, metrics, TFF_SCHEDULED_FED_AVG_ADAM)


@pytest.mark.slow
def test_unweighted_fed_prox_is_composed_as_tffs():
  process = algorithms.build_unweighted_fed_prox(
      model_fn, 0.5, optimizers.build_sgdm(0.1))
  state, metrics = _rounds(process, 1)
  assert state.client_work == ()  # TFF's FedProx client work has no state.
  assert metrics[0]['aggregator'] == collections.OrderedDict(
      mean_value=(), mean_count=())
  # TFF 0.87's proximal term has the opposite sign of the paper's (and
  # ours): with mu negated, the same composition takes TFF's steps.
  tffs = averaging._build(  # pylint: disable=protected-access
      'test', model_fn, model_delta.training_step(
          optimizers.build_sgdm(0.1), -0.5, hparams_in_state=False),
      None, None, weighted=False, by_examples=False)
  state, metrics = _rounds(tffs, 2)
  _assert_tffs(tffs, state, metrics, TFF_UNWEIGHTED_FED_PROX)


@pytest.mark.slow
def test_a_dataset_iterator_loop_gives_the_same_rounds():
  sgd = optimizers.build_sgdm(0.1)
  by_reduce = algorithms.build_weighted_fed_avg(model_fn, sgd)
  by_iterator = algorithms.build_weighted_fed_avg(
      model_fn, sgd,
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
  first, _ = _rounds(by_reduce, 1)
  second, _ = _rounds(by_iterator, 1)
  np.testing.assert_array_equal(first.global_model_weights.trainable[0],
                                second.global_model_weights.trainable[0])
  with pytest.raises(TypeError, match='LoopImplementation'):
    algorithms.build_weighted_fed_avg(model_fn, sgd,
                                      loop_implementation='reduce')


# TFF 0.87's build_fed_kmeans(3, (2,), random_seed=(5, 7)) on `_points()`:
# the initial centroids, the centroids after each round, and the points
# each centroid has had (from a pseudo-count of 1).
TFF_KMEANS_INITIAL = [[1.4802517, 1.429269], [-0.6244101, -0.6745207],
                      [-0.1636241, -1.614334]]
TFF_KMEANS_ROUNDS = [
    [[2.0284233, 0.3032384], [-1.9209578, 0.6537246],
     [-0.1414445, -2.8826191]],
    [[2.0705903, 0.2166206], [-2.0650187, 0.8013074],
     [-0.1394282, -2.9979177]],
    [[2.0861254, 0.1847088], [-2.1204267, 0.8580701],
     [-0.1386721, -3.0411546]],
]
TFF_KMEANS_COUNTS = [19.0, 13.0, 16.0]
# build_fed_kmeans(2, (2, 2), random_seed=(1, 2)) on `_squares()`: the
# second centroid is nearest no point, so it stays where it was drawn.
TFF_KMEANS_2X2_INITIAL = [[[0.5441101, 0.2073803], [0.0735643, 0.0464346]],
                          [[-1.3015898, -0.9538565], [0.8417286, 1.9396868]]]
TFF_KMEANS_2X2_FIRST = [[0.3452265, -0.0342442], [0.4326564, -0.5565881]]


def _points():
  rng = np.random.default_rng(1)
  datasets = []
  for n, center in ((6, (2.0, 0.0)), (4, (-2.0, 1.0)), (5, (0.0, -3.0))):
    x = (rng.normal(size=(n, 2)) * 0.5 + np.array(center)).astype(np.float32)
    datasets.append(tf.data.Dataset.from_tensor_slices(x))
  return datasets


def _squares():
  rng = np.random.default_rng(2)
  return [tf.data.Dataset.from_tensor_slices(
      rng.normal(size=(n, 2, 2)).astype(np.float32)) for n in (3, 4)]


def test_fed_kmeans_draws_and_moves_tffs_centroids():
  process = algorithms.build_fed_kmeans(3, (2,), random_seed=(5, 7))
  assert str(process.next.type_signature) == (
      '(<state=<global_model_weights=float32[3,2],distributor=<>,'
      'client_work=<>,aggregator=<>,finalizer=float32[3]>@SERVER,'
      'client_data={float32[2]*}@CLIENTS> -> <state=<global_model_weights='
      'float32[3,2],distributor=<>,client_work=<>,aggregator=<>,finalizer='
      'float32[3]>@SERVER,metrics=<distributor=<>,client_work=<num_examples='
      'float32>,aggregator=<>,finalizer=<>>@SERVER>)')
  state = process.initialize()
  np.testing.assert_allclose(process.get_model_weights(state),
                             TFF_KMEANS_INITIAL, atol=1e-6)
  data = _points()
  for expected in TFF_KMEANS_ROUNDS:
    output = process.next(state, data)
    state = output.state
    np.testing.assert_allclose(process.get_model_weights(state), expected,
                               atol=1e-6)
    assert output.metrics['client_work'] == collections.OrderedDict(
        num_examples=15.0)
  np.testing.assert_array_equal(state.finalizer, TFF_KMEANS_COUNTS)


def test_fed_kmeans_leaves_a_centroid_no_point_chose():
  process = algorithms.build_fed_kmeans(2, (2, 2), random_seed=(1, 2))
  state = process.initialize()
  np.testing.assert_allclose(process.get_model_weights(state),
                             TFF_KMEANS_2X2_INITIAL, atol=1e-6)
  state, _ = _rounds(process, 2, _squares())
  centroids = process.get_model_weights(state)
  np.testing.assert_allclose(centroids[0], TFF_KMEANS_2X2_FIRST, atol=1e-6)
  np.testing.assert_allclose(centroids[1], TFF_KMEANS_2X2_INITIAL[1],
                             atol=1e-6)
  np.testing.assert_array_equal(state.finalizer, [15.0, 1.0])


def test_fed_kmeans_names_a_bad_argument():
  with pytest.raises(ValueError, match='random_seed must be a pair'):
    algorithms.build_fed_kmeans(3, (2,), random_seed=7)
  with pytest.raises(ValueError, match='data_shape'):
    algorithms.build_fed_kmeans(3, 2)
  with pytest.raises(TypeError, match='sum_aggregator.*Unweighted'):
    algorithms.build_fed_kmeans(3, (2,), random_seed=(1, 2),
                                sum_aggregator=tff.aggregators.MeanFactory())


# TFF 0.87's build_fed_recon on recon_model_fn and recon_data: the global
# weights after the last round; each round's accuracy and loss (the mean
# over post-reconstruction batches of each batch's loss).
TFF_FED_RECON = dict(
    kernel=[[0.0125129, 0.0026272, -0.0151401],
            [-0.1411754, 0.0799237, 0.0612516],
            [0.0116764, -0.0332877, 0.0216113],
            [-0.0195788, 0.0643938, -0.044815]],
    bias=[0.0710071, 0.0224776, -0.0934847],
    metrics=[(0.5, 1.0694313), (0.75, 0.9973813)])
# ... with a momentum server, Adam clients, a faster reconstruction, two
# epochs each side (post-reconstruction cut at 3 batches), uniform weights.
TFF_FED_RECON_CUSTOM = dict(
    kernel=[[-0.0131963, -0.0695088, 0.1538556],
            [-0.0341466, -0.0251027, 0.0662002],
            [-0.1460832, 0.0384491, 0.0813861],
            [-0.0240054, 0.017202, -0.0866235]],
    bias=[-0.0275521, 0.0060185, -0.1214635],
    metrics=[(0.8823529, 0.4515173), (0.8235294, 0.4441744)])
# ... one round with an unweighted mean and no metrics_fn (loss only).
TFF_FED_RECON_UNWEIGHTED_BIAS = [0.0219711, 0.0212265, -0.0431976]
# build_fed_recon_eval of TFF_FED_RECON's model, on all clients, then on
# the first two: current and total (accuracy, loss), and the state's sums.
TFF_FED_RECON_EVAL = [((0.875, 0.9275309), (0.875, 0.9275309)),
                      ((1.0, 0.8795177), (0.9285714, 0.9069538))]
TFF_FED_RECON_EVAL_SUMS = collections.OrderedDict(
    sparse_categorical_accuracy=[13.0, 14.0], loss=[6.3486767, 7.0])


def _assert_recon(process, state, metrics, expected):
  kernel, bias = process.get_model_weights(state).trainable
  np.testing.assert_allclose(kernel, expected['kernel'], atol=2e-6)
  np.testing.assert_allclose(bias, expected['bias'], atol=2e-6)
  for got, want in zip(metrics, expected['metrics']):
    assert tuple(got['client_work']['train'].values()) == pytest.approx(
        want, rel=1e-5)


@pytest.mark.slow
def test_fed_recon_trains_global_weights_as_tffs():
  process = algorithms.build_fed_recon(
      recon_model_fn, loss_fn=recon_loss, metrics_fn=recon_metrics)
  state, metrics = _rounds(process, 2, recon_data())
  _assert_recon(process, state, metrics, TFF_FED_RECON)
  assert state.client_work == ()
  assert list(metrics[0]['client_work']['train']) == [
      'sparse_categorical_accuracy', 'loss']
  # The state's model is the global weights only.
  assert [w.shape for w in state.global_model_weights.trainable] == [
      (4, 3), (3,)]


@pytest.mark.slow
def test_fed_recon_with_other_optimizers_splits_and_weights():
  split = tff.learning.models.ReconstructionModel.build_dataset_split_fn(
      recon_epochs=2, post_recon_epochs=2, post_recon_steps_max=3)
  process = algorithms.build_fed_recon(
      recon_model_fn, loss_fn=recon_loss, metrics_fn=recon_metrics,
      server_optimizer_fn=optimizers.build_sgdm(0.5, momentum=0.9),
      client_optimizer_fn=optimizers.build_adam(0.05),
      reconstruction_optimizer_fn=optimizers.build_sgdm(0.3),
      dataset_split_fn=split,
      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  state, metrics = _rounds(process, 2, recon_data())
  _assert_recon(process, state, metrics, TFF_FED_RECON_CUSTOM)


def test_fed_recon_with_an_unweighted_aggregator():
  with pytest.raises(ValueError, match='UNIFORM'):
    algorithms.build_fed_recon(
        recon_model_fn, loss_fn=recon_loss,
        model_aggregator_factory=tff.aggregators.UnweightedMeanFactory())
  process = algorithms.build_fed_recon(
      recon_model_fn, loss_fn=recon_loss,
      model_aggregator_factory=tff.aggregators.UnweightedMeanFactory(),
      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  state, metrics = _rounds(process, 1, recon_data())
  np.testing.assert_allclose(process.get_model_weights(state).trainable[1],
                             TFF_FED_RECON_UNWEIGHTED_BIAS, atol=2e-6)
  assert metrics[0]['aggregator'] == collections.OrderedDict(
      mean_value=(), mean_count=())
  assert list(metrics[0]['client_work']['train']) == ['loss']


@pytest.mark.slow
def test_fed_recon_eval_reconstructs_then_evaluates_as_tffs():
  training = algorithms.build_fed_recon(
      recon_model_fn, loss_fn=recon_loss, metrics_fn=recon_metrics)
  trained, _ = _rounds(training, 2, recon_data())
  evaluation = algorithms.build_fed_recon_eval(
      recon_model_fn, loss_fn=recon_loss, metrics_fn=recon_metrics)
  assert str(evaluation.next.type_signature) == (
      '(<state=<global_model_weights=<trainable=<float32[4,3],float32[3]>,'
      'non_trainable=<>>,distributor=<>,client_work=<<>,'
      '<sparse_categorical_accuracy=<float32,float32>,loss=<float32,'
      'float32>>>,aggregator=<value_sum_process=<>,weight_sum_process=<>>,'
      'finalizer=<>>@SERVER,client_data={<float32[?,4],int32[?]>*}@CLIENTS> '
      '-> <state=<global_model_weights=<trainable=<float32[4,3],float32[3]>,'
      'non_trainable=<>>,distributor=<>,client_work=<<>,'
      '<sparse_categorical_accuracy=<float32,float32>,loss=<float32,'
      'float32>>>,aggregator=<value_sum_process=<>,weight_sum_process=<>>,'
      'finalizer=<>>@SERVER,metrics=<distributor=<>,client_work=<eval='
      '<current_round_metrics=<sparse_categorical_accuracy=float32,loss='
      'float32>,total_rounds_metrics=<sparse_categorical_accuracy=float32,'
      'loss=float32>>>,aggregator=<mean_value=<>,mean_weight=<>>,finalizer='
      '<>>@SERVER>)')
  state = evaluation.set_model_weights(
      evaluation.initialize(), training.get_model_weights(trained))
  data = recon_data()
  for clients, (current, total) in zip((data, data[:2]), TFF_FED_RECON_EVAL):
    output = evaluation.next(state, clients)
    state = output.state
    measured = output.metrics['client_work']['eval']
    assert tuple(measured['current_round_metrics'].values()) == (
        pytest.approx(current, rel=1e-5))
    assert tuple(measured['total_rounds_metrics'].values()) == (
        pytest.approx(total, rel=1e-5))
  sums = state.client_work[1]
  for name, expected in TFF_FED_RECON_EVAL_SUMS.items():
    np.testing.assert_allclose(sums[name], expected, rtol=1e-6)
  np.testing.assert_array_equal(  # Evaluation never moves the model.
      evaluation.get_model_weights(state).trainable[0],
      training.get_model_weights(trained).trainable[0])


# TFF 0.87 with metrics_aggregator=tff.learning.metrics.
# secure_sum_then_finalize (the test execution context): the same training
# metrics from FedAvg and Mime Lite, the loss after quantization.
TFF_SECURE_TRAIN = dict(sparse_categorical_accuracy=0.5, loss=1.076355,
                        num_examples=8, num_batches=5)


@pytest.mark.slow
@pytest.mark.parametrize('builder', [algorithms.build_weighted_fed_avg,
                                     algorithms.build_weighted_mime_lite])
def test_a_metrics_aggregator_is_passed_through(builder):
  process = builder(
      model_fn, optimizers.build_sgdm(0.1),
      metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize)
  train = process.next(process.initialize(),
                       client_data()).metrics['client_work']['train']
  assert list(train['secure_sum_measurements']) == [
      '0.0/1048575.0/float32', '0/1048575/int64']
  assert {name: train[name] for name in TFF_SECURE_TRAIN} == pytest.approx(
      TFF_SECURE_TRAIN, rel=1e-6)


# TFF 0.87's build_fed_eval at its initial (zero) model: the state keeps
# the metrics aggregation's unfinalized sums.
TFF_FED_EVAL_STATE = collections.OrderedDict(
    sparse_categorical_accuracy=[6.0, 8.0], loss=[8.7888985, 8.0],
    num_examples=[8], num_batches=[5])


def test_fed_eval_keeps_tffs_state():
  process = algorithms.build_fed_eval(model_fn)
  assert str(process.next.type_signature) == (
      '(<state=<global_model_weights=<trainable=<float32[4,3],float32[3]>,'
      'non_trainable=<>>,distributor=<>,client_work=<<>,'
      '<sparse_categorical_accuracy=<float32,float32>,loss=<float32,float32>'
      ',num_examples=<int64>,num_batches=<int64>>>,aggregator=<value_sum_'
      'process=<>,weight_sum_process=<>>,finalizer=<>>@SERVER,client_data='
      '{<float32[?,4],int32[?]>*}@CLIENTS> -> <state=<global_model_weights='
      '<trainable=<float32[4,3],float32[3]>,non_trainable=<>>,distributor=<>'
      ',client_work=<<>,<sparse_categorical_accuracy=<float32,float32>,loss='
      '<float32,float32>,num_examples=<int64>,num_batches=<int64>>>,'
      'aggregator=<value_sum_process=<>,weight_sum_process=<>>,finalizer=<>>'
      '@SERVER,metrics=<distributor=<>,client_work=<eval=<current_round_'
      'metrics=<sparse_categorical_accuracy=float32,loss=float32,num_examples'
      '=int64,num_batches=int64>,total_rounds_metrics=<sparse_categorical_'
      'accuracy=float32,loss=float32,num_examples=int64,num_batches=int64>>>'
      ',aggregator=<mean_value=<>,mean_weight=<>>,finalizer=<>>@SERVER>)')
  output = process.next(process.initialize(), client_data())
  sums = output.state.client_work[1]
  for name, expected in TFF_FED_EVAL_STATE.items():
    np.testing.assert_allclose(sums[name], expected, rtol=1e-6)
  with pytest.raises(TypeError, match='metrics_aggregation_process'):
    algorithms.build_fed_eval(model_fn, metrics_aggregation_process=object())
