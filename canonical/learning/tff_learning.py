"""`tff.learning`'s entry points over `canonical.learning.algorithms`, for
code written against TensorFlow Federated: `import canonical as tff` and its
`tff.learning.build_federated_averaging_process(...)`,
`tff.learning.from_keras_model(...)` and
`tff.learning.framework.build_encoded_*_process_from_model(...)` run as
written. The process's metrics take the older TFF's structure,
`OrderedDict(broadcast=(), aggregation=(), train=OrderedDict(<the model's
metrics>..., loss=...))`; `algorithms.build_federated_averaging_process`
keeps TFF 0.87's.
"""

import collections

from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import specs
from canonical.learning.algorithms import fedavg as averaging
from canonical.learning import model_fns
from canonical.templates import iterative_process as process_lib


def build_federated_averaging_process(model_fn, client_optimizer_fn,
                                      server_optimizer_fn=None,
                                      broadcast_process=None,
                                      aggregation_process=None):
  """TFF's builder: `algorithms.build_federated_averaging_process`
  (Keras optimizers translated) with TFF's metrics structure."""
  kwargs = {} if server_optimizer_fn is None else {
      'server_optimizer_fn': server_optimizer_fn}
  # Built once here: the inner builder takes the model itself.
  model = model_fns.functional_model_of(model_fn,
                                    'build_federated_averaging_process')
  inner = averaging.build_federated_averaging_process(
      model, client_optimizer_fn, broadcast_process=broadcast_process,
      aggregation_process=aggregation_process, **kwargs)
  names = [m.name for m in model.metrics] + ['loss']

  def tff_metrics(metrics):
    return collections.OrderedDict(
        broadcast=(), aggregation=(),
        train=collections.OrderedDict(
            (n, metrics['client_work']['train'][n]) for n in names))

  graph = inner.next.trace()
  restructure = specs.tf_computation(tff_metrics, graph.result[1].member)
  state_type = graph.parameters[0].type_signature
  data_type = graph.parameters[1].type_signature

  if inner.has_client_state:
    residual_type = graph.parameters[2].type_signature

    @computations.federated_computation(state_type, data_type, residual_type)
    def next_fn(state, data, residual):
      new_state, metrics, new_residual = inner.next(state, data, residual)
      return (new_state, intrinsics.federated_map(restructure, metrics),
              new_residual)

    return process_lib.IterativeProcess(
        inner.initialize, next_fn,
        client_state_initializer=inner.client_state_initializer,
        encoders=inner.encoders)

  @computations.federated_computation(state_type, data_type)
  def next_fn(state, data):  # pylint: disable=function-redefined
    new_state, metrics = inner.next(state, data)
    return new_state, intrinsics.federated_map(restructure, metrics)

  return process_lib.IterativeProcess(inner.initialize, next_fn,
                                      encoders=inner.encoders)
