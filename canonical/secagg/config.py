"""A round's public parameters, and the checks of each client's secure input.

A secure input is a tf.nest structure of integer arrays; each leaf has its own
modulus m and values in [0, m). On the wire and in masks a leaf is a flat uint64
array; the unmasked sum comes back with the leaf's own shape and dtype.
"""

import dataclasses
import math
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.util import nest

from canonical.secagg.errors import SecAggError
from canonical.secagg import graph
from canonical.secagg import masks


@dataclasses.dataclass(frozen=True)
class LeafSpec:
  """One leaf of the secure input: where it is, its shape, dtype and modulus."""
  path: str
  shape: tuple
  dtype: np.dtype
  modulus: int

  @property
  def size(self):
    return math.prod(self.shape)

  @property
  def name(self):
    return repr(self.path) if self.path else '<root>'


@dataclasses.dataclass(frozen=True)
class SecAggConfig:
  """What every party of a round agrees on before it starts (all public)."""
  round_id: Any
  threshold: int
  leaves: tuple
  structure: Any  # A template of the secure input, for packing the sum.
  neighbors: Any = None  # None: the complete graph; k: a ring (graph.py).

  @property
  def moduli(self):
    return tuple(leaf.modulus for leaf in self.leaves)


def make_config(spec, moduli, threshold, round_id=0, neighbors=None):
  """The round's parameters.

  Args:
    spec: the structure of the secure input: arrays, or anything with `shape`
      and `dtype` (a `tf.TensorSpec`) at the leaves.
    moduli: one int for every leaf, or a structure like `spec` of ints; each in
      [2, 2**64], and m - 1 must fit the leaf's dtype (the sum has that dtype).
    threshold: t, the number of surviving clients needed to unmask; at least 1
      (and at most the number of clients, which each step checks).
    round_id: an int, str or bytes that differs between rounds (or between
      secure sums of one round), so that masks never repeat.
    neighbors: None (every client masks with and shares among all others)
      or an even k >= 2 (the sparse ring of `graph`; then t counts among a
      client's k neighbors and itself).
  """
  if isinstance(threshold, bool) or not isinstance(threshold, int):
    raise SecAggError(f'threshold {threshold!r} is not an int')
  if threshold < 1:
    raise SecAggError(f'threshold {threshold} is out of range: it must be >= 1')
  if isinstance(round_id, bool) or not isinstance(round_id, (int, str, bytes)):
    raise SecAggError(f'round_id {round_id!r}: expected an int, str or bytes')
  flat_spec = nest.flatten_with_joined_string_paths(spec)
  if not flat_spec:
    raise SecAggError('the secure input has no leaves')
  if isinstance(moduli, (int, np.integer)) and not isinstance(moduli, bool):
    flat_moduli = [int(moduli)] * len(flat_spec)
  else:
    flat_moduli = _moduli_like(flat_spec, moduli)
  leaves = tuple(_leaf_spec(path, leaf, modulus)
                 for (path, leaf), modulus in zip(flat_spec, flat_moduli))
  template = tf.nest.pack_sequence_as(spec, [leaf.path for leaf in leaves])
  graph.check_threshold(threshold, neighbors)
  return SecAggConfig(round_id, threshold, leaves, template, neighbors)


def _moduli_like(flat_spec, moduli):
  paths = [path for path, _ in flat_spec]
  flat_moduli = nest.flatten_with_joined_string_paths(moduli)
  got = [path for path, _ in flat_moduli]
  if got != paths:
    missing = sorted(set(paths) - set(got))
    extra = sorted(set(got) - set(paths))
    raise SecAggError(
        f'moduli do not match the secure input: missing leaves {missing}, '
        f'unexpected leaves {extra}')
  return [value for _, value in flat_moduli]


