"""Many clients' work and accumulate in one TensorFlow call: `BatchedWork`.

A small client's work costs ~0.3 ms of TensorFlow's compute but ~1 ms a
call from Python, and its accumulate another call. When work takes its
dataset unrolled (`Piece.unrolled`), a batch of clients goes in as one set of
tensors (their elements, concatenated) and a `tf.while_loop` runs, for each
client in order, work on its slice of them, then accumulate of its U: the
same pieces on the same values in the same order as one call per client, so
the same accumulator bit for bit. A client whose U fails the non-finite
policy is skipped in the loop, as the runner drops it; anything else that
goes wrong fails the whole call, and the caller runs those clients one by
one to find which.

It serves plain rounds of forms whose clients keep nothing (no client state,
no per-client outputs, no secure sums), whose client data is a dataset and
whose U has a fixed shape (so its bits are known without looking).
"""

import weakref

import numpy as np
import tensorflow as tf

from canonical.core import unrolled_datasets
from canonical import errors


# Per form and non-finite policy: traced once per process.
_BUILT = weakref.WeakKeyDictionary()


class BatchedWork:
  """`(accumulator, broadcast, clients' element lists) -> (accumulator, ok)`
  over one batch of clients; build it with `of`."""

  def __init__(self, form, non_finite):
    self._form = form
    self._non_finite = non_finite
    self._element_spec = form.client_data_spec.element_spec
    self._update_specs = tf.nest.flatten(form.client_update_spec)
    self._bits = sum(s.shape.num_elements() * s.dtype.size * 8
                     for s in self._update_specs)
    self._function = None

  @classmethod
  def of(cls, form, non_finite='keep'):
    """A BatchedWork for `form`, or None where it cannot serve it.
    `non_finite`: 'keep', 'drop' (NaN or +-Inf) or 'drop_nan' (see the
    runner's NON_FINITE_POLICIES)."""
    if (form.has_client_state or form.has_client_outputs or
        form.has_secure_sums or
        not isinstance(form.client_data_spec, tf.data.DatasetSpec)):
      return None
    if not all(s.shape.is_fully_defined() and s.dtype != tf.string
               for s in tf.nest.flatten(form.client_update_spec)):
      return None
    if form.work.unrolled() is None:
      return None
    built = _BUILT.setdefault(form, {})
    if non_finite not in built:
      built[non_finite] = cls(form, non_finite)
    return built[non_finite]

  @property
  def bits_per_client(self):
    """The bits of one client's U (fixed by its spec)."""
    return self._bits

  def __call__(self, accumulator, broadcast, clients):
    """Runs work and accumulate for each client of `clients` (lists of
    elements, or `unrolled_datasets.Encoded`) from `accumulator` (None: zero): the new accumulator (None if
    no client passed) and a bool array, per client, of which passed the
    non-finite policy."""
    if not clients:
      return accumulator, np.zeros([0], bool)
    form = self._form
    start = form.zero() if accumulator is None else accumulator
    try:
      encoded = _encode_clients(self._element_spec, clients)
    except ValueError as e:  # 'client K: element I: ...'
      raise errors.InvalidTypeError(
          f'Piece {form.work.name!r} {form.work.input_signature()}: '
          f'{e}.') from None
    flat = self._traced(start, broadcast, encoded)(
        *tf.nest.flatten(start), *tf.nest.flatten(broadcast), *encoded)
    flat_accumulator, ok = flat[:-1], flat[-1].numpy()
    if accumulator is None and not ok.any():
      return None, ok
    return tf.nest.pack_sequence_as(form.accumulator_spec,
                                    list(flat_accumulator)), ok

  def _traced(self, accumulator, broadcast, encoded):
    if self._function is None:
      self._function = self._trace(accumulator, broadcast, encoded)
    return self._function

  def _trace(self, accumulator, broadcast, encoded):
    form = self._form
    work = form.work.unrolled()
    accumulate = form.accumulate.unrolled()  # No datasets: its flat function.
    accumulator_specs = [tf.TensorSpec(t.shape, t.dtype)
                         for t in tf.nest.flatten(accumulator)]
    broadcast_specs = [tf.TensorSpec(t.shape, t.dtype)
                       for t in tf.nest.flatten(broadcast)]
    element_specs = unrolled_datasets.encoding_specs(self._element_spec)
    encoded_specs = [tf.TensorSpec([None], tf.int64)] + element_specs
    num_updates = len(self._update_specs)
    check = _CHECKS[self._non_finite]
    sizes = [len(accumulator_specs), len(broadcast_specs)]

    def run(*args):
      accumulator = list(args[:sizes[0]])
      broadcast = list(args[sizes[0]:sum(sizes)])
      bounds, encoded = args[sum(sizes)], args[sum(sizes) + 1:]
      count = tf.shape(bounds, out_type=tf.int64)[0] - 1
      oks = tf.TensorArray(tf.bool, size=tf.cast(count, tf.int32))

      def body(k, oks, *accumulator):
        data = _client_slice(self._element_spec, encoded, bounds[k],
                             bounds[k + 1])
        update = list(work(*data, *broadcast))[:num_updates]
        ok = check(update)
        new = tf.cond(ok, lambda: list(accumulate(*accumulator, *update)),
                      lambda: list(accumulator))
        return [k + 1, oks.write(tf.cast(k, tf.int32), ok)] + list(new)

      result = tf.while_loop(
          lambda k, *_: k < count, body,
          [tf.constant(0, tf.int64), oks] + accumulator,
          parallel_iterations=1)
      return list(result[2:]) + [result[1].stack()]

    return tf.function(run, input_signature=(
        accumulator_specs + broadcast_specs + encoded_specs),
                       autograph=False).get_concrete_function()


def _all_finite(update):
  checks = [tf.reduce_all(tf.math.is_finite(tf.math.real(u)) &
                          tf.math.is_finite(tf.math.imag(u)))
            if u.dtype.is_complex else tf.reduce_all(tf.math.is_finite(u))
            for u in update if u.dtype.is_floating or u.dtype.is_complex]
  return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def _no_nan(update):
  checks = [tf.logical_not(tf.reduce_any(tf.math.is_nan(tf.math.real(u)) |
                                         tf.math.is_nan(tf.math.imag(u))))
            if u.dtype.is_complex else
            tf.logical_not(tf.reduce_any(tf.math.is_nan(u)))
            for u in update if u.dtype.is_floating or u.dtype.is_complex]
  return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


_CHECKS = {'keep': lambda update: tf.constant(True), 'drop': _all_finite,
           'drop_nan': _no_nan}


def _encode_clients(element_spec, clients):
  """The clients' elements (lists, or `unrolled_datasets.Encoded`) encoded
  as one dataset's, after the element bounds of each client ([K + 1],
  int64)."""
  bounds = np.zeros(len(clients) + 1, np.int64)
  np.cumsum([len(c) for c in clients], out=bounds[1:])
  return [bounds] + unrolled_datasets.concatenate(element_spec, clients)


def _client_slice(element_spec, encoded, first, end):
  """One client's encoded elements (numbers first..end-1) of all the
  clients' encoding."""
  sliced, position = [], 0
  for spec in tf.nest.flatten(element_spec):
    if spec.shape.rank == 0:
      sliced.append(encoded[position][first:end])
      position += 1
      continue
    values, splits = encoded[position], encoded[position + 1]
    position += 2
    own = splits[first:end + 1]
    sliced.extend([values[own[0]:own[-1]], own - own[0]])
  return sliced
