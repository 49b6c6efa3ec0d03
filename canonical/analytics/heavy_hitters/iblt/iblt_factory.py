"""TFF's `IbltFactory`: strings with integer values, aggregated across
clients as IBLTs and decoded at the server.

Each client encodes its dataset of `OrderedDict(key=string, value=int64
[d])` as an IBLT and a values tensor (`IbltTensorEncoder`); inner factories
sum each (`SumFactory` by default; a `SecureSumFactory` sums securely); the
server decodes the sums (`IbltTensorDecoder`, pure) into
`ServerOutput(output_strings, string_values, num_not_decoded)`.
"""

import collections
import collections.abc
from typing import NamedTuple, Optional

import tensorflow as tf

from canonical.aggregators import factory
from canonical.aggregators import sum_factory
from canonical.analytics import data_processing
from canonical.analytics.heavy_hitters.iblt import chunkers
from canonical.analytics.heavy_hitters.iblt import iblt_tensor
from canonical.core import computations
from canonical.core import intrinsics
from canonical.core import naming
from canonical.core import types as ft
from canonical import errors
from canonical.templates import aggregation_process
from canonical.templates import measured

# Plain TensorFlow (no Python control flow over tensors): not for AutoGraph.
_plain = tf.autograph.experimental.do_not_convert

_CharacterEncoding = chunkers.CharacterEncoding

DATASET_KEY = 'key'
DATASET_VALUE = 'value'


class ServerOutput(NamedTuple):
  """What an `IbltFactory` process gives: the decoded strings, each one's
  summed value, and how many strings could not be decoded."""
  output_strings: object
  string_values: object
  num_not_decoded: object


def _value_shape(value_type):
  """The shape of each string's value, once `value_type` is checked to be
  TFF's `SequenceType(OrderedDict(key=str, value=int64[d]))`."""
  element = getattr(value_type, 'element_spec', None)
  if isinstance(value_type, tf.data.DatasetSpec) and isinstance(
      element, collections.abc.Mapping) and set(element) == {
          DATASET_KEY, DATASET_VALUE}:
    key, value = element[DATASET_KEY], element[DATASET_VALUE]
    if (isinstance(key, tf.TensorSpec) and key.dtype == tf.string and
        key.shape.rank == 0 and isinstance(value, tf.TensorSpec) and
        value.dtype == tf.int64 and value.shape.rank == 1 and
        value.shape.is_fully_defined()):
      return tuple(value.shape.as_list())
  raise errors.InvalidTypeError(
      'IbltFactory.create: value_type must be a sequence of '
      'OrderedDict(key=str, value=int64[d]) (d known), got '
      f'{naming.describe_object(value_type)}.')


class IbltFactory(factory.UnweightedAggregationFactory):
  """TFF's `IbltFactory(*, capacity, string_max_bytes, encoding=UTF8,
  repetitions, seed=0, sketch_agg_factory=None,
  value_tensor_agg_factory=None)`. State `(sketch state, values state)`;
  measurements `OrderedDict(num_not_decoded, sketch, value_tensor)`."""

  def __init__(self, *, capacity: int, string_max_bytes: int,
               encoding: _CharacterEncoding = _CharacterEncoding.UTF8,
               repetitions: int, seed: int = 0,
               sketch_agg_factory: Optional[
                   factory.UnweightedAggregationFactory] = None,
               value_tensor_agg_factory: Optional[
                   factory.UnweightedAggregationFactory] = None) -> None:
    where = 'IbltFactory'
    for name, value, least in (('capacity', capacity, 1),
                               ('string_max_bytes', string_max_bytes, 1),
                               ('repetitions', repetitions, 3)):
      if value < least:
        raise errors.InvalidValueError(
            f'{where}: {name} must be at least {least}, got {value}.')
    kinds = (factory.UnweightedAggregationFactory,)
    self._sketch_agg_factory = factory.check_factory(
        sketch_agg_factory or sum_factory.SumFactory(), kinds, where,
        'sketch_agg_factory')
    self._value_tensor_agg_factory = factory.check_factory(
        value_tensor_agg_factory or sum_factory.SumFactory(), kinds, where,
        'value_tensor_agg_factory')
    self._capacity = capacity
    self._string_max_bytes = string_max_bytes
    self._encoding = encoding
    self._repetitions = repetitions
    self._seed = seed

  def _options(self):
    return dict(capacity=self._capacity,
                string_max_bytes=self._string_max_bytes,
                encoding=self._encoding, repetitions=self._repetitions,
                seed=self._seed)

  def create(self, value_type) -> aggregation_process.AggregationProcess:
    value_type = ft.to_member(value_type, 'IbltFactory.create')
    value_shape = _value_shape(value_type)
    string_max_bytes = self._string_max_bytes

    @computations.tf_computation(value_type)
    @_plain
    def encode_iblt(dataset):
      stacked = data_processing.to_stacked_tensor(dataset)
      strings, values = stacked[DATASET_KEY], stacked[DATASET_VALUE]
      too_long = tf.reduce_any(
          tf.strings.length(strings) > string_max_bytes)
      with tf.control_dependencies([tf.debugging.Assert(
          tf.logical_not(too_long),
          [f'IbltFactory: strings must be cut to {string_max_bytes} bytes '
           '(string_max_bytes) first', strings])]):
        strings = tf.identity(strings)
      encoder = iblt_tensor.IbltTensorEncoder(value_shape=value_shape,
                                              **self._options())
      return encoder.compute_iblt(strings, values)

    sketch_spec, values_spec = encode_iblt.result_spec

    @computations.tf_computation(sketch_spec, values_spec)
    @_plain
    def decode_iblt(sketch, value_tensor):
      decoder = iblt_tensor.IbltTensorDecoder(
          iblt=sketch, iblt_values=value_tensor, value_shape=value_shape,
          **self._options())
      strings, _, values, not_decoded = decoder.get_freq_estimates_tf()
      return strings, values, not_decoded

    sketch_process = self._sketch_agg_factory.create(sketch_spec)
    values_process = self._value_tensor_agg_factory.create(values_spec)

    @computations.federated_computation()
    def init_fn():
      return intrinsics.federated_zip((sketch_process.initialize(),
                                       values_process.initialize()))

    @computations.federated_computation(init_fn.type_signature.result,
                                        ft.clients(value_type))
    def next_fn(state, dataset):
      sketch_state, values_state = state
      sketch, values = intrinsics.federated_map(encode_iblt, dataset)
      sketch_output = sketch_process.next(sketch_state, sketch)
      values_output = values_process.next(values_state, values)
      strings, string_values, not_decoded = intrinsics.federated_map(
          decode_iblt, (sketch_output.result, values_output.result))
      result = intrinsics.federated_zip(ServerOutput(
          output_strings=strings, string_values=string_values,
          num_not_decoded=not_decoded))
      new_state = intrinsics.federated_zip((sketch_output.state,
                                            values_output.state))
      measurements = intrinsics.federated_zip(collections.OrderedDict(
          num_not_decoded=not_decoded, sketch=sketch_output.measurements,
          value_tensor=values_output.measurements))
      return measured.MeasuredProcessOutput(new_state, result, measurements)

    return aggregation_process.AggregationProcess(init_fn, next_fn)
