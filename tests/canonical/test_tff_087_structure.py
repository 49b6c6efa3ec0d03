"""`tff.structure` as TFF 0.87 has it: `Struct` and its functions, with the
answers a real TFF 0.87 gave for the same calls (recorded), on Structs and,
as computations here return plain containers, on those too."""

import collections
import pickle

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
from canonical import errors

Struct = tff.structure.Struct
st = tff.structure
NT = collections.namedtuple('NT', ['p', 'q'])
X = Struct([('a', 1), (None, 2), ('b', Struct([('c', 3), ('d', 4)]))])


def test_a_struct_reads_as_tffs():
  assert repr(X) == ("Struct([('a', 1), (None, 2), ('b', Struct([('c', 3), "
                     "('d', 4)]))])")
  assert str(X) == '<a=1,2,b=<c=3,d=4>>'
  assert len(X) == 3 and list(X) == [1, 2, Struct([('c', 3), ('d', 4)])]
  assert dir(X) == ['a', 'b']
  assert X[2].c == 3 and X['a'] == 1 and X.b.d == 4
  assert X[0:2] == (1, 2)
  with pytest.raises(IndexError):
    X[-1]  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError, match='zz'):
    X.zz  # pylint: disable=pointless-statement
  assert repr(Struct.named(a=1, b=2)) == "Struct([('a', 1), ('b', 2)])"
  assert repr(Struct.unnamed(1, 2)) == "Struct([(None, 1), (None, 2)])"
  assert Struct.named(a=1) == Struct.named(a=1)
  assert Struct.unnamed(1) != (1,) and not Struct.unnamed(1) == (1,)
  assert Struct.named(a=1) != Struct.named(b=1)
  assert hash(Struct.named(a=1)) == hash(Struct.named(a=1))
  with pytest.raises(ValueError, match='repeated'):
    Struct([('a', 1), ('a', 2)])
  assert Struct.named(a=1, b=Struct.named(c=2))._asdict(recursive=True) == (
      collections.OrderedDict([('a', 1), ('b', collections.OrderedDict(
          [('c', 2)]))]))
  assert pickle.loads(pickle.dumps(X)) == X
  assert isinstance(tff.StructType([('a', np.int32)]), Struct)


def test_names_and_elements():
  assert st.name_list(X) == ['a', 'b']
  assert st.name_list_with_nones(X) == ['a', None, 'b']
  assert st.name_to_index_map(X) == {'a': 0, 'b': 2}
  assert st.has_field(X, 'b') and not st.has_field(X, 'z')
  assert st.to_elements(X) == [('a', 1), (None, 2),
                               ('b', Struct([('c', 3), ('d', 4)]))]
  # Plain containers and struct types too (TFF 0.87 takes only Structs).
  assert list(st.iter_elements(collections.OrderedDict(a=1, b=2))) == [
      ('a', 1), ('b', 2)]
  assert st.to_elements(NT(1, 2)) == [('p', 1), ('q', 2)]
  assert st.to_elements([1, 2]) == [(None, 1), (None, 2)]
  assert st.name_list(tff.StructType([('a', np.int32),
                                      ('b', np.float32)])) == ['a', 'b']


def test_conversions():
  assert st.to_odict(Struct.named(a=1, b=Struct.named(c=2)),
                     recursive=True) == collections.OrderedDict(
                         [('a', 1), ('b', collections.OrderedDict(
                             [('c', 2)]))])
  with pytest.raises(ValueError, match='unnamed'):
    st.to_odict(X)
  nested = Struct([(None, 1), (None, Struct.named(c=2))])
  assert st.to_odict_or_tuple(nested) == (1, collections.OrderedDict(c=2))
  assert st.to_odict_or_tuple(nested, recursive=False) == (
      1, Struct.named(c=2))
  assert st.from_container(collections.OrderedDict(a=1, b=[2, 3]),
                           recursive=True) == Struct(
                               [('a', 1), ('b', Struct.unnamed(2, 3))])
  assert st.from_container(NT(1, 2)) == Struct.named(p=1, q=2)
  assert st.from_container([1, (2, 3)]) == Struct([(None, 1),
                                                   (None, (2, 3))])
  with pytest.raises(TypeError, match='int'):
    st.from_container(5)


def test_flatten_pack_and_map():
  assert st.flatten(X) == [1, 2, 3, 4]
  # A plain dict inside is flattened as tf.nest does: by sorted keys.
  assert st.flatten(Struct([('z', {'b': 1, 'a': 2}), ('y', 3)])) == [2, 1, 3]
  assert st.pack_sequence_as(X, [10, 20, 30, 40]) == Struct(
      [('a', 10), (None, 20), ('b', Struct([('c', 30), ('d', 40)]))])
  assert st.is_same_structure(X, X)
  assert not st.is_same_structure(Struct.named(a=1), Struct.named(b=1))
  assert st.map_structure(lambda a, b: a + b, X, X) == Struct(
      [('a', 2), (None, 4), ('b', Struct([('c', 6), ('d', 8)]))])
  assert st.map_structure(lambda a: a * 2, {'a': 1, 'b': [2]}) == {
      'a': 2, 'b': [4]}
  with pytest.raises(TypeError, match='structure 1'):
    st.map_structure(lambda a, b: a, X, Struct.named(a=1))


def test_update_struct():
  assert st.update_struct(Struct.named(a=1, b=2), b=5) == (
      Struct.named(a=1, b=5))
  assert st.update_struct({'a': 1, 'b': 2}, b=5) == {'a': 1, 'b': 5}
  assert st.update_struct(NT(1, 2), q=5) == NT(p=1, q=5)
  with pytest.raises(KeyError, match='z') as raised:
    st.update_struct(Struct.named(a=1), z=5)
  assert isinstance(raised.value, errors.Error)
  with pytest.raises(TypeError, match='named fields'):
    st.update_struct([1, 2], a=1)


def test_a_struct_is_a_structure_to_tf_nest_and_computations():
  value = Struct([('x', 1.0), ('y', Struct.unnamed(2.0, 3.0))])
  doubled = tf.nest.map_structure(lambda v: v * 2, value)
  assert isinstance(doubled, Struct) and doubled == Struct(
      [('x', 2.0), ('y', Struct.unnamed(4.0, 6.0))])
  assert tf.nest.flatten(value) == [1.0, 2.0, 3.0]

  @tff.tensorflow.computation(tff.to_type(Struct(
      [('x', np.float32), ('y', Struct.unnamed(np.float32, np.float32))])))
  def total(s):
    return s.x + s.y[0] + s['y'][1]

  assert total(value) == 6.0
  assert str(total.type_signature) == '(<x=float32,y=<float32,float32>> -> ' \
                                      'float32)'
