"""`MeasuredProcess`: a stateful federated building block (a broadcast, a mean).

Like TensorFlow Federated's: `initialize` makes the block's server state and
`next` advances it by one round. `next` is a federated_computation, so calling
it while tracing another federated computation inlines it: that is how federated
averaging composes an encoded broadcast and an encoded mean into its round.
"""

import tensorflow as tf

from canonical.core import naming
from canonical.templates import iterative_process as process_lib


class MeasuredProcess:
  """`initialize` and `next` (a federated_computation).

  `initialize` is a tf_computation with no argument, or a federated_computation
  with no parameter returning a SERVER value, as for `IterativeProcess`.

  `encoders` is the flat tuple of platform encoders the process applies, one per
  tensor (empty for an unencoded process). With `client_state_initializer` (a
  tf_computation, no argument) the process also keeps state at each client
  (error feedback residuals): `next` then takes that state as its last
  argument and returns the new one as its last result.
  """

  def __init__(self, initialize, next, value_spec, encoders=(),  # pylint: disable=redefined-builtin
               client_state_initializer=None, name='process'):
    initialize, _ = process_lib.initialize_and_next(
        initialize, next, name, naming.user_location())
    self.initialize = initialize
    self.next = next
    self.value_spec = value_spec
    self.encoders = tuple(encoders)
    self.client_state_initializer = client_state_initializer
    self.name = name

  @property
  def state_spec(self):
    return self.initialize.result_spec

  @property
  def has_client_state(self):
    return self.client_state_initializer is not None

  @property
  def encoded_bits(self):
    """Bits of one encoded value (all tensors), or None if unencoded."""
    if not self.encoders:
      return None
    return sum(encoder.encoded_bits for encoder in self.encoders)

  def __repr__(self):
    return f'<MeasuredProcess {self.name}>'


class Treatment:
  """What a process does to one tensor of its value, when that is not a
  `te` encoder (secure or private aggregation): a description and the bits
  one client sends for it."""

  def __init__(self, spec, bits_per_value, description):
    self.spec = spec
    self.bits_per_value = bits_per_value
    self.description = description

  @property
  def encoded_bits(self):
    return self.spec.shape.num_elements() * self.bits_per_value

  def __repr__(self):
    return self.description


def treatments(value_spec, bits_per_value, description):
  """One `Treatment` per tensor of `value_spec`: what a secure or private
  process's `encoders` are."""
  return tuple(Treatment(spec, bits_per_value, description)
               for spec in tf.nest.flatten(value_spec))


def encoders_of(process):
  """The per-tensor encoders (or `Treatment`s) a process applies: its
  `encoders`, set by the factory that made it; () if it sets none."""
  return tuple(getattr(process, 'encoders', ()))


def with_encoders_of(inner, process):
  """`process`, a wrapper of `inner` (a mean around a sum, a clip around a
  mean), given `inner`'s encoders: they are what its values go through."""
  if encoders_of(inner):
    process.encoders = encoders_of(inner)
  return process


def describe_encoders(role, value_spec, encoders):
  """`{'ROLE[i] DTYPE[SHAPE]': encoder description}` for the tensors of
  `value_spec` and their encoders, as forms keep them (`form.encoders`)."""
  return {f'{role}[{index}] {spec.dtype.name}{spec.shape.as_list()}':
              repr(encoder)
          for index, (spec, encoder) in enumerate(
              zip(tf.nest.flatten(value_spec), encoders))}
