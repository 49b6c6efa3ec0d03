"""`tff.types` against TensorFlow Federated 0.87's answers.

The table of types and pairs is `scripts/record_tff_types.py`'s, written in
TFF's spelling; `tests/data/tff_087_types.json` holds what a real TFF 0.87
answered for it (texts, reprs, serialized bytes, and for each pair whether
the target is assignable from, equivalent to and identical to the source).
The other tests port TFF 0.87 uses of types: `isinstance` on what
`type_signature` gives, a type's parts, TFF's functions over types; and
check that a type is still the structure of TensorFlow specs the language
computes with.
"""

import collections
import copy
import json
import pathlib
import pickle
import sys

import attrs
import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors

ROOT = pathlib.Path(__file__).parents[3]
sys.path.insert(0, str(ROOT / 'scripts'))
import record_tff_types  # pylint: disable=g-import-not-at-top,wrong-import-position
sys.path.pop(0)

RECORD = json.loads((ROOT / 'tests' / 'data' / 'tff_087_types.json')
                    .read_text())
TYPES = {name: record_tff_types.evaluate(tff, text)
         for name, text in record_tff_types.TYPES.items()}

NT = collections.namedtuple('NT', ['p', 'q'])


# What TFF 0.87 answered (tests/data/tff_087_types.json).


def test_the_record_is_tff_087s_for_this_table():
  assert RECORD['tff_version'] == '0.87.0'
  assert set(RECORD['types']) == set(record_tff_types.TYPES)
  assert [(p['target'], p['source']) for p in RECORD['pairs']] == (
      record_tff_types.PAIRS)


@pytest.mark.parametrize('name', sorted(record_tff_types.TYPES))
def test_texts_are_tffs(name):
  t, recorded = TYPES[name], RECORD['types'][name]
  assert str(t) == recorded['text']
  assert t.compact_representation() == recorded['text']
  assert t.formatted_representation() == recorded['formatted']
  if not isinstance(t, (tff.FederatedType, tff.FunctionType)):
    # TFF's placements print as PlacementLiteral('server'); ours as SERVER.
    assert repr(t) == recorded['repr']


@pytest.mark.parametrize('pair', RECORD['pairs'],
                         ids=lambda p: f'{p["target"]}<-{p["source"]}')
def test_relations_are_tffs(pair):
  target, source = TYPES[pair['target']], TYPES[pair['source']]
  assert target.is_assignable_from(source) == pair['assignable']
  assert target.is_equivalent_to(source) == pair['equivalent']
  assert target.is_identical_to(source) == pair['identical']
  assert (target == source) == pair['identical']
  if pair['identical']:
    assert hash(target) == hash(source)


@pytest.mark.parametrize('name', sorted(record_tff_types.TYPES))
def test_serialized_types_are_tffs_bytes(name):
  t, recorded = TYPES[name], RECORD['types'][name]
  serialized = tff.types.serialize_type(t)
  if recorded['serialized'] is None:
    # TFF 0.87 serializes no abstract type; its message has the field.
    assert 'abstract' in str(serialized)
    return
  assert serialized.SerializeToString().hex() == recorded['serialized']
  back = tff.types.deserialize_type(bytes.fromhex(recorded['serialized']))
  assert back.is_equivalent_to(t)
  if not isinstance(back, (tff.FederatedType, tff.FunctionType)):
    assert repr(back) == recorded['deserialized']


def test_the_type_messages_module_is_fresh(tmp_path):
  sys.path.insert(0, str(ROOT / 'scripts'))
  try:
    import gen_proto  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  fresh = pathlib.Path(gen_proto.generate_types(str(tmp_path)))
  committed = ROOT / 'canonical' / 'core' / 'tff_type_pb2.py'
  assert fresh.read_text() == committed.read_text(), (
      'canonical/core/tff_type_pb2.py is stale: run scripts/gen_proto')


# The types a TFF 0.87 user meets, and TFF's questions about them.


@tff.tensorflow.computation
def _weights():
  return collections.OrderedDict(w=tf.zeros([2, 3]), b=tf.zeros([3]))


@tff.federated_computation(
    tff.FederatedType(np.float32, tff.SERVER),
    tff.FederatedType(tff.SequenceType((np.float32, [2])), tff.CLIENTS))
def _round(state, data):
  del data
  return state, tff.federated_zip(collections.OrderedDict(
      loss=state, count=tff.federated_value(1, tff.SERVER)))


