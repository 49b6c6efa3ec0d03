"""Unit-test kit for encoding stages, with tensor_encoding's `test_utils` API.

A stage author writes one `BaseEncodingStageTest` subclass naming the stage,
an input and the assertions that input's results must meet; the base class
then runs the stage the ways the encoders run it:

* in one graph (`test_basic_encode_decode`), with static checks on the
  returned structures (`generic_asserts`);
* one-to-many, as a broadcast: params and encoding in one `tf.Graph`, decoding
  in another that only sees numpy values (`run_one_to_many_encode_decode`);
* many-to-one, as an aggregation: params in one graph, every input encoded in
  its own graph, all decoded back in the first, the state update aggregated
  in numpy, and, for stages that claim it, decoding a sum of encodings checked
  against the sum of decodings (`run_many_to_one_encode_decode`,
  `assert_commutes_with_sum`).

Keeping every party in its own graph is what catches a stage that hides
tensors on `self` during `encode` and reads them in `decode`: a tensor from
another graph cannot be used. It also means a stage given to the `run_*`
helpers must not hold tensors made outside them (build it from Python values).

The helpers work whether or not the test module turned eager execution off;
each party always builds a `tf.Graph` of its own and runs it in a session.

The module also holds small example stages (`PlusOneEncodingStage`,
`AdaptiveNormalizeEncodingStage`, ...) that exercise each part of the stage
interfaces, used by the tests of the encoders built from stages, and a few
free functions (`dummy_rng_source`, `get_tensor_with_random_shape`,
`is_adaptive_stage`, `aggregate_state_update_tensors`).
"""

import abc
import collections
import contextlib
import inspect

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from encoders.core import encoding_stage

# Tolerances of the lossless and commutes-with-sum comparisons.
DEFAULT_RTOL = 1e-05
DEFAULT_ATOL = 1e-05

_TEST_DATA_FIELDS = (
    'x',  # The input to `encode`.
    'encoded_x',  # Dict of what `encode` returned.
    'decoded_x',  # What `decode` returned; the shape of `x`.
    # Adaptive stages only; None for an `EncodingStageInterface`:
    'initial_state',  # The state the params came from.
    'state_update_tensors',  # The second value `encode` returned.
    'updated_state',  # `update_state` of the above.
)
TestData = collections.namedtuple('TestData', _TEST_DATA_FIELDS,
                                  defaults=(None,) * len(_TEST_DATA_FIELDS))
TestData.__doc__ = """One encode/decode round of a stage, as tensors or numpy.

Every field defaults to None, so `TestData(x, encoded_x, decoded_x)` describes
a round of a stage without state.
"""
# Its name starts with "Test"; this keeps pytest from collecting it.
TestData.__test__ = False


class _AbstractTestCaseMeta(abc.ABCMeta, parameterized.TestGeneratorMetaclass):
  """Lets a parameterized test case declare abstract methods.

  A class left abstract gets `__test__ = False` (unless it says otherwise), so
  pytest skips it instead of failing to instantiate it, even when a test module
  imports `BaseEncodingStageTest` by name.
  """

  def __new__(mcs, name, bases, namespace, **kwargs):
    cls = super().__new__(mcs, name, bases, namespace, **kwargs)
    if '__test__' not in namespace:
      cls.__test__ = not inspect.isabstract(cls)
    return cls


