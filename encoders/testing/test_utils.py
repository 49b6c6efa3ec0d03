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

The example stages (`PlusOneEncodingStage`, `AdaptiveNormalizeEncodingStage`,
..., and `dummy_rng_source`) live in `example_stages`, the free functions
(`get_tensor_with_random_shape`, `is_adaptive_stage`,
`aggregate_state_update_tensors`) in `stage_helpers`; both are re-exported
here, since tensor_encoding's tests name them through `test_utils`.
"""

import abc
import collections
import contextlib
import inspect

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from encoders.core import encoding_stage
# Re-exported: tensor_encoding's `test_utils` path names them.
# pylint: disable=unused-import
from encoders.testing.example_stages import AdaptiveNormalizeEncodingStage
from encoders.testing.example_stages import dummy_rng_source
from encoders.testing.example_stages import PlusOneEncodingStage
from encoders.testing.example_stages import PlusOneOverNEncodingStage
from encoders.testing.example_stages import PlusRandomNumEncodingStage
from encoders.testing.example_stages import RandomAddSubtractOneEncodingStage
from encoders.testing.example_stages import ReduceMeanEncodingStage
from encoders.testing.example_stages import SignIntFloatEncodingStage
from encoders.testing.example_stages import SimpleLinearEncodingStage
from encoders.testing.example_stages import StateUpdateTensorsEncodingStage
from encoders.testing.example_stages import TimesTwoEncodingStage
from encoders.testing.stage_helpers import aggregate_state_update_tensors
from encoders.testing.stage_helpers import get_tensor_with_random_shape
from encoders.testing.stage_helpers import is_adaptive_stage
# pylint: enable=unused-import

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
