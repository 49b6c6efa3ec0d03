"""Writes TensorFlow Federated 0.87's answers about types that
`tests/canonical/core/test_tff_087_types.py` holds `tff.types` against:
each type's texts and serialized bytes, and for each pair of types whether
one is assignable from, equivalent to and identical to the other.

The table below is written in TFF's own spelling; the test evaluates the
same expressions with `import canonical as tff`. Run it with a real TFF
0.87 (../shared/peers/README.md installs one):

  /work/peers/venv-tff/bin/python scripts/record_tff_types.py \
      > tests/data/tff_087_types.json
"""

import json
import sys

# Types by name, as TFF 0.87 code writes them (`np`, `collections`, `tff`).
TYPES = {
    'i32': 'tff.TensorType(np.int32)',
    'f32': 'tff.TensorType(np.float32)',
    'i32_2': 'tff.TensorType(np.int32, [2])',
    'i32_3': 'tff.TensorType(np.int32, [3])',
    'i32_n': 'tff.TensorType(np.int32, [None])',
    'i32_2n': 'tff.TensorType(np.int32, [2, None])',
    'i32_22': 'tff.TensorType(np.int32, [2, 2])',
    'i32_u': 'tff.TensorType(np.int32, None)',
    'str': 'tff.TensorType(np.str_)',
    'i64': 'tff.TensorType(np.int64)',
    'named_ab': "tff.StructType([('a', np.int32), ('b', np.float32)])",
    'named_ba': "tff.StructType([('b', np.float32), ('a', np.int32)])",
    'named_ab_n': "tff.StructType([('a', (np.int32, [None])), "
                  "('b', np.float32)])",
    'named_ab_2': "tff.StructType([('a', (np.int32, [2])), "
                  "('b', np.float32)])",
    'unnamed_if': 'tff.StructType([np.int32, np.float32])',
    'named_ac': "tff.StructType([('a', np.int32), ('c', np.float32)])",
    'odict_ab': 'tff.to_type(collections.OrderedDict(a=np.int32, '
                'b=np.float32))',
    'dict_ab': "tff.to_type({'a': np.int32, 'b': np.float32})",
    'tuple_if': 'tff.to_type((np.int32, np.float32))',
    'list_if': 'tff.to_type([np.int32, np.float32])',
    'swpt_list_if': 'tff.StructWithPythonType([np.int32, np.float32], list)',
    'nested': "tff.StructType([('x', tff.StructType([('y', np.int32)])), "
              "('z', tff.SequenceType(np.float32))])",
    'nested_unnamed': "tff.StructType([('x', tff.StructType([np.int32])), "
                      "('z', tff.SequenceType(np.float32))])",
    'empty': 'tff.StructType([])',
    'empty_tuple': 'tff.to_type(())',
    'single': 'tff.StructType([np.int32])',
    'seq_i32': 'tff.SequenceType(np.int32)',
    'seq_i32_n': 'tff.SequenceType(tff.TensorType(np.int32, [None]))',
    'seq_i32_2': 'tff.SequenceType(tff.TensorType(np.int32, [2]))',
    'seq_named': "tff.SequenceType(tff.StructType([('x', np.float32), "
                 "('y', np.int32)]))",
    'seq_odict': 'tff.SequenceType(collections.OrderedDict(x=np.float32, '
                 'y=np.int32))',
    'seq_list': 'tff.SequenceType([np.float32, np.int32])',
    'seq_tuple': 'tff.SequenceType((np.float32, np.int32))',
    'clients_i32': 'tff.FederatedType(np.int32, tff.CLIENTS)',
    'clients_i32_eq': 'tff.FederatedType(np.int32, tff.CLIENTS, '
                      'all_equal=True)',
    'clients_i32_n': 'tff.FederatedType(tff.TensorType(np.int32, [None]), '
                     'tff.CLIENTS)',
    'clients_i32_2': 'tff.FederatedType(tff.TensorType(np.int32, [2]), '
                     'tff.CLIENTS)',
    'server_i32': 'tff.FederatedType(np.int32, tff.SERVER)',
    'server_named': "tff.FederatedType(tff.StructType([('a', np.int32), "
                    "('b', np.float32)]), tff.SERVER)",
    'server_odict': 'tff.FederatedType(collections.OrderedDict('
                    'a=np.int32, b=np.float32), tff.SERVER)',
    'clients_seq': 'tff.FederatedType(tff.SequenceType(np.int32), '
                   'tff.CLIENTS)',
    'fn_i_f': 'tff.FunctionType(np.int32, np.float32)',
    'fn_in_f': 'tff.FunctionType(tff.TensorType(np.int32, [None]), '
               'np.float32)',
    'fn_i2_f': 'tff.FunctionType(tff.TensorType(np.int32, [2]), np.float32)',
    'fn_i_fn': 'tff.FunctionType(np.int32, tff.TensorType(np.float32, '
               '[None]))',
    'fn_i_f2': 'tff.FunctionType(np.int32, tff.TensorType(np.float32, [2]))',
    'fn_none_f': 'tff.FunctionType(None, np.float32)',
    'fn_fed': 'tff.FunctionType(tff.FederatedType(np.int32, tff.CLIENTS), '
              'tff.FederatedType(np.int32, tff.SERVER))',
    'placement': 'tff.types.PlacementType()',
    'abstract': "tff.types.AbstractType('T')",
    'fn_abstract': "tff.FunctionType(tff.types.AbstractType('T'), "
                   'tff.FederatedType(np.int32, tff.SERVER))',
}