class BaseEncodingStageTest(tf.test.TestCase, parameterized.TestCase,
                            metaclass=_AbstractTestCaseMeta):
  """Base class of the tests of one encoding stage.

  Subclasses define `is_lossless`, `default_encoding_stage`, `default_input`
  and `common_asserts_for_test_data`; they inherit the `test_*` methods below,
  which every stage must pass, and the helpers to write their own tests with.
  Both `EncodingStageInterface` and `AdaptiveEncodingStageInterface` stages
  are accepted.
  """

  # What a subclass says about its stage.

  @property
  @abc.abstractmethod
  def is_lossless(self):
    """True when the default stage decodes its input back exactly.

    Then the tests also compare decoded values with the input (within
    `DEFAULT_RTOL` / `DEFAULT_ATOL`).
    """

  @abc.abstractmethod
  def default_encoding_stage(self):
    """Returns a new instance of the stage under test."""

  @abc.abstractmethod
  def default_input(self):
    """Returns a tensor of fully known static shape to encode."""

  @abc.abstractmethod
  def common_asserts_for_test_data(self, data):
    """Assertions on one round's `TestData`, whose fields hold numpy values.

    Called by several tests, so it must only assert, not build tensors.
    """

  # Checks every stage must pass.

  def test_default_encoding_stage(self):
    """`default_encoding_stage` returns a stage, a new one on every call."""
    stage = self.default_encoding_stage()
    self.assertIsInstance(
        stage, (encoding_stage.EncodingStageInterface,
                encoding_stage.AdaptiveEncodingStageInterface))
    self.assertIsNot(stage, self.default_encoding_stage())

  def test_encoding_stage_constructor_does_not_modify_graph(self):
    """Constructing the stage creates no TensorFlow ops.

    A stage may be built outside the graph it later runs in; ops made by its
    constructor would belong to the wrong graph.
    """
    graph = tf.Graph()
    with graph.as_default():
      self.default_encoding_stage()
    self.assertEmpty(graph.get_operations(),
                     'the stage constructor created TensorFlow ops')

  def test_encoding_stage_name(self):
    """The stage's `name` is a string (it names scopes and encoder paths)."""
    self.assertIsInstance(self.default_encoding_stage().name, str)

  def test_default_input_is_tensor_with_fully_defined_shape(self):
    """`default_input` keeps its contract: a tensor of static shape."""
    x = self.default_input()
    self.assertIsInstance(x, tf.Tensor)
    self.assertTrue(x.shape.is_fully_defined(),
                    f'default_input has shape {x.shape}, not fully defined')

  def test_basic_encode_decode(self):
    """Encodes and decodes in the current graph (or eagerly), then asserts."""
    x = self.default_input()
    stage = self.default_encoding_stage()
    if is_adaptive_stage(stage):
      state = stage.initial_state()
      encode_params, decode_params = stage.get_params(state)
      encoded_x, decoded_x, state_update_tensors = self.encode_decode_x(
          stage, x, encode_params, decode_params)
      updated_state = stage.update_state(state, state_update_tensors)
      data = TestData(x, encoded_x, decoded_x, state, state_update_tensors,
                      updated_state)
    else:
      encode_params, decode_params = stage.get_params()
      encoded_x, decoded_x = self.encode_decode_x(stage, x, encode_params,
                                                  decode_params)
      data = TestData(x, encoded_x, decoded_x)
    self.generic_asserts(data, stage)
    data = self.evaluate_test_data(data)
    if self.is_lossless:
      self._assert_decodes_to_input(data.x, data.decoded_x)
    self.common_asserts_for_test_data(data)

  def test_one_to_many_encode_decode(self):
    """Encoding and decoding meet only through numpy values (a broadcast)."""
    data = self.run_one_to_many_encode_decode(self.default_encoding_stage(),
                                              self.default_input)
    if self.is_lossless:
      self._assert_decodes_to_input(data.x, data.decoded_x)
    self.common_asserts_for_test_data(data)

  def test_many_to_one_encode_decode(self):
    """Several inputs encoded apart and decoded together (an aggregation)."""
    stage = self.default_encoding_stage()
    input_values = self.evaluate([self.default_input() for _ in range(3)])
    server_test_data, decode_params = self.run_many_to_one_encode_decode(
        stage, input_values)
    if self.is_lossless:
      self._assert_decodes_to_input(
          np.sum([d.x for d in server_test_data], axis=0),
          np.sum([d.decoded_x for d in server_test_data], axis=0))
    if stage.commutes_with_sum:
      self.assert_commutes_with_sum(
          server_test_data, stage, decode_params,
          _decode_shape(stage, input_values[0]))
    self.asserts_for_test_many_to_one_encode_decode(server_test_data)

  # Helpers for writing more tests.

  def encode_decode_x(self, stage, x, encode_params, decode_params):
    """Encodes `x` and decodes the result, both in the current context.

    Returns:
      `(encoded_x, decoded_x)`, or for an adaptive stage
      `(encoded_x, decoded_x, state_update_tensors)`; tensors, not evaluated.
    """
    adaptive = is_adaptive_stage(stage)
    if adaptive:
      encoded_x, state_update_tensors = stage.encode(x, encode_params)
    else:
      encoded_x = stage.encode(x, encode_params)
    decoded_x = stage.decode(encoded_x, decode_params,
                             shape=_decode_shape(stage, x))
    if adaptive:
      return encoded_x, decoded_x, state_update_tensors
    return encoded_x, decoded_x

  def run_one_to_many_encode_decode(self, stage, input_fn, state=None):
    """One round of a broadcast: encode in one graph, decode in another.

    The sender's graph calls `input_fn`, makes the params (from `state`, else
    the initial state, for an adaptive stage), encodes and updates the state;
    all of it is evaluated in one run. The receiver's graph decodes those
    numpy values and nothing else.

    Args:
      stage: the stage to run.
      input_fn: no-argument callable returning the input (a tensor or numpy
        value). A callable, so the input can be a tensor of unknown shape
        made in the sender's graph.
      state: adaptive stages only: the state to start from (numpy values, or
        tensors of the current context, which are evaluated first).

    Returns:
      A `TestData` of numpy values. The state fields are set for an adaptive
      stage; `state_update_tensors` as one encoder produced them (no
      aggregation, as a broadcast's state update sees a single encoder).
    """
    adaptive = is_adaptive_stage(stage)
    state = self._state_argument(adaptive, state)
    with self._party_session() as sender:
      x = _detach_eager(input_fn())
      shape = _decode_shape(stage, x)
      if adaptive:
        if state is None:
          state = stage.initial_state()
        encode_params, decode_params = stage.get_params(state)
        encoded_x, state_update_tensors = stage.encode(x, encode_params)
        updated_state = stage.update_state(state, state_update_tensors)
      else:
        encode_params, decode_params = stage.get_params()
        encoded_x = stage.encode(x, encode_params)
        state_update_tensors = updated_state = None
      (x, encoded_x, decode_params, shape, state, state_update_tensors,
       updated_state) = self.evaluate_tf_py_list(
           [x, encoded_x, decode_params, shape, state, state_update_tensors,
            updated_state], sender)

    with self._party_session() as receiver:
      decoded_x = self.maybe_evaluate(
          stage.decode(encoded_x, decode_params, shape=shape), receiver)
    return TestData(x, encoded_x, decoded_x, state, state_update_tensors,
                    updated_state)

  def run_many_to_one_encode_decode(self, stage, input_values, state=None):
    """One round of an aggregation: many encoders, one decoder.

    The server's graph makes the params; each input is encoded in a graph of
    its own from the numpy params; the server decodes every encoding
    separately. For an adaptive stage the state updates of all encoders are
    aggregated by `aggregate_state_update_tensors` and the server computes the
    next state from them.

    Args:
      stage: the stage to run.
      input_values: the inputs, numpy values (or tensors of the current
        context) of one shape.
      state: adaptive stages only: the state to start from, as in
        `run_one_to_many_encode_decode`.

    Returns:
      `(server_test_data, decode_params)`: a list with one `TestData` of numpy
      values per input (each with the same `initial_state` and
      `updated_state`), and the numpy decode params, for decoding more (as
      `assert_commutes_with_sum` does).
    """
    adaptive = is_adaptive_stage(stage)
    state = self._state_argument(adaptive, state)
    input_values = [_detach_eager(x) for x in self.maybe_evaluate(
        list(input_values))]
    if not input_values:
      raise ValueError('run_many_to_one_encode_decode needs at least one '
                       'input value.')
    shape = _decode_shape(stage, input_values[0])

    with self._party_session() as server:
      if adaptive:
        if state is None:
          state = stage.initial_state()
        encode_params, decode_params = stage.get_params(state)
      else:
        encode_params, decode_params = stage.get_params()
      encode_params, decode_params, state = self.evaluate_tf_py_list(
          [encode_params, decode_params, state], server)

    rounds = []
    for x in input_values:
      with self._party_session() as client:
        if adaptive:
          encoded_x, state_update_tensors = stage.encode(x, encode_params)
        else:
          encoded_x, state_update_tensors = stage.encode(x, encode_params), None
        encoded_x, state_update_tensors = self.evaluate_tf_py_list(
            [encoded_x, state_update_tensors], client)
      rounds.append(TestData(x, encoded_x, initial_state=state,
                             state_update_tensors=state_update_tensors))

    with self._party_session() as server:
      decoded = [stage.decode(d.encoded_x, decode_params, shape=shape)
                 for d in rounds]
      updated_state = None
      if adaptive:
        aggregated = aggregate_state_update_tensors(
            stage, [d.state_update_tensors for d in rounds])
        updated_state = stage.update_state(state, aggregated)
      decoded, updated_state = self.evaluate_tf_py_list(
          [decoded, updated_state], server)
    server_test_data = [
        d._replace(decoded_x=decoded_x, updated_state=updated_state)
        for d, decoded_x in zip(rounds, decoded)]
    return server_test_data, decode_params

  def evaluate_tf_py_list(self, fetches, session=None):
    """Evaluates the tensors in a list of mixed values, in a single run.

    Entries may be tensors, Python or numpy values, or structures (dicts,
    tuples, lists) mixing both; only the tensors are evaluated, together, so
    random values drawn once are consistent across the entries. Python values
    are returned as they are.

    Args:
      fetches: a list.
      session: the session to run in; by default the test's (or eagerly).

    Returns:
      A list like `fetches` with every tensor replaced by its numpy value.
    """
    if not isinstance(fetches, list):
      raise TypeError('evaluate_tf_py_list takes a list, got '
                      f'{type(fetches).__name__}.')
    return self.maybe_evaluate(fetches, session)

  def evaluate_test_data(self, test_data, session=None):
    """A copy of `test_data` with every tensor in it evaluated (in one run)."""
    if not isinstance(test_data, TestData):
      raise TypeError('evaluate_test_data takes a TestData, got '
                      f'{type(test_data).__name__}.')
    return self.maybe_evaluate(test_data, session)

  def maybe_evaluate(self, fetches, session=None):
    """Evaluates the tensors in a nested structure, if it holds any.

    Args:
      fetches: any `tf.nest` structure; its leaves may be tensors or not.
      session: the session to run in; by default the test's (or eagerly).

    Returns:
      The same structure with every tensor replaced by its numpy value, all
      evaluated in one run; other leaves unchanged.
    """
    leaves = tf.nest.flatten(fetches)
    positions = [i for i, leaf in enumerate(leaves) if tf.is_tensor(leaf)]
    if not positions:
      return fetches
    tensors = [leaves[i] for i in positions]
    if session:
      _check_in_graph(tensors, session.graph)
      values = session.run(tensors)
    else:
      values = self.evaluate(tensors)
    for i, value in zip(positions, values):
      leaves[i] = value
    return tf.nest.pack_sequence_as(fetches, leaves)

  def generic_asserts(self, test_data, stage):
    """Static checks of one round's tensors that hold for every stage.

    Args:
      test_data: a `TestData` of tensors, as built from `encode_decode_x`.
      stage: the stage that made them.
    """
    for key in stage.compressible_tensors_keys:
      self.assertIn(key, test_data.encoded_x,
                    f'compressible key {key!r} is not among the encoded keys')
    for key, tensor in test_data.encoded_x.items():
      self.assertIsInstance(tensor, tf.Tensor,
                            f'encoded value {key!r} is not a tensor')
    # A static input shape must give a static decoded shape; an unknown one,
    # an equally unknown one.
    self.assertEqual(test_data.x.shape, test_data.decoded_x.shape)
    self.assertEqual(test_data.x.dtype, test_data.decoded_x.dtype)

    if not tf.executing_eagerly():
      # Ops sit in their method's name scope; a stage passing a tensor
      # through untouched (one key holding the very input or output) is exempt.
      encoded = list(test_data.encoded_x.values())
      passes_input_through = (len(encoded) == 1 and
                              encoded[0] is test_data.x)
      passes_output_through = (len(encoded) == 1 and
                               encoded[0] is test_data.decoded_x)
      if not passes_input_through:
        for tensor in encoded:
          self.assertIn(encoding_stage.ENCODE_SCOPE_SUFFIX, tensor.name)
      if not passes_output_through:
        self.assertIn(encoding_stage.DECODE_SCOPE_SUFFIX,
                      test_data.decoded_x.name)

    if not is_adaptive_stage(stage):
      return
    modes = stage.state_update_aggregation_modes
    self.assertSameElements(modes.keys(), test_data.state_update_tensors.keys())
    for mode in modes.values():
      self.assertIsInstance(mode, encoding_stage.StateAggregationMode)
    state_parts = (
        ('initial_state', encoding_stage.INITIAL_STATE_SCOPE_SUFFIX),
        ('state_update_tensors', encoding_stage.ENCODE_SCOPE_SUFFIX),
        ('updated_state', encoding_stage.UPDATE_STATE_SCOPE_SUFFIX),
    )
    for field, scope_suffix in state_parts:
      for key, tensor in getattr(test_data, field).items():
        self.assertTrue(tf.is_tensor(tensor),
                        f'{field}[{key!r}] is not a tensor')
        if not tf.executing_eagerly():
          self.assertIn(scope_suffix, tensor.name)

  def asserts_for_test_many_to_one_encode_decode(self, data):
    """Assertions of `test_many_to_one_encode_decode` on its `TestData` list.

    Applies `common_asserts_for_test_data` to each; override to check more
    (or less).
    """
    for d in data:
      self.common_asserts_for_test_data(d)

  def assert_commutes_with_sum(self, server_test_data, stage, decode_params,
                               shape=None):
    """Decoding the sum of encodings equals summing the decodings.

    The encodings are summed in numpy, keeping each value's dtype (as a sum in
    TensorFlow would), and decoded in a fresh graph with `num_summands`.

    Args:
      server_test_data: `TestData` list of numpy values, from
        `run_many_to_one_encode_decode`.
      stage: the stage that made them; it must claim `commutes_with_sum`.
      decode_params: the numpy decode params they were made with.
      shape: the input shape to decode with, if the stage needs it.
    """
    if not stage.commutes_with_sum:
      raise ValueError(f'Stage {stage.name!r} does not claim to commute with '
                       'sum; assert_commutes_with_sum does not apply.')
    sum_of_decoded = np.sum([d.decoded_x for d in server_test_data], axis=0)
    summed_encoded = {
        key: _sum_keeping_dtype([d.encoded_x[key] for d in server_test_data])
        for key in server_test_data[0].encoded_x
    }
    with self._party_session() as aggregator:
      decoded_sum = self.maybe_evaluate(
          stage.decode(summed_encoded, decode_params,
                       num_summands=len(server_test_data), shape=shape),
          aggregator)
    self.assertAllClose(sum_of_decoded, decoded_sum, rtol=DEFAULT_RTOL,
                        atol=DEFAULT_ATOL)

  # Internals.

  @contextlib.contextmanager
  def _party_session(self):
    """A fresh `tf.Graph` as default and a session on it: one party."""
    graph = tf.Graph()
    with graph.as_default(), self.session(graph=graph) as session:
      yield session

  def _state_argument(self, adaptive, state):
    """Checks a `state` argument; evaluates any tensors in it."""
    if state is None:
      return None
    if not adaptive:
      raise ValueError('A state can only be given for an '
                       'AdaptiveEncodingStageInterface.')
    return self.maybe_evaluate(state)

  def _assert_decodes_to_input(self, x, decoded_x):
    self.assertAllClose(x, decoded_x, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL,
                        msg='a lossless stage did not decode to its input')


