"""TFF 0.87's `build_personalization_eval_computation`, with personalization
strategies written as TFF's users write them (a `VariableModel` of their
own, Keras optimizers, `forward_pass`, metric variables reset by hand;
tests/support/tff_087_personalization.py). The expected metrics were
printed by TensorFlow Federated 0.87 running the same program on the same
model, weights and data."""

import collections

import numpy as np
import pytest

import canonical as tff
from tff_087_examples import model_fn
from tff_087_personalization import evaluate_fn
from tff_087_personalization import LinearModel
from tff_087_personalization import p13n_data
from tff_087_personalization import PERSONALIZE_FN_DICT
from tff_087_personalization import WEIGHTS

build = tff.learning.algorithms.build_personalization_eval_computation


# TFF 0.87, client by client (the clients of p13n_data in order): each
# strategy's (accuracy, loss, num_examples) on the test data, and the
# training examples each strategy went through.
TFF_METRICS = collections.OrderedDict(
    baseline_metrics=[(0.25, 1.350201, 4), (0.0, 1.6975169, 3),
                      (0.2, 1.2602555, 5)],
    sgd=[(0.75, 0.379685, 4), (1.0, 0.157476, 3), (0.6, 0.5623579, 5)],
    adam=[(0.25, 1.0135884, 4), (0.0, 1.3714513, 3), (0.6, 1.0117202, 5)])
TFF_TRAIN_EXAMPLES = dict(sgd=[12, 10, 8], adam=[6, 5, 4])
TFF_TYPE = (
    '(<server_model_weights=<trainable=<float32[4,3],float32[3]>,'
    'non_trainable=<>>@SERVER,federated_client_input={<train_data=<float32[4]'
    ',int32>*,test_data=<float32[4],int32>*>}@CLIENTS> -> <baseline_metrics='
    '<num_examples=int32[?],loss=float32[?],accuracy=float32[?]>,sgd=<'
    'num_examples=int32[?],loss=float32[?],accuracy=float32[?],'
    'num_train_examples=int32[?]>,adam=<num_examples=int32[?],loss='
    'float32[?],accuracy=float32[?],num_train_examples=int32[?]>>@SERVER)')
NAMES = ('accuracy', 'loss', 'num_examples')


def _by_client(metrics):
  """Each strategy's rows, one per sampled client, in TFF's client order
  (the clients' test sets have 4, 3 and 5 examples)."""
  order = [[4, 3, 5].index(n) for n in metrics['baseline_metrics'][
      'num_examples']]
  rows = {}
  for strategy, values in metrics.items():
    columns = [np.asarray(values[name]).tolist() for name in NAMES]
    by_position = dict(zip(order, zip(*columns)))
    rows[strategy] = [by_position[i] for i in sorted(by_position)]
    if 'num_train_examples' in values:
      trained = dict(zip(order, np.asarray(values['num_train_examples'])))
      rows[strategy + '/trained'] = [trained[i] for i in sorted(trained)]
  return rows


@pytest.mark.slow
def test_personalization_eval_gives_tffs_metrics_per_client():
  computation = build(LinearModel, PERSONALIZE_FN_DICT, evaluate_fn,
                      max_num_clients=10)
  assert str(computation.type_signature) == TFF_TYPE
  rows = _by_client(computation(WEIGHTS, p13n_data()))
  for strategy, expected in TFF_METRICS.items():
    assert len(rows[strategy]) == 3
    for got, want in zip(rows[strategy], expected):
      assert got == pytest.approx(want, rel=1e-5)
  for strategy, expected in TFF_TRAIN_EXAMPLES.items():
    assert rows[strategy + '/trained'] == expected


@pytest.mark.slow
def test_personalization_eval_samples_at_most_max_num_clients():
  computation = build(LinearModel, PERSONALIZE_FN_DICT, evaluate_fn,
                      max_num_clients=2)
  rows = _by_client(computation(WEIGHTS, p13n_data()))
  assert len(rows['sgd']) == 2
  for strategy, expected in TFF_METRICS.items():
    for got in rows[strategy]:  # Each sampled row is one client's.
      assert any(got == pytest.approx(want, rel=1e-5) for want in expected)


def test_personalization_eval_names_its_bad_arguments():
  with pytest.raises(ValueError, match='baseline_metrics'):
    build(LinearModel, collections.OrderedDict(
        baseline_metrics=PERSONALIZE_FN_DICT['sgd']), evaluate_fn)
  with pytest.raises(ValueError, match='max_num_clients'):
    build(LinearModel, PERSONALIZE_FN_DICT, evaluate_fn, max_num_clients=0)
  with pytest.raises(TypeError, match='OrderedDict'):
    build(LinearModel, dict(PERSONALIZE_FN_DICT), evaluate_fn)


# TFF 0.87 with tff_087_examples.model_fn (from_keras_model): the same
# numbers, with the Keras model's metrics (accuracy, loss, num_examples,
# num_batches).
TFF_KERAS_TYPE = (
    '(<server_model_weights=<trainable=<float32[4,3],float32[3]>,'
    'non_trainable=<>>@SERVER,federated_client_input={<train_data=<float32[4]'
    ',int32>*,test_data=<float32[4],int32>*>}@CLIENTS> -> <baseline_metrics='
    '<sparse_categorical_accuracy=float32[?],loss=float32[?],num_examples='
    'int64[?],num_batches=int64[?]>,sgd=<sparse_categorical_accuracy='
    'float32[?],loss=float32[?],num_examples=int64[?],num_batches=int64[?],'
    'num_train_examples=int32[?]>,adam=<sparse_categorical_accuracy='
    'float32[?],loss=float32[?],num_examples=int64[?],num_batches=int64[?],'
    'num_train_examples=int32[?]>>@SERVER)')
TFF_KERAS_BATCHES = [2, 2, 3]


@pytest.mark.slow
def test_personalization_eval_of_a_keras_model():
  computation = build(model_fn, PERSONALIZE_FN_DICT, evaluate_fn,
                      max_num_clients=10)
  assert str(computation.type_signature) == TFF_KERAS_TYPE
  metrics = computation(WEIGHTS, p13n_data())
  for values in metrics.values():
    values['accuracy'] = values.pop('sparse_categorical_accuracy')
  rows = _by_client(metrics)
  for strategy, expected in TFF_METRICS.items():
    for got, want in zip(rows[strategy], expected):
      assert got == pytest.approx(want, rel=1e-5)
  order = [[4, 3, 5].index(n)
           for n in metrics['baseline_metrics']['num_examples']]
  assert [dict(zip(order, metrics['sgd']['num_batches']))[i]
          for i in range(3)] == TFF_KERAS_BATCHES