def test_type_signature_parts_are_tff_types():
  signature = _round.type_signature
  assert isinstance(signature, tff.types.FunctionType)
  assert isinstance(signature, tff.Type)
  parameter = signature.parameter
  assert isinstance(parameter, tff.StructWithPythonType)
  assert parameter.python_container is collections.OrderedDict  # As TFF's.
  assert len(parameter) == 2
  state, data = parameter  # Unpacks into the parameters' types, as TFF's.
  assert state is parameter[0] and data is parameter['data']
  assert data is parameter.data
  assert isinstance(state, tff.FederatedType)
  assert state.placement is tff.SERVER and state.all_equal
  assert isinstance(state.member, tff.TensorType)
  assert not data.all_equal and data.placement is tff.CLIENTS
  assert isinstance(data.member, tff.SequenceType)
  assert isinstance(data.member.element, tff.TensorType)
  assert data.member.element.shape == (2,)
  result = signature.result
  assert isinstance(result, tff.StructWithPythonType)
  assert result.python_container is tuple
  new_state, metrics = result
  assert new_state.is_assignable_from(state)
  assert isinstance(metrics.member, tff.StructWithPythonType)
  assert metrics.member.python_container is collections.OrderedDict
  assert str(metrics.member.loss) == 'float32'
  assert str(metrics.member['count']) == 'int32'
  assert str(metrics.member[1]) == 'int32'
  assert [name for name, _ in tff.structure.iter_elements(
      metrics.member)] == ['loss', 'count']
  assert list(metrics.member.children()) == [
      tff.TensorType(np.float32), tff.TensorType(np.int32)]
  assert str(signature) == (
      '(<state=float32@SERVER,data={float32[2]*}@CLIENTS> -> '
      '<float32@SERVER,<loss=float32,count=int32>@SERVER>)')


def test_a_tensorflow_computations_types():
  weights_type = _weights.type_signature.result
  assert isinstance(weights_type, tff.StructWithPythonType)
  assert weights_type.python_container is collections.OrderedDict
  assert _weights.type_signature.parameter is None
  w = weights_type.w
  assert isinstance(w, tff.TensorType) and isinstance(w, tff.types.Type)
  assert w.dtype == np.float32 and np.dtype(w.dtype) == np.float32
  assert np.issubdtype(w.dtype, np.floating) and w.dtype.type is np.float32
  assert w.shape == (2, 3) and tuple(w.shape) == (2, 3)
  assert np.zeros(w.shape, w.dtype).dtype == np.float32


def test_a_process_state_type_is_a_tff_type():
  process = tff.templates.IterativeProcess(
      tff.federated_computation(lambda: tff.federated_value(0.0, tff.SERVER)),
      _round)
  assert isinstance(process.state_type, tff.FederatedType)
  assert process.state_type.is_equivalent_to(
      process.initialize.type_signature.result)
  assert process.initialize.type_signature.result.member == tff.TensorType(
      np.float32)


def test_struct_types_hold_their_python_containers():
  t = tff.to_type(NT(np.int32, (np.float32, [2])))
  assert isinstance(t, tff.StructWithPythonType) and isinstance(t, NT)
  assert t.p == tff.TensorType(np.int32) and t['q'] == t[1] == t.q
  named = tff.StructType([('a', np.int32), ('b', np.float32)])
  assert named.python_container is None and not isinstance(
      named, tff.StructWithPythonType)
  assert named.a == named['a'] == named[0] == tff.TensorType(np.int32)
  assert dir(named) == ['a', 'b'] and len(named) == 2
  # Held in a dict, it iterates its names, as a dict does (TFF: its types).
  assert list(named) == ['a', 'b']
  assert [t for _, t in tff.structure.iter_elements(named)] == [
      tff.TensorType(np.int32), tff.TensorType(np.float32)]
  unnamed = tff.StructType([np.int32, np.float32])
  assert list(unnamed) == [tff.TensorType(np.int32),
                           tff.TensorType(np.float32)]
  # A type equals a plain structure of specs as that structure does.
  assert named == {'a': tf.TensorSpec([], tf.int32),
                   'b': tf.TensorSpec([], tf.float32)}
  assert unnamed == (tf.TensorSpec([], tf.int32),
                     tf.TensorSpec([], tf.float32))


@attrs.define(eq=False, frozen=True)
class _State:
  w: object
  n: object