def _decode_shape(stage, x):
  """The `shape` argument of `stage.decode` for input `x`.

  None when the stage does not ask for it (so one that reads it anyway
  fails); a list of ints when the shape is static, else `tf.shape(x)`.
  """
  if not stage.decode_needs_input_shape:
    return None
  if isinstance(x, np.ndarray) or np.isscalar(x):
    return list(np.shape(x))
  if x.shape.is_fully_defined():
    return x.shape.as_list()
  return tf.shape(x)


def _check_in_graph(tensors, graph):
  """Names the first tensor of another graph (TF's own error is obscure).

  In the `run_*` helpers that means a stage handed a tensor from one party to
  another outside its encoded values and params, e.g. kept on `self`.
  """
  for tensor in tensors:
    tensor_graph = getattr(tensor, 'graph', None) if tf.is_symbolic_tensor(
        tensor) else None
    if tensor_graph is not None and tensor_graph is not graph:
      raise ValueError(
          f'{tensor.name} was built in another tf.Graph than the one being '
          'run: a stage passed a tensor between encoding and decoding (or '
          'between parties) outside its encoded tensors and params, for '
          'example by keeping it on `self`.')


def _detach_eager(value):
  """An eager tensor's numpy value, which any graph can use; else `value`."""
  if isinstance(value, tf.Tensor) and not tf.is_symbolic_tensor(value):
    return value.numpy()
  return value


