"""TFF 0.87's `build_personalization_eval_computation`: a federated
computation (not a process) that evaluates personalization strategies.

`(model_weights@SERVER, client_input@CLIENTS) -> metrics@SERVER`: the
weights are broadcast; each client (its input `OrderedDict(train_data=,
test_data=)`, unbatched datasets) evaluates the model as sent with
`baseline_evaluate_fn(model, test_data)`, then, for each strategy of
`personalize_fn_dict`, starts again from the weights sent and runs
`personalize_fn(model, train_data, test_data)`; the server collects up to
`max_num_clients` clients' metrics (`UnweightedReservoirSamplingFactory`),
each metric a tensor with one entry per sampled client.

As in TFF, `model_fn` makes a `tff.learning.models.VariableModel` inside the
client's computation and the strategies train its variables (with a Keras
optimizer, say): those are the call's own variables, lowered into values
by the compiler, so the computation is pure and compiles. It has the shape
of a round, so `tff.backends.mapreduce.get_map_reduce_form_for_computation`
makes a form of it.
"""

import collections
import numbers

import tensorflow as tf

from canonical import aggregators
from canonical import errors
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.core import types as ft
from canonical.learning.model_weights import ModelWeights
from canonical.learning.weights_type import weights_type_from_model

_TRAIN_DATA_KEY = 'train_data'
_EVAL_DATA_KEY = 'test_data'
_BASELINE_KEY = 'baseline_metrics'


def build_personalization_eval_computation(model_fn, personalize_fn_dict,
                                           baseline_evaluate_fn,
                                           max_num_clients=100):
  """The federated computation above. `personalize_fn_dict` an
  `OrderedDict` of strategy name to a no-argument function returning the
  strategy (a function of the model, train and test data returning an
  `OrderedDict` of metrics); `baseline_evaluate_fn(model, dataset)` the
  metrics of the model as sent."""
  who = 'build_personalization_eval_computation'
  _check_arguments(who, model_fn, personalize_fn_dict, baseline_evaluate_fn,
                   max_num_clients)
  model = model_fn()
  weights_type = specs.plain(weights_type_from_model(model))
  element_type = tf.nest.map_structure(_without_batch_dimension,
                                       specs.plain(model.input_spec))
  client_input_type = collections.OrderedDict([
      (_TRAIN_DATA_KEY, tf.data.DatasetSpec(element_type)),
      (_EVAL_DATA_KEY, tf.data.DatasetSpec(element_type))])

  def evaluate(initial_weights, client_input):
    train_data = client_input[_TRAIN_DATA_KEY]
    test_data = client_input[_EVAL_DATA_KEY]
    metrics = collections.OrderedDict()
    baseline_model = _model_at(model_fn, initial_weights)
    metrics[_BASELINE_KEY] = baseline_evaluate_fn(baseline_model, test_data)
    model = model_fn()
    strategies = collections.OrderedDict(
        (name, make()) for name, make in personalize_fn_dict.items())
    for name, personalize_fn in strategies.items():
      ModelWeights(*initial_weights).assign_weights_to(model)
      metrics[name] = personalize_fn(model, train_data, test_data)
    return metrics

  client_tf = computations.tf_computation(evaluate, weights_type,
                                          client_input_type)
  sampling = aggregators.UnweightedReservoirSamplingFactory(
      sample_size=max_num_clients).create(
          specs.plain(client_tf.result_spec))

  @computations.federated_computation(ft.server(weights_type),
                                      ft.clients(client_input_type))
  def personalization_eval(server_model_weights, federated_client_input):
    client_metrics = intrinsics.federated_map(
        client_tf, (intrinsics.federated_broadcast(server_model_weights),
                    federated_client_input))
    return sampling.next(sampling.initialize(), client_metrics).result

  return personalization_eval


def _model_at(model_fn, weights):
  """A fresh model of `model_fn` holding `weights`."""
  model = model_fn()
  ModelWeights(*weights).assign_weights_to(model)
  return model


def _without_batch_dimension(spec):
  if not isinstance(spec, tf.TensorSpec) or spec.shape.rank is None or (
      spec.shape.rank < 1):
    raise errors.InvalidValueError(
        'build_personalization_eval_computation: every tensor of the '
        "model's input_spec must have a batch dimension (rank 1 or more), "
        f'got {spec}.')
  return tf.TensorSpec(spec.shape[1:], spec.dtype)


def _check_arguments(who, model_fn, personalize_fn_dict,
                     baseline_evaluate_fn, max_num_clients):
  if not callable(model_fn):
    raise errors.InvalidTypeError(
        f'{who}: model_fn must be a no-argument function returning a '
        f'tff.learning.models.VariableModel, got {model_fn!r}.')
  if not isinstance(personalize_fn_dict, collections.OrderedDict):
    raise errors.InvalidTypeError(
        f'{who}: personalize_fn_dict must be an OrderedDict of strategy name '
        'to a no-argument function returning the strategy, got '
        f'{type(personalize_fn_dict).__name__}.')
  for name, make in personalize_fn_dict.items():
    if not isinstance(name, str) or not callable(make):
      raise errors.InvalidTypeError(
          f'{who}: personalize_fn_dict maps {name!r} to '
          f'{type(make).__name__}; it must map names (str) to no-argument '
          'functions returning a strategy.')
  if _BASELINE_KEY in personalize_fn_dict:
    raise errors.InvalidValueError(
        f'{who}: {_BASELINE_KEY!r} names the baseline metrics; it cannot '
        'name a strategy in personalize_fn_dict.')
  if not callable(baseline_evaluate_fn):
    raise errors.InvalidTypeError(
        f'{who}: baseline_evaluate_fn must be a function of the model and a '
        f'dataset, got {baseline_evaluate_fn!r}.')
  if isinstance(max_num_clients, bool) or not isinstance(
      max_num_clients, numbers.Integral) or max_num_clients <= 0:
    raise errors.InvalidValueError(
        f'{who}: max_num_clients must be a positive int, got '
        f'{max_num_clients!r}.')