# (target, source): is the target assignable from, equivalent to, identical
# to the source?
PAIRS = [
    ('i32', 'i32'), ('i32', 'f32'), ('i32', 'i64'), ('i32_2', 'i32_2'),
    ('i32_2', 'i32_3'), ('i32_n', 'i32_2'), ('i32_2', 'i32_n'),
    ('i32_n', 'i32_22'), ('i32_2n', 'i32_22'), ('i32_22', 'i32_2n'),
    ('i32_u', 'i32_22'), ('i32_u', 'i32'), ('i32_22', 'i32_u'),
    ('i32', 'i32_u'), ('i32_n', 'i32'), ('str', 'str'), ('str', 'i32'),
    ('named_ab', 'named_ab'), ('named_ab', 'named_ba'),
    ('named_ab', 'unnamed_if'), ('unnamed_if', 'named_ab'),
    ('named_ab', 'named_ac'), ('named_ab_n', 'named_ab_2'),
    ('named_ab_2', 'named_ab_n'), ('named_ab', 'odict_ab'),
    ('odict_ab', 'named_ab'), ('odict_ab', 'dict_ab'),
    ('tuple_if', 'list_if'), ('list_if', 'swpt_list_if'),
    ('tuple_if', 'unnamed_if'), ('unnamed_if', 'tuple_if'),
    ('named_ab', 'i32'), ('nested', 'nested'), ('nested', 'nested_unnamed'),
    ('nested_unnamed', 'nested'), ('empty', 'empty_tuple'),
    ('empty_tuple', 'empty'), ('single', 'i32'), ('i32', 'single'),
    ('seq_i32', 'seq_i32'), ('seq_i32_n', 'seq_i32_2'),
    ('seq_i32_2', 'seq_i32_n'), ('seq_i32', 'i32'),
    ('seq_named', 'seq_odict'), ('seq_odict', 'seq_named'),
    ('seq_tuple', 'seq_list'), ('seq_list', 'seq_tuple'),
    ('clients_i32', 'clients_i32'), ('clients_i32', 'clients_i32_eq'),
    ('clients_i32_eq', 'clients_i32'), ('clients_i32_n', 'clients_i32_2'),
    ('clients_i32_2', 'clients_i32_n'), ('clients_i32', 'server_i32'),
    ('server_i32', 'clients_i32_eq'), ('server_named', 'server_odict'),
    ('server_odict', 'server_named'), ('clients_i32', 'i32'),
    ('clients_seq', 'clients_seq'), ('fn_i_f', 'fn_i_f'),
    ('fn_i_f', 'fn_in_f'), ('fn_in_f', 'fn_i_f'), ('fn_i2_f', 'fn_in_f'),
    ('fn_in_f', 'fn_i2_f'), ('fn_i_fn', 'fn_i_f2'), ('fn_i_f2', 'fn_i_fn'),
    ('fn_none_f', 'fn_i_f'), ('fn_none_f', 'fn_none_f'),
    ('fn_fed', 'fn_fed'), ('placement', 'placement'), ('placement', 'i32'),
]


def evaluate(tff, expression):
  """The type `expression` names, evaluated with module `tff`."""
  import collections  # pylint: disable=g-import-not-at-top,unused-import
  import numpy as np  # pylint: disable=g-import-not-at-top,unused-import
  return eval(expression)  # pylint: disable=eval-used


def _relation(method, source):
  try:
    return method(source)
  except TypeError as e:  # An abstract type is compared to nothing.
    return f'TypeError: {e}'


def main():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  types = {name: evaluate(tff, text) for name, text in TYPES.items()}
  record = {'tff_version': tff.__version__, 'types': {}, 'pairs': []}
  for name, t in types.items():
    record['types'][name] = {
        'text': str(t),
        'formatted': t.formatted_representation(),
        'repr': repr(t),
        'serialized': None,  # TFF 0.87 serializes no abstract type.
        'deserialized': None,
    }
    try:
      serialized = tff.types.serialize_type(t)
    except NotImplementedError:
      continue
    record['types'][name]['serialized'] = serialized.SerializeToString().hex()
    record['types'][name]['deserialized'] = repr(
        tff.types.deserialize_type(serialized))
  for target, source in PAIRS:
    t, s = types[target], types[source]
    record['pairs'].append({
        'target': target, 'source': source,
        'assignable': _relation(t.is_assignable_from, s),
        'equivalent': _relation(t.is_equivalent_to, s),
        'identical': _relation(t.is_identical_to, s)})
  json.dump(record, sys.stdout, indent=1, sort_keys=True)
  sys.stdout.write('\n')


if __name__ == '__main__':
  main()