def test_an_attrs_class_is_a_struct_container_as_in_tff():
  # What TFF 0.87 answered for these lines: each value is a _State.
  @tff.tensorflow.computation
  def init():
    return _State(w=tf.zeros([2]), n=tf.constant(0))

  @tff.tensorflow.computation(init.type_signature.result)
  def bump(state):
    assert isinstance(state, _State)  # TFF hands it so to the function.
    return tff.structure.update_struct(state, n=state.n + 1)

  @tff.federated_computation(tff.FederatedType(init.type_signature.result,
                                               tff.SERVER))
  def step(state):
    return tff.federated_map(bump, state)

  t = init.type_signature.result
  assert str(init.type_signature) == '( -> <w=float32[2],n=int32>)'
  assert str(bump.type_signature) == (
      '(<w=float32[2],n=int32> -> <w=float32[2],n=int32>)')
  assert isinstance(t, tff.StructWithPythonType)
  assert t.python_container is _State and t.w == t[0] == t['w']
  assert bump.type_signature.result.python_container is _State
  state = step(init())
  assert isinstance(state, _State) and state.n == 1
  state = step(_State(w=np.ones([2], np.float32), n=np.int32(4)))
  assert isinstance(state, _State) and state.n == 5
  np.testing.assert_array_equal(state.w, [1.0, 1.0])
  assert repr(tff.types.to_type(_State(w=np.float32, n=np.int32))) == (
      "StructType([('w', TensorType(np.float32)), "
      "('n', TensorType(np.int32))]) as _State")
  again = tff.StructWithPythonType([('w', np.float32), ('n', np.int32)],
                                   _State)
  assert again == tff.types.to_type(_State(w=np.float32, n=np.int32))
  with pytest.raises(errors.Error, match=r'_State has fields \['):
    tff.StructWithPythonType([('x', np.float32)], _State)


def test_types_are_immutable_hashable_and_pickle():
  for t in TYPES.values():
    assert pickle.loads(pickle.dumps(t)) == t
    assert copy.deepcopy(t) == t
    assert hash(t) == hash(pickle.loads(pickle.dumps(t)))
  with pytest.raises(errors.InvalidTypeError, match='immutable'):
    TYPES['odict_ab']['c'] = tff.TensorType(np.int32)
  with pytest.raises(errors.InvalidTypeError, match='immutable'):
    TYPES['list_if'].append(tff.TensorType(np.int32))


def test_a_type_is_still_the_structure_of_specs_the_language_computes_with():
  t = tff.to_type(collections.OrderedDict(
      x=(np.float32, [None, 2]), y=[np.int32, NT(np.int32, np.int64)]))
  assert tf.nest.flatten(t) == [
      tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([], tf.int32),
      tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int64)]
  # What tf.nest rebuilds from a type is the plain container: a type never
  # holds values.
  zeros = tf.nest.map_structure(lambda s: 0, t)
  assert type(zeros) is collections.OrderedDict
  assert type(zeros['y']) is list and type(zeros['y'][1]) is NT
  seen = []

  @tf.function(input_signature=[t])
  def f(value):
    seen.append(value)
    return value['x'] * 2.0

  f(collections.OrderedDict(x=tf.ones([3, 2]), y=[1, NT(2, 3)]))
  assert type(seen[0]) is collections.OrderedDict
  assert type(seen[0]['y'][1]) is NT
  # A struct type with no container: a tf.function is given a Struct, as a
  # tf computation is in TFF.
  struct_type = tff.to_type(tff.structure.Struct([('a', np.float32),
                                                  ('b', np.float32)]))

  @tff.tensorflow.computation(struct_type)
  def add(value):
    assert isinstance(value, tff.structure.Struct)
    return value.a + value['b'] + value[0]

  assert add(tff.structure.Struct([('a', 1.0), ('b', 2.0)])) == 4.0


def test_a_computation_takes_types_in_every_spelling():

  @tff.tensorflow.computation(TYPES['named_ab'], tff.TensorType(np.int32, [2]))
  def f(struct, vector):
    return struct['a'] + vector

  assert str(f.type_signature) == '(<struct=<a=int32,b=float32>,' \
                                  'vector=int32[2]> -> int32[2])'
  np.testing.assert_array_equal(f({'a': 1, 'b': 2.0}, [1, 2]), [2, 3])


# TFF's functions over types (answers from TFF 0.87).


