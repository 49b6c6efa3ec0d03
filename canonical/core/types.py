"""Types: TensorFlow Federated 0.87's type classes, which are also the
structures of `tf.TensorSpec` / `tf.data.DatasetSpec` the language computes
with.

The language treats a member type (what one place holds) as a structure
that `tf.nest` walks, whose leaves are `tf.TensorSpec`s and
`tf.data.DatasetSpec`s: the compiler flattens it, tf.functions take it as
their input signature. TFF's users treat a type as an object of its classes:
`isinstance(t, tff.StructType)`, `t.is_assignable_from(u)`, `t.member`,
`t.python_container`. Here one object is both, so every type a user meets
(`type_signature`, `state_type`, `.member`, `to_type(...)`) answers TFF's
questions while the language keeps computing with it as before:

* `TensorType` is a `tf.TensorSpec`, `SequenceType` a `tf.data.DatasetSpec`
  (leaves to `tf.nest`; a tf.function takes them). `TensorType.dtype` is a
  `tf.DType` that also answers numpy (`np.dtype(t.dtype)`,
  `np.issubdtype(t.dtype, np.floating)`); `shape` is a `tf.TensorShape`,
  which equals TFF's tuple.
* A struct type is an instance of its Python container: a class made (once
  per container) from the container and `StructType`, so that
  `StructWithPythonType([...], OrderedDict)` is an OrderedDict of element
  types, one with a namedtuple container is that namedtuple. `tf.nest`
  walks it as it walks the container, and whatever it (or a tf.function)
  rebuilds from one is the plain container of the new leaves: a type never
  holds values. A struct without a Python container holds its elements in a
  dict when they are named (so it matches OrderedDict-typed values, as
  TFF's assignability does), else in a tuple; one made from a `Struct` value
  (and a computation's several parameters) is a `Struct` layout, whose
  values are `Struct`s, as TFF gives them.
* What the container decides stays the container's: a struct type held in a
  dict iterates its names, as a dict does (TFF's iterates its element
  types; `tff.structure.iter_elements`, `t[0]`, `t.x` and `t['x']` work on
  both). Struct types are immutable and hashable.
* Equality between types is TFF's (containers, names and elements); between
  a type and a plain structure of specs it is the plain structure's.

`FederatedType`, `FunctionType`, `AbstractType` and `PlacementType` are
plain classes. Assignability follows TFF 0.87's rules (tests hold them to
TFF's answers on a table of pairs).

The classes, their relations, conversions and texts are modules of their
own, one job each (`type_base`, `struct_types`, `leaf_types`,
`federated_types`, `type_conversions`, `type_texts`); this module is their
public home and serves all their names, as it always did.
"""

# Every name below is this module's, where it always was. (`_rebuild_struct`:
# pickled struct types name it here.)
# pylint: disable=unused-import
from canonical.core.federated_types import AbstractType
from canonical.core.federated_types import at_clients
from canonical.core.federated_types import at_server
from canonical.core.federated_types import CLIENTS
from canonical.core.federated_types import clients
from canonical.core.federated_types import FederatedType
from canonical.core.federated_types import FunctionType
from canonical.core.federated_types import Placement
from canonical.core.federated_types import PlacementType
from canonical.core.federated_types import SERVER
from canonical.core.federated_types import server
from canonical.core.federated_types import type_at_clients
from canonical.core.federated_types import type_at_server
from canonical.core.leaf_types import ArrayShape
from canonical.core.leaf_types import SequenceType
from canonical.core.leaf_types import TensorType
from canonical.core.member_structures import by_name
from canonical.core.member_structures import check_member
from canonical.core.member_structures import dataset_mismatch
from canonical.core.member_structures import has_dataset
from canonical.core.member_structures import is_fully_defined
from canonical.core.member_structures import same_member
from canonical.core.member_structures import spec_of
from canonical.core.member_structures import with_sequences
from canonical.core.naming import describe
from canonical.core.naming import form_text
from canonical.core.struct import Struct
from canonical.core.struct_types import _rebuild_struct
from canonical.core.struct_types import elements_of
from canonical.core.struct_types import StructType
from canonical.core.struct_types import StructWithPythonType
from canonical.core.struct_types import value_container
from canonical.core.struct_types import with_attrs_containers
from canonical.core.type_base import Type
from canonical.core.type_base import type_mismatch_error_message
from canonical.core.type_base import TypeNotAssignableError
from canonical.core.type_base import TypeRelation
from canonical.core.type_base import TypesNotEquivalentError
from canonical.core.type_base import TypesNotIdenticalError
from canonical.core.type_base import UnexpectedTypeError
from canonical.core.type_conversions import is_type
from canonical.core.type_conversions import member_of
from canonical.core.type_conversions import parameter_of
from canonical.core.type_conversions import tensorflow_to_type
from canonical.core.type_conversions import to_member
from canonical.core.type_conversions import to_type
# Importing the texts hands `Type` its texts (`compact_representation`).
from canonical.core import type_texts

# Each class is pickled (and shown) by this public home, as before the
# split: loading one imports this module, which completes the hand-over.
for _class in (AbstractType, ArrayShape, FederatedType, FunctionType,
               Placement, PlacementType, SequenceType, StructType,
               StructWithPythonType, TensorType, Type, TypeNotAssignableError,
               TypeRelation, TypesNotEquivalentError, TypesNotIdenticalError,
               UnexpectedTypeError):
  _class.__module__ = __name__
del _class
