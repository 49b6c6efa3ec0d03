"""Running an aggregation factory's process for tests: from Python (the
reference executor) and, as one step of an `IterativeProcess` round,
compiled to a canonical form; both must agree."""

import numpy as np

import canonical as tff

from tensor_asserts import assert_same

F = tff.TensorType(np.float32)


def create(factory, value_type, weight_type=F):
  if isinstance(factory, tff.aggregators.WeightedAggregationFactory):
    return factory.create(value_type, weight_type)
  return factory.create(value_type)


def as_round(process, weight_type=F):
  """An IterativeProcess whose round is one step of `process`; clients hold
  (value, weight) or a value; the metrics are (result, measurements)."""
  value_type = process.value_type
  if process.is_weighted:

    @tff.federated_computation(process.state_type,
                               tff.type_at_clients((value_type, weight_type)))
    def next_fn(state, data):
      output = process.next(state, data[0], data[1])
      return output.state, (output.result, output.measurements)
  else:

    @tff.federated_computation(process.state_type,
                               tff.type_at_clients(value_type))
    def next_fn(state, data):  # pylint: disable=function-redefined
      output = process.next(state, data)
      return output.state, (output.result, output.measurements)

  return tff.IterativeProcess(process.initialize, next_fn)


def run_rounds(factory, rounds, values, weights, value_type, exact=False):
  """`rounds` outputs by the reference executor, each checked against the
  compiled form's round (bit for bit if `exact`)."""
  process = create(factory, value_type)
  args = (values, weights) if process.is_weighted else (values,)
  data = list(zip(values, weights)) if process.is_weighted else values
  form = tff.compile(as_round(process))
  state = process.initialize()
  form_state = form.initialize()
  assert_same(form_state, state, exact=exact, what='initial state')
  outputs = []
  for number in range(rounds):
    output = process.next(state, *args)
    form_state, (result, measurements) = tff.run_round(form, form_state,
                                                       data)
    assert_same((form_state, result, measurements), output, exact=exact,
                what=f'compiled round {number}')
    outputs.append(output)
    state = output.state
  return outputs