def test_walking_a_type():
  t = tff.StructType([('a', np.int32), ('b', [np.float32, np.int32])])
  assert tff.types.count(t, lambda x: isinstance(x, tff.TensorType)) == 3
  assert tff.types.contains(
      tff.FederatedType(tff.SequenceType(np.int32), tff.CLIENTS),
      lambda x: isinstance(x, tff.SequenceType))
  assert tff.types.contains_only(
      tff.StructType([np.int32]),
      lambda x: isinstance(x, (tff.StructType, tff.TensorType)))
  assert not tff.types.contains_only(
      TYPES['nested'], lambda x: isinstance(x, (tff.StructType,
                                                tff.TensorType)))


@pytest.mark.parametrize('text,floats,integers,tensors,tensorflow', [
    ('tff.StructType([])', True, True, True, True),
    ('tff.to_type((np.float32, np.float64))', True, False, True, True),
    ('tff.to_type((np.float32, np.int32))', False, False, True, True),
    ('tff.FederatedType((np.int32, np.int64), tff.CLIENTS)', False, True,
     False, False),
    ('tff.SequenceType(np.float32)', False, False, False, True),
    ('tff.TensorType(np.bool_)', False, False, True, True),
    ('tff.TensorType(np.str_)', False, False, True, True),
])
def test_what_a_type_holds(text, floats, integers, tensors, tensorflow):
  t = record_tff_types.evaluate(tff, text)
  assert tff.types.is_structure_of_floats(t) == floats
  assert tff.types.is_structure_of_integers(t) == integers
  assert tff.types.is_structure_of_tensors(t) == tensors
  assert tff.types.is_tensorflow_compatible_type(t) == tensorflow


def test_shapes():
  assert tff.types.is_tensorflow_compatible_type(None)
  assert not tff.types.is_shape_fully_defined((2, None))
  assert not tff.types.is_shape_fully_defined(None)
  assert tff.types.is_shape_fully_defined(())
  assert tff.types.num_elements_in_shape((2, 3)) == 6
  assert tff.types.num_elements_in_shape((2, None)) is None
  assert tff.types.num_elements_in_shape(()) == 1
  assert tff.types.num_elements_in_shape(tf.TensorShape([4, 5])) == 20


def test_conversions_to_python_containers_and_specs():
  struct = tff.structure.Struct
  assert tff.types.type_to_py_container(
      struct([('a', 1), ('b', struct([(None, 2), (None, 3)]))]),
      tff.StructType([('a', np.int32), ('b', [np.int32, np.int32])])) == (
          collections.OrderedDict([('a', 1), ('b', [2, 3])]))
  assert tff.types.type_to_py_container(
      struct([('p', 1), ('q', 2)]),
      tff.StructWithPythonType([('p', np.int32), ('q', np.int32)], NT)) == (
          NT(p=1, q=2))
  assert tff.types.type_to_py_container(
      [struct([(None, 1)]), struct([(None, 2)])],
      tff.FederatedType(tff.to_type([np.int32]), tff.CLIENTS)) == [[1], [2]]
  assert tff.types.type_to_py_container(
      {'x': 1}, tff.StructType([('x', np.int32)])) == {'x': 1}
  with pytest.raises(ValueError, match="'a'.*'p'"):
    tff.types.type_to_py_container(struct([('a', 1), ('b', 2)]),
                                   tff.to_type(NT(np.int32, np.int32)))
  counter = iter(range(10))
  assert tff.types.structure_from_tensor_type_tree(
      lambda _: next(counter),
      tff.StructType([('a', np.int32), ('b', [np.float32, np.int32])])) == (
          collections.OrderedDict([('a', 0), ('b', [1, 2])]))
  assert tff.types.structure_from_tensor_type_tree(
      str, tff.to_type(NT(np.int32, np.float32))) == NT('int32', 'float32')
  with pytest.raises(ValueError, match='int32\\*'):
    tff.types.structure_from_tensor_type_tree(str, TYPES['seq_i32'])
  specs = tff.types.type_to_tf_tensor_specs(tff.to_type(
      collections.OrderedDict(a=[np.int32, (np.float32, [3])],
                              b=NT(np.int32, np.float32))))
  assert type(specs) is collections.OrderedDict and type(specs['a']) is list
  assert type(specs['a'][0]) is tf.TensorSpec
  assert specs == collections.OrderedDict(
      a=[tf.TensorSpec([], tf.int32), tf.TensorSpec([3], tf.float32)],
      b=NT(tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32)))
  assert tff.types.tensorflow_to_type(specs).is_identical_to(
      tff.to_type(collections.OrderedDict(
          a=[np.int32, (np.float32, [3])], b=NT(np.int32, np.float32))))