def _sum_keeping_dtype(values):
  stacked = np.stack(values)
  return np.sum(stacked, axis=0, dtype=stacked.dtype)


# ---------------------------------------------------------------------------
# Example stages. Each shows one feature of the stage interfaces; the encoders'
# own tests build encoder trees from them.


@encoding_stage.tf_style_encoding_stage
class PlusOneEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: adds one. The smallest stage: no state, no shape, no sum."""

  ENCODED_VALUES_KEY = 'plus_one_values'
  ADD_PARAM_KEY = 'plus_one_addend'

  @property
  def name(self):
    return 'plus_one'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    params = {self.ADD_PARAM_KEY: tf.constant(1.0)}
    return params, params

  def encode(self, x, encode_params):
    return {self.ENCODED_VALUES_KEY: x + encode_params[self.ADD_PARAM_KEY]}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # Not needed to undo an addition.
    return (encoded_tensors[self.ENCODED_VALUES_KEY] -
            decode_params[self.ADD_PARAM_KEY])


@encoding_stage.tf_style_encoding_stage
class TimesTwoEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: doubles. Linear, so it commutes with sum."""

  ENCODED_VALUES_KEY = 'times_two_values'
  FACTOR_PARAM_KEY = 'times_two_factor'

  @property
  def name(self):
    return 'times_two'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    params = {self.FACTOR_PARAM_KEY: tf.constant(2.0)}
    return params, params

  def encode(self, x, encode_params):
    return {self.ENCODED_VALUES_KEY: x * encode_params[self.FACTOR_PARAM_KEY]}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # Scaling back is the same for a sum.
    return (encoded_tensors[self.ENCODED_VALUES_KEY] /
            decode_params[self.FACTOR_PARAM_KEY])