def _leaf_spec(path, leaf, modulus):
  name = repr(path) if path else '<root>'
  if hasattr(leaf, 'shape') and hasattr(leaf, 'dtype'):
    shape, dtype = leaf.shape, leaf.dtype
  else:
    array = np.asarray(leaf)
    shape, dtype = array.shape, array.dtype
  if isinstance(dtype, tf.DType):
    dtype = dtype.as_numpy_dtype
  dtype = np.dtype(dtype)
  if isinstance(shape, tf.TensorShape):
    if not shape.is_fully_defined():
      raise SecAggError(f'leaf {name}: shape {shape} is not fully defined')
    shape = shape.as_list()
  shape = tuple(int(d) for d in shape)
  if dtype.kind not in 'iu':
    raise SecAggError(f'leaf {name}: dtype {dtype} is not an integer dtype')
  if isinstance(modulus, np.integer):
    modulus = int(modulus)
  if isinstance(modulus, bool) or not isinstance(modulus, int):
    raise SecAggError(f'leaf {name}: modulus {modulus!r} is not an int')
  if not 2 <= modulus <= masks.MAX_MODULUS:
    raise SecAggError(
        f'leaf {name}: modulus {modulus} is out of range [2, 2**64]')
  if modulus - 1 > np.iinfo(dtype).max:
    raise SecAggError(
        f'leaf {name}: a sum modulo {modulus} does not fit its dtype {dtype} '
        f'(max {np.iinfo(dtype).max}); use a wider dtype')
  return LeafSpec(path, shape, dtype, modulus)


def flatten_input(config, value, client_id):
  """The client's secure input as flat uint64 arrays, one per leaf, checked.

  Raises:
    SecAggError: naming the client and the leaf, when the structure, a shape, a
      dtype or a value (outside [0, m)) differs from the round's.
  """
  flat = nest.flatten_with_joined_string_paths(value)
  paths = [path for path, _ in flat]
  expected = [leaf.path for leaf in config.leaves]
  who = f'client {client_id!r}'
  if paths != expected:
    missing = [p or '<root>' for p in expected if p not in paths]
    extra = [p or '<root>' for p in paths if p not in expected]
    raise SecAggError(
        f'{who}: secure input does not match the round\'s structure: missing '
        f'leaves {missing}, unexpected leaves {extra}')
  try:
    tf.nest.assert_same_structure(config.structure, value, check_types=False)
  except (TypeError, ValueError) as e:
    raise SecAggError(
        f'{who}: secure input does not match the round\'s structure: {e}'
    ) from e
  return tuple(_flat_leaf(leaf, array, who) for leaf, (_, array)
               in zip(config.leaves, flat))


def _flat_leaf(leaf, value, who):
  where = f'{who}, leaf {leaf.name}'
  if isinstance(value, (tf.Tensor, tf.Variable)):
    value = value.numpy()
  array = np.asarray(value)
  if array.dtype.kind not in 'iu':
    raise SecAggError(f'{where}: dtype {array.dtype} is not an integer dtype')
  if array.dtype != leaf.dtype:
    raise SecAggError(
        f'{where}: dtype {array.dtype} differs from the round\'s {leaf.dtype}')
  if array.shape != leaf.shape:
    raise SecAggError(
        f'{where}: shape {array.shape} differs from the round\'s {leaf.shape}')
  flat = array.reshape(-1)
  # m - 1 fits the dtype: make_config checks.
  largest = np.array(leaf.modulus - 1, dtype=leaf.dtype)
  bad = np.flatnonzero((flat < 0) | (flat > largest))
  if bad.size:
    index = tuple(int(i) for i in np.unravel_index(bad[0], leaf.shape))
    raise SecAggError(f'{where}: value {flat[bad[0]]} at index {index} is '
                      f'outside [0, {leaf.modulus})')
  return flat.astype(np.uint64)


def pack_output(config, flat_values):
  """The sum in the secure input's structure, leaves in their shapes, dtypes."""
  leaves = [values.astype(leaf.dtype).reshape(leaf.shape)
            for leaf, values in zip(config.leaves, flat_values)]
  return tf.nest.pack_sequence_as(config.structure, leaves)


def check_flat(config, flat_values, what):
  """Checks flat uint64 values (a masked input or sum) against the leaves."""
  flat_values = tuple(flat_values)
  if len(flat_values) != len(config.leaves):
    raise SecAggError(
        f'{what}: {len(flat_values)} leaves, expected {len(config.leaves)}')
  for leaf, values in zip(config.leaves, flat_values):
    if (not isinstance(values, np.ndarray) or values.dtype != np.uint64
        or values.shape != (leaf.size,)):
      raise SecAggError(
          f'{what}, leaf {leaf.name}: expected a flat uint64 array of '
          f'{leaf.size} elements')
    if leaf.modulus < masks.MAX_MODULUS and values.size and (
        values.max() >= np.uint64(leaf.modulus)):
      raise SecAggError(
          f'{what}, leaf {leaf.name}: a value is >= {leaf.modulus}')
  return flat_values