def test_mismatch_messages_and_errors_are_tffs():
  relation = tff.types.TypeRelation
  assert tff.types.type_mismatch_error_message(
      tff.TensorType(np.int32), tff.TensorType(np.float32),
      relation.ASSIGNABLE) == (
          'Type `int32` is not assignable to type `float32`')
  assert tff.types.type_mismatch_error_message(
      tff.to_type((np.int32,)), tff.to_type([np.int32]), relation.IDENTICAL,
      second_is_expected=True) == (
          'Type\n`StructType([TensorType(np.int32)]) as tuple`\nis not '
          'identical to expected type\n`StructType([TensorType(np.int32)]) '
          'as list`')
  big = tff.StructType([(f'name{i}', np.float32) for i in range(12)])
  other = tff.StructType([(f'name{i}', np.int32 if i == 5 else np.float32)
                          for i in range(12)])
  message = tff.types.type_mismatch_error_message(big, other,
                                                  relation.EQUIVALENT)
  assert message.startswith('Type\n`<\n  name0=float32,\n')
  assert '\n\nDiff:\n' in message and '\n-  name5=float32,\n+  name5=int32,'
  with pytest.raises(tff.types.TypeNotAssignableError,
                     match='Type `float32` is not assignable to type '
                     '`int32`') as raised:
    tff.TensorType(np.int32).check_assignable_from(tff.TensorType(np.float32))
  assert isinstance(raised.value, TypeError)
  assert isinstance(raised.value, errors.Error)
  with pytest.raises(tff.types.TypesNotEquivalentError):
    TYPES['i32_n'].check_equivalent_to(TYPES['i32_2'])
  with pytest.raises(tff.types.TypesNotIdenticalError):
    TYPES['named_ab'].check_identical_to(TYPES['odict_ab'])
  TYPES['named_ab'].check_equivalent_to(TYPES['odict_ab'])
  with pytest.raises(TypeError, match='not comparable'):
    TYPES['abstract'].is_assignable_from(TYPES['abstract'])


def test_misuse_names_the_line():
  with pytest.raises(tff.FederatedError,
                     match=r'TensorType at test_tff_087_types.py:\d+'):
    tff.TensorType('float32')
  with pytest.raises(tff.FederatedError, match='SequenceType at .*sequences'):
    tff.SequenceType(tff.SequenceType(np.int32))
  with pytest.raises(tff.FederatedError, match='FederatedType at .*placed'):
    tff.FederatedType(tff.FederatedType(np.int32, tff.SERVER), tff.CLIENTS)
  with pytest.raises(tff.FederatedError, match='StructType at .*name every'):
    tff.StructType([('a', np.int32), np.int32])


def test_a_federated_structs_elements_select_by_name_or_position():

  @tff.federated_computation(tff.FederatedType(
      collections.OrderedDict(a=np.float32, b=np.int32), tff.CLIENTS))
  def parts(value):
    assert isinstance(value.type_signature.member, tff.StructWithPythonType)
    return (tff.federated_sum(value.b), tff.federated_mean(value['a']),
            tff.federated_sum(value[1]))

  # TFF 0.87 gives (6, 2.0, 6).
  assert parts([collections.OrderedDict(a=1.0, b=2),
                collections.OrderedDict(a=3.0, b=4)]) == (6, 2.0, 6)


def test_a_struct_held_in_a_dict_compares_by_names_as_dicts_do():
  # TFF 0.87 keeps a dict's insertion order in its type; dicts compare by
  # names, and tf.nest walks them by sorted names, so here a type held in a
  # dict does too (a restored dataset iterator's dict comes back sorted).
  xy = tff.to_type({'x': np.float32, 'y': np.int32})
  yx = tff.to_type({'y': np.int32, 'x': np.float32})
  assert xy == yx and hash(xy) == hash(yx) and xy.is_assignable_from(yx)
  assert str(yx) == '<y=int32,x=float32>'
  ordered = [tff.to_type(collections.OrderedDict(x=np.float32, y=np.int32)),
             tff.to_type(collections.OrderedDict(y=np.int32, x=np.float32))]
  assert ordered[0] != ordered[1]
  assert not ordered[0].is_assignable_from(ordered[1])