@encoding_stage.tf_style_encoding_stage
class SimpleLinearEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: `a * x + b`, with `a` and `b` from the constructor.

  `a` and `b` may be Python numbers or `tf.Variable`s; they reach `encode` and
  `decode` through the params. Undoing a sum of `n` encodings subtracts
  `n * b`, so this stage needs `num_summands`.
  """

  ENCODED_VALUES_KEY = 'linear_values'
  A_PARAM_KEY = 'linear_a'
  B_PARAM_KEY = 'linear_b'

  def __init__(self, a, b):
    self._a = a
    self._b = b

  @property
  def name(self):
    return 'simple_linear'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    params = {self.A_PARAM_KEY: self._a, self.B_PARAM_KEY: self._b}
    return params, params

  def encode(self, x, encode_params):
    a = encode_params[self.A_PARAM_KEY]
    b = encode_params[self.B_PARAM_KEY]
    return {self.ENCODED_VALUES_KEY: a * x + b}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del shape  # Element-wise.
    a = decode_params[self.A_PARAM_KEY]
    b = decode_params[self.B_PARAM_KEY]
    if num_summands is not None:
      b = b * tf.cast(num_summands, b.dtype)
    return (encoded_tensors[self.ENCODED_VALUES_KEY] - b) / a


@encoding_stage.tf_style_encoding_stage
class ReduceMeanEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: keeps only the mean, so decoding needs the input's shape.

  The shape is not part of the encoding: the encoder around the stage keeps it
  and passes it to `decode`.
  """

  ENCODED_VALUES_KEY = 'mean_values'

  @property
  def name(self):
    return 'reduce_mean'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return True

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    # One element per input dimension, so decoding is a broadcast.
    return {self.ENCODED_VALUES_KEY: tf.reduce_mean(x, keepdims=True)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands  # A sum of means spreads like a mean.
    return tf.broadcast_to(encoded_tensors[self.ENCODED_VALUES_KEY], shape)


@encoding_stage.tf_style_encoding_stage
class RandomAddSubtractOneEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: adds +1 or -1, each with probability 1/2, to every element.

  Lossy but unbiased: the average of many decodings approaches the input.
  Draws with a stateful random op, so every evaluation differs.
  """

  ENCODED_VALUES_KEY = 'random_pm_one_values'

  @property
  def name(self):
    return 'random_add_subtract_one'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    heads = tf.random.uniform(tf.shape(x)) < 0.5
    step = tf.where(heads, tf.ones_like(x), -tf.ones_like(x))
    return {self.ENCODED_VALUES_KEY: x + step}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # The noise stays in.
    return encoded_tensors[self.ENCODED_VALUES_KEY]


@encoding_stage.tf_style_encoding_stage
class SignIntFloatEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: splits every value into three tensors, losslessly.

  The sign, the integer part of the magnitude and its fractional part.
  """

  ENCODED_SIGNS_KEY = 'split_signs'
  ENCODED_INTS_KEY = 'split_ints'
  ENCODED_FLOATS_KEY = 'split_fractions'

  @property
  def name(self):
    return 'sign_int_float'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_SIGNS_KEY, self.ENCODED_INTS_KEY,
            self.ENCODED_FLOATS_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    magnitude = tf.abs(x)
    whole = tf.floor(magnitude)
    return {
        self.ENCODED_SIGNS_KEY: tf.sign(x),
        self.ENCODED_INTS_KEY: whole,
        self.ENCODED_FLOATS_KEY: magnitude - whole,
    }

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # All is in the three parts.
    magnitude = (encoded_tensors[self.ENCODED_INTS_KEY] +
                 encoded_tensors[self.ENCODED_FLOATS_KEY])
    return encoded_tensors[self.ENCODED_SIGNS_KEY] * magnitude


# A Lehmer (MINSTD) generator: s_{i+1} = 48271 * s_i mod (2**31 - 1).
_LEHMER_MODULUS = 2**31 - 1
_LEHMER_MULTIPLIER = 48271
# Outputs are whole numbers 1.._DUMMY_RNG_RANGE: small enough that float32
# keeps the fractional part of `x + value` for x of order one.
_DUMMY_RNG_RANGE = 128


def dummy_rng_source(seed, num_elements):
  """Deterministic pseudo-random whole numbers from a seed tensor; tests only.

  Stands in for a seeded random source shared by `encode` and `decode`: equal
  seeds give equal values, different seeds different ones. Statistically it is
  poor (values are whole numbers in [1, 128]); do not use it for real
  randomness.

  Args:
    seed: an integer scalar tensor (or Python int).
    num_elements: Python int, how many values to return.

  Returns:
    A float32 tensor of shape `(num_elements,)`.
  """
  if not isinstance(num_elements, (int, np.integer)) or num_elements < 0:
    raise ValueError('dummy_rng_source needs a static, non-negative number of '
                     f'elements, got {num_elements!r}.')
  # Step i of the generator is start * multiplier**(i + 1) (mod modulus): the
  # powers are computed here, so the graph has a fixed size for any length.
  powers = np.empty(num_elements, np.int64)
  power = 1
  for i in range(num_elements):
    power = power * _LEHMER_MULTIPLIER % _LEHMER_MODULUS
    powers[i] = power
  seed = tf.cast(seed, tf.int64)
  # A nonzero start: zero is the generator's fixed point.
  start = tf.math.floormod(seed, _LEHMER_MODULUS - 1) + 1
  states = tf.math.floormod(start * tf.constant(powers), _LEHMER_MODULUS)
  return tf.cast(tf.math.floormod(states, _DUMMY_RNG_RANGE) + 1, tf.float32)


@encoding_stage.tf_style_encoding_stage
class PlusRandomNumEncodingStage(encoding_stage.EncodingStageInterface):
  """Example: adds seeded pseudo-random whole numbers, undone by the seed.

  `get_params` draws one seed and gives it to both `encode` and `decode`, so
  decoding regenerates exactly the numbers encoding added. Needs a static input
  shape.
  """

  ENCODED_VALUES_KEY = 'plus_random_values'
  SEED_PARAM_KEY = 'plus_random_seed'

  @property
  def name(self):
    return 'plus_random_num'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  def get_params(self):
    seed = tf.random.uniform((), maxval=tf.int32.max, dtype=tf.int32)
    params = {self.SEED_PARAM_KEY: seed}
    return params, params

  def encode(self, x, encode_params):
    noise = self._noise(encode_params[self.SEED_PARAM_KEY], x)
    return {self.ENCODED_VALUES_KEY: x + noise}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del num_summands, shape  # The encoding has the input's shape.
    encoded = encoded_tensors[self.ENCODED_VALUES_KEY]
    return encoded - self._noise(decode_params[self.SEED_PARAM_KEY], encoded)

  def _noise(self, seed, like):
    values = dummy_rng_source(seed, like.shape.num_elements())
    return tf.reshape(tf.cast(values, like.dtype), like.shape)


@encoding_stage.tf_style_adaptive_encoding_stage
class PlusOneOverNEncodingStage(encoding_stage.AdaptiveEncodingStageInterface):
  """Example adaptive stage: in round N (counted by its state) adds 1/N.

  Its state only counts rounds, so it sends no state update tensors. It reuses
  `PlusOneEncodingStage` unchanged, giving it the addend through the params.
  """

  ENCODED_VALUES_KEY = PlusOneEncodingStage.ENCODED_VALUES_KEY
  ADD_PARAM_KEY = PlusOneEncodingStage.ADD_PARAM_KEY
  ITERATION_STATE_KEY = 'plus_one_over_n_round'

  def __init__(self):
    self._plus = PlusOneEncodingStage()

  @property
  def name(self):
    return 'plus_one_over_n'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return False

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def state_update_aggregation_modes(self):
    return {}

  def initial_state(self):
    return {self.ITERATION_STATE_KEY: tf.constant(1, tf.int32)}

  def update_state(self, state, state_update_tensors):
    del state_update_tensors  # The round count needs nothing from encoders.
    return {self.ITERATION_STATE_KEY: state[self.ITERATION_STATE_KEY] + 1}

  def get_params(self, state):
    rounds = tf.cast(state[self.ITERATION_STATE_KEY], tf.float32)
    params = {self.ADD_PARAM_KEY: 1.0 / rounds}
    return params, params

  def encode(self, x, encode_params):
    return self._plus.encode(x, encode_params), {}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return self._plus.decode(encoded_tensors, decode_params,
                             num_summands=num_summands, shape=shape)


@encoding_stage.tf_style_adaptive_encoding_stage
class AdaptiveNormalizeEncodingStage(
    encoding_stage.AdaptiveEncodingStageInterface):
  """Example adaptive stage: learns a factor that scales inputs to unit norm.

  Each encoder reports its input's L2 norm (aggregated by STACK, so the
  server sees every one); the state keeps a running estimate of 1 / norm,
  which moves toward the reported norms' mean by a weight that grows with the
  number of reports. It reuses `TimesTwoEncodingStage` with that factor.
  """

  ENCODED_VALUES_KEY = TimesTwoEncodingStage.ENCODED_VALUES_KEY
  FACTOR_PARAM_KEY = TimesTwoEncodingStage.FACTOR_PARAM_KEY
  FACTOR_STATE_KEY = 'normalize_factor'
  NORM_STATE_UPDATE_KEY = 'normalize_input_norm'
  # How much of the old estimate one report leaves.
  _DECAY_PER_REPORT = 0.9

  def __init__(self):
    self._scale = TimesTwoEncodingStage()

  @property
  def name(self):
    return 'adaptive_normalize'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def state_update_aggregation_modes(self):
    return {
        self.NORM_STATE_UPDATE_KEY: encoding_stage.StateAggregationMode.STACK
    }

  def initial_state(self):
    return {self.FACTOR_STATE_KEY: tf.constant(1.0)}

  def update_state(self, state, state_update_tensors):
    """Moves the factor toward 1 / (mean reported norm).

    Works on one encoder's scalar report (a broadcast) as on a stack of many
    (an aggregation); more reports move the estimate further.
    """
    norms = state_update_tensors[self.NORM_STATE_UPDATE_KEY]
    num_reports = norms.shape.num_elements()
    keep = self._DECAY_PER_REPORT**num_reports
    factor = (keep * state[self.FACTOR_STATE_KEY] +
              (1.0 - keep) / tf.reduce_mean(norms))
    return {self.FACTOR_STATE_KEY: factor}

  def get_params(self, state):
    # The state tensor itself: no new ops.
    params = {self.FACTOR_PARAM_KEY: state[self.FACTOR_STATE_KEY]}
    return params, params

  def encode(self, x, encode_params):
    encoded = self._scale.encode(x, encode_params)
    return encoded, {self.NORM_STATE_UPDATE_KEY: tf.norm(x)}

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    return self._scale.decode(encoded_tensors, decode_params,
                              num_summands=num_summands, shape=shape)


@encoding_stage.tf_style_adaptive_encoding_stage
class StateUpdateTensorsEncodingStage(
    encoding_stage.AdaptiveEncodingStageInterface):
  """Example adaptive stage sending one state update per aggregation mode.

  Encoding is the identity; every mode receives the input itself, and the
  next state records the sum, minimum and maximum of the aggregated values and
  how many elements the stacked ones hold.
  """

  ENCODED_VALUES_KEY = 'all_modes_values'
  SUM_STATE_UPDATE_KEY = 'all_modes_update_sum'
  MIN_STATE_UPDATE_KEY = 'all_modes_update_min'
  MAX_STATE_UPDATE_KEY = 'all_modes_update_max'
  STACK_STATE_UPDATE_KEY = 'all_modes_update_stack'
  LAST_SUM_STATE_KEY = 'all_modes_last_sum'
  LAST_MIN_STATE_KEY = 'all_modes_last_min'
  LAST_MAX_STATE_KEY = 'all_modes_last_max'
  LAST_COUNT_STATE_KEY = 'all_modes_last_count'

  @property
  def name(self):
    return 'state_update_tensors'

  @property
  def compressible_tensors_keys(self):
    return [self.ENCODED_VALUES_KEY]

  @property
  def commutes_with_sum(self):
    return True

  @property
  def decode_needs_input_shape(self):
    return False

  @property
  def state_update_aggregation_modes(self):
    modes = encoding_stage.StateAggregationMode
    return {
        self.SUM_STATE_UPDATE_KEY: modes.SUM,
        self.MIN_STATE_UPDATE_KEY: modes.MIN,
        self.MAX_STATE_UPDATE_KEY: modes.MAX,
        self.STACK_STATE_UPDATE_KEY: modes.STACK,
    }

  def initial_state(self):
    return {
        self.LAST_SUM_STATE_KEY: tf.constant(0.0),
        self.LAST_MIN_STATE_KEY: tf.constant(0.0),
        self.LAST_MAX_STATE_KEY: tf.constant(0.0),
        self.LAST_COUNT_STATE_KEY: tf.constant(0, tf.int32),
    }

  def update_state(self, state, state_update_tensors):
    del state  # The next state depends on the updates only.
    updates = state_update_tensors
    return {
        self.LAST_SUM_STATE_KEY:
            tf.reduce_sum(updates[self.SUM_STATE_UPDATE_KEY]),
        self.LAST_MIN_STATE_KEY:
            tf.reduce_min(updates[self.MIN_STATE_UPDATE_KEY]),
        self.LAST_MAX_STATE_KEY:
            tf.reduce_max(updates[self.MAX_STATE_UPDATE_KEY]),
        self.LAST_COUNT_STATE_KEY:
            tf.size(updates[self.STACK_STATE_UPDATE_KEY], out_type=tf.int32),
    }

  def get_params(self, state):
    del state  # No params.
    return {}, {}

  def encode(self, x, encode_params):
    del encode_params  # No params.
    # A copy made inside `encode`, so its name carries the encode scope.
    x = tf.identity(x)
    updates = {key: x for key in self.state_update_aggregation_modes}
    return {self.ENCODED_VALUES_KEY: x}, updates

  def decode(self, encoded_tensors, decode_params, num_summands=None,
             shape=None):
    del decode_params, num_summands, shape  # The identity.
    return tf.identity(encoded_tensors[self.ENCODED_VALUES_KEY])


# ---------------------------------------------------------------------------
# Free functions.


def get_tensor_with_random_shape(expected_num_elements=10,
                                 source_fn=tf.random.uniform):
  """A 1-D tensor whose length is unknown statically and random when run.

  Draws `2 * expected_num_elements` values with `source_fn(shape)` and keeps
  each with probability 1/2. In graph mode the static shape is `[None]`;
  eagerly the tensor is concrete (its length still random).
  """
  size = 2 * expected_num_elements
  values = source_fn([size])
  keep = tf.random.uniform([size]) < 0.5
  return tf.boolean_mask(values, keep)


def is_adaptive_stage(stage):
  """Whether `stage` is adaptive (True) or a plain stage (False).

  Raises:
    TypeError: `stage` is neither kind of encoding stage.
  """
  if isinstance(stage, encoding_stage.AdaptiveEncodingStageInterface):
    return True
  if isinstance(stage, encoding_stage.EncodingStageInterface):
    return False
  raise TypeError('Expected an EncodingStageInterface or an '
                  'AdaptiveEncodingStageInterface, got '
                  f'{type(stage).__name__}.')


_NUMPY_AGGREGATIONS = {
    encoding_stage.StateAggregationMode.SUM:
        lambda stacked: np.sum(stacked, axis=0, dtype=stacked.dtype),
    encoding_stage.StateAggregationMode.MIN:
        lambda stacked: np.min(stacked, axis=0),
    encoding_stage.StateAggregationMode.MAX:
        lambda stacked: np.max(stacked, axis=0),
    encoding_stage.StateAggregationMode.STACK:
        lambda stacked: stacked,
}


def aggregate_state_update_tensors(stage, state_update_tensors):
  """Aggregates many encoders' state updates in numpy, as the stage asks.

  The reference meaning of `state_update_aggregation_modes`: SUM, MIN and MAX
  reduce across encoders element-wise (SUM keeps the dtype), STACK stacks the
  values along a new leading axis.

  Args:
    stage: an `AdaptiveEncodingStageInterface`.
    state_update_tensors: list with one dict of numpy values per encoder, as
      its `encode` returned them.

  Returns:
    A dict: state update key -> aggregated numpy value.

  Raises:
    TypeError: `stage` is not adaptive.
    ValueError: `state_update_tensors` is empty.
  """
  if not is_adaptive_stage(stage):
    raise TypeError('aggregate_state_update_tensors needs an '
                    'AdaptiveEncodingStageInterface, got '
                    f'{type(stage).__name__}.')
  modes = stage.state_update_aggregation_modes
  if modes and not state_update_tensors:
    raise ValueError('No state update tensors to aggregate.')
  return {
      key: _NUMPY_AGGREGATIONS[mode](
          np.stack([np.asarray(updates[key]) for updates in
                    state_update_tensors]))
      for key, mode in modes.items()
  }
