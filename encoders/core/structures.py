"""Splitting nested structures into what travels (tensors) and what does not.

Stages may put Python values (a bit width, a static shape) in params and
outputs. Those are known when an encoder is built and never need to be sent, so
the platform encoders expose only the tensors, flat, and remember the rest.
"""

import tensorflow as tf

from encoders import errors


def is_tensor(value):
  return tf.is_tensor(value)


def _read_variables(structure):
  """Variables (a stage may keep params in them) become the tensors they hold."""
  return tf.nest.map_structure(
      lambda leaf: tf.convert_to_tensor(leaf)
      if isinstance(leaf, tf.Variable) else leaf, structure)


class Template:
  """The Python part of a structure, with slots where its tensors go."""

  def __init__(self, structure):
    structure = _read_variables(structure)
    self._structure = tf.nest.map_structure(lambda _: None, structure)
    leaves = tf.nest.flatten(structure)
    self._is_slot = [is_tensor(leaf) for leaf in leaves]
    self._py_leaves = [None if slot else leaf
                       for slot, leaf in zip(self._is_slot, leaves)]
    self._specs = [tf.TensorSpec.from_tensor(leaf)
                   for leaf in leaves if is_tensor(leaf)]

  @property
  def specs(self):
    """`tf.TensorSpec`s of the tensors, in flat order."""
    return list(self._specs)

  def tensors(self, structure, what='value'):
    """The tensors of `structure` in flat order, checking its Python part."""
    leaves = tf.nest.flatten(_read_variables(structure))
    if len(leaves) != len(self._is_slot):
      raise errors.InvalidValueError(
          f'The {what} has {len(leaves)} leaves, expected '
          f'{len(self._is_slot)}.')
    tensors = []
    for slot, recorded, leaf in zip(self._is_slot, self._py_leaves, leaves):
      if slot != is_tensor(leaf) or (not slot and not _equal(recorded, leaf)):
        raise errors.InvalidValueError(
            f'The Python part of the {what} changed since the '
            f'encoder was built: {recorded!r} became {leaf!r}. '
            'Stages must derive Python values from their '
            'configuration and static shapes only.')
      if slot:
        tensors.append(leaf)
    return tensors

  def pack(self, tensors, what='value', check_shapes=True):
    """Rebuilds the structure from its tensors in flat order."""
    tensors = list(tensors)
    if len(tensors) != len(self._specs):
      raise errors.InvalidValueError(
          f'The {what} has {len(tensors)} tensors, expected '
          f'{len(self._specs)}.')
    tensors = [tf.convert_to_tensor(t, dtype=spec.dtype)
               for t, spec in zip(tensors, self._specs)]
    for i, (tensor, spec) in enumerate(zip(tensors, self._specs)):
      if check_shapes and not spec.is_compatible_with(tensor):
        raise errors.InvalidValueError(
            f'Tensor {i} of the {what} has shape {tensor.shape} '
            f'and dtype {tensor.dtype.name}, expected {spec}.')
    it = iter(tensors)
    leaves = [next(it) if slot else py
              for slot, py in zip(self._is_slot, self._py_leaves)]
    return tf.nest.pack_sequence_as(self._structure, leaves)


def trace(fn, *input_specs):
  """Runs `fn` once on symbolic inputs, building a graph but computing nothing.

  Returns what `fn` returned; its tensors are symbolic and serve only to learn
  structures, shapes and dtypes.
  """
  outputs = []

  def record(*args):
    outputs.append(fn(*args))

  tf.function(record, input_signature=input_specs,
              autograph=False).get_concrete_function()
  return outputs[0]


def _equal(a, b):
  try:
    return bool(a == b)
  except ValueError:  # numpy arrays
    return a is b


def flatten_with_paths(structure, prefix=''):
  """Yields `(path, leaf)` in `tf.nest.flatten` order, with '/'-joined keys."""
  if isinstance(structure, dict):
    for key in sorted(structure):
      yield from flatten_with_paths(structure[key], f'{prefix}{key}/')
  elif isinstance(structure, (list, tuple)):
    for index, item in enumerate(structure):
      yield from flatten_with_paths(item, f'{prefix}{index}/')
  else:
    yield prefix.rstrip('/'), structure


def tensor_paths(structure):
  """Paths of the tensors of `structure`, in flat order."""
  return [path for path, leaf in flatten_with_paths(structure)
          if is_tensor(leaf)]


def bits(specs_or_tensors):
  """Size in bits of a structure of tensors or fully defined `tf.TensorSpec`s."""
  total = 0
  for leaf in tf.nest.flatten(specs_or_tensors):
    if leaf is None:
      continue
    if not leaf.shape.is_fully_defined():
      raise errors.InvalidValueError(
          f'Cannot count the bits of {leaf}: its shape is not '
          'fully defined.')
    total += leaf.shape.num_elements() * leaf.dtype.size * 8
  return total
