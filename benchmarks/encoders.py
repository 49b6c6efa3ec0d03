"""Throughput, wire bits and error of our encoders, side by side with tensor_encoding.

For each encoder and size, one `tf.function` computes `decode(encode(x, state)[0])`
on a `SimpleEncoder`; both libraries go through this same code. Reported per row:

  mbps            input megabytes (1e6 bytes of float32) encoded+decoded per second
  bits_per_coord  bits of every tensor in the encoded dict (dtype size * elements) / n
  rel_err         ||x - decode(encode(x))|| / ||x||
  copy_ratio      our encode+decode time / the time numpy takes to copy the same input
                  (`x.copy()`): how many memory copies our round trip costs
  te_*            the same for tensor_encoding's own encoder, where it has one
  speedup         te time / our time (= mbps / te_mbps)

Timing traces and warms up first, then takes the median of several samples; each sample
repeats the call until it lasts long enough to time. Our samples and tensor_encoding's
alternate, so a slow spell of a shared machine hits both libraries alike: on such
machines the ratios mean more than the absolute numbers.

Usage (from the repository root):
  python benchmarks/encoders.py [--quick] [--sizes 1e4,1e6] [--repeats N]
      [--library auto|ours|tensor_encoding|both] [--encoders uniform_8bit,...]
      [--json PATH]
"""

import argparse
import importlib
import importlib.util
import json
import logging
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
# `python benchmarks/encoders.py` puts this folder first on sys.path, where this very
# file would shadow the `encoders` package it measures.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
if _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

TE_PACKAGE = 'tensorflow_model_optimization'
TE_MODULE = TE_PACKAGE + '.python.core.internal.tensor_encoding'

# name -> (factory in `<library>.encoders`, its arguments). tensor_encoding has only
# identity, uniform_quantization and hadamard_quantization; a library without a factory
# leaves its columns empty.
ENCODERS = {
    'identity': ('identity', ()),
    'uniform_8bit': ('uniform_quantization', (8,)),
    'uniform_2bit': ('uniform_quantization', (2,)),
    'hadamard_2bit': ('hadamard_quantization', (2,)),
    'top_k_1pct': ('top_k', (0.01,)),
    'sign': ('sign', ()),
    'drive': ('drive', ()),
}

# Our throughput must be at least this many times tensor_encoding's, at these sizes.
TARGET_SPEEDUPS = {'uniform_8bit': 5.0, 'hadamard_2bit': 10.0}
TARGET_MIN_SIZE = 10**6

FULL_SIZES = (10**4, 10**6, 10**7)
QUICK_SIZES = (10**4, 10**6)
FULL_REPEATS = 5
QUICK_REPEATS = 3
# A sample repeats the call until it lasts this long, so small sizes time reliably.
MIN_SAMPLE_SECONDS = 0.05
# Past this much timing per measurement, stop at the minimum number of samples.
BUDGET_SECONDS = 10.0
MIN_SAMPLES = 3

LIBRARY_CHOICES = ('auto', 'ours', 'tensor_encoding', 'both')


def load_tensor_encoding():
  """Returns `(tensor_encoding module, None)`, or `(None, why it is unavailable)`."""
  if importlib.util.find_spec(TE_PACKAGE) is None:
    return None, ('tensorflow-model-optimization is not installed '
                  "(pip install -e '.[bench]'); tensor_encoding columns are empty")
  stubbed = False
  try:
    if TE_PACKAGE not in sys.modules:
      # The top-level __init__ of tensorflow_model_optimization imports the Keras
      # pruning/quantization APIs (through tf_keras, with Keras 3 installed beside it)
      # and `distutils` (gone in Python 3.12); tensor_encoding needs none of that. A
      # package object made from the spec, never executed, has the right search path,
      # so the tensor_encoding subpackage imports without running that __init__.
      package = importlib.util.module_from_spec(importlib.util.find_spec(TE_PACKAGE))
      sys.modules[TE_PACKAGE] = package
      stubbed = True
    return importlib.import_module(TE_MODULE), None
  except Exception as e:  # pylint: disable=broad-except
    if stubbed:
      for name in [m for m in sys.modules if m.split('.')[0] == TE_PACKAGE]:
        del sys.modules[name]
    return None, (f'tensor_encoding could not be imported ({type(e).__name__}: {e}); '
                  'tensor_encoding columns are empty')


def load_ours():
  """Returns `(our encoders module, None)`, or `(None, why it is unavailable)`."""
  try:
    ours = importlib.import_module('encoders')
    importlib.import_module('encoders.encoders')
    importlib.import_module('encoders.core')
  except Exception as e:  # pylint: disable=broad-except
    return None, f'our encoders could not be imported ({type(e).__name__}: {e})'
  return ours, None


def parse_sizes(text):
  """'1e4,1e6' -> (10000, 1000000)."""
  sizes = []
  for part in text.split(','):
    value = float(part)
    if value < 1 or value != int(value):
      raise ValueError(f'sizes must be positive integers, got {part!r}')
    sizes.append(int(value))
  return tuple(sizes)


def wire_bits(encoded):
  """Bits on the wire: every tensor in the encoded dict, by its dtype and size."""
  return sum(t.dtype.size * 8 * int(tf.size(t)) for t in tf.nest.flatten(encoded))


def make_round_trip(simple_encoder):
  """One traced function: the encoded dict and its decoding."""

  @tf.function
  def round_trip(x, state):
    encoded, _ = simple_encoder.encode(x, state)
    return simple_encoder.decode(encoded), encoded

  return round_trip


def calls_per_sample(fn):
  """How many calls of a warm `fn` make one sample last MIN_SAMPLE_SECONDS."""
  start = time.perf_counter()
  fn()
  first = time.perf_counter() - start
  return max(1, min(1000, int(np.ceil(MIN_SAMPLE_SECONDS / max(first, 1e-9)))))


def interleaved_median_seconds(fns, repeats):
  """Median seconds of one call of each warm function, their samples alternating.

  Sample i of every function is taken before sample i + 1 of any, so machine
  noise that lasts longer than a sample falls on all of them.
  """
  counts = [calls_per_sample(fn) for fn in fns]
  samples = [[] for _ in fns]
  spent = 0.0
  while len(samples[0]) < repeats:
    for fn, calls, own in zip(fns, counts, samples):
      start = time.perf_counter()
      for _ in range(calls):
        fn()
      elapsed = time.perf_counter() - start
      own.append(elapsed / calls)
      spent += elapsed
    if len(samples[0]) >= MIN_SAMPLES and spent > BUDGET_SECONDS * len(fns):
      break
  return [statistics.median(own) for own in samples]


def median_seconds(fn, repeats):
  """Median seconds of one `fn()` call; `fn` must already be warm."""
  return interleaved_median_seconds([fn], repeats)[0]


def numpy_copy_seconds(x, repeats):
  """The memory-bound floor: one plain copy of the input."""
  x.copy()
  return median_seconds(x.copy, repeats)


def prepare(lib, encoder_name, x):
  """Traces one library's round trip on `x` (float32 numpy).

  Returns `(call, accuracy)`: `call()` runs the warm round trip once, `accuracy`
  holds bits per coordinate and relative error.
  """
  factory, factory_args = ENCODERS[encoder_name]
  encoder = getattr(lib.encoders, factory)(*factory_args)
  simple = lib.encoders.as_simple_encoder(
      encoder, tf.TensorSpec(x.shape, tf.float32))
  round_trip = make_round_trip(simple)
  x_tensor = tf.constant(x)
  state = simple.initial_state()
  decoded, encoded = round_trip(x_tensor, state)  # Traces.
  round_trip(x_tensor, state)
  decoded = np.asarray(decoded, dtype=np.float64)
  reference = x.astype(np.float64)
  norm = np.linalg.norm(reference)
  error = np.linalg.norm(reference - decoded)
  accuracy = {
      'bits_per_coord': wire_bits(encoded) / x.size,
      'rel_err': float(error / norm) if norm > 0 else float(error),
  }
  return (lambda: round_trip(x_tensor, state)), accuracy


def measure(libs, encoder_name, x, repeats):
  """Times each library's encoder on `x`, their samples interleaved.

  Returns one dict per library: seconds, mbps, bits_per_coord, rel_err.
  """
  prepared = [prepare(lib, encoder_name, x) for lib in libs]
  seconds = interleaved_median_seconds([call for call, _ in prepared], repeats)
  return [{'seconds': s, 'mbps': x.nbytes / 1e6 / s, **accuracy}
          for s, (_, accuracy) in zip(seconds, prepared)]


def benchmark_input(n, seed=0):
  """A float32 normal vector: the same input for every library and encoder."""
  return np.random.default_rng(seed).standard_normal(n, dtype=np.float32)


def has_encoder(lib, encoder_name):
  return lib is not None and hasattr(lib.encoders, ENCODERS[encoder_name][0])


def run(sizes, repeats, encoder_names, ours, tensor_encoding, log=print):
  """Returns one row per (encoder, size) that either library can encode.

  `ours` or `tensor_encoding` may be None; their columns are then None.
  """
  rows = []
  for n in sizes:
    x = benchmark_input(n)
    copy_seconds = numpy_copy_seconds(x, repeats)
    for name in encoder_names:
      run_ours = has_encoder(ours, name)
      run_te = has_encoder(tensor_encoding, name)
      if not (run_ours or run_te):
        continue
      row = {
          'encoder': name, 'n': n, 'mbps': None, 'bits_per_coord': None,
          'rel_err': None, 'seconds': None, 'copy_ratio': None,
          'copy_mbps': x.nbytes / 1e6 / copy_seconds,
          'te_mbps': None, 'te_bits_per_coord': None, 'te_rel_err': None,
          'te_seconds': None, 'speedup': None,
          'target_speedup': (TARGET_SPEEDUPS.get(name)
                             if n >= TARGET_MIN_SIZE else None),
      }
      libs = [lib for lib, runs in ((ours, run_ours), (tensor_encoding, run_te))
              if runs]
      results = measure(libs, name, x, repeats)
      if run_ours:
        result = results.pop(0)
        row.update(result)
        row['copy_ratio'] = result['seconds'] / copy_seconds
      if run_te:
        row.update({'te_' + key: value for key, value in results.pop(0).items()})
      if run_ours and run_te:
        row['speedup'] = row['te_seconds'] / row['seconds']
      rows.append(row)
      log(format_row(row))
  return rows


_COLUMNS = (
    # header, row key, width, format of a present value
    ('encoder', 'encoder', 14, '{:<14}'),
    ('n', 'n', 9, '{:>9}'),
    ('MB/s', 'mbps', 9, '{:>9.1f}'),
    ('bits', 'bits_per_coord', 7, '{:>7.3f}'),
    ('rel_err', 'rel_err', 9, '{:>9.2e}'),
    ('x copy', 'copy_ratio', 7, '{:>7.1f}'),
    ('te MB/s', 'te_mbps', 9, '{:>9.1f}'),
    ('te bits', 'te_bits_per_coord', 7, '{:>7.3f}'),
    ('te err', 'te_rel_err', 9, '{:>9.2e}'),
    ('ours/te', 'speedup', 8, '{:>8.1f}'),
    ('target', 'target', 6, '{:>6}'),
)


def format_header():
  return ' '.join(header.rjust(width) if key != 'encoder' else header.ljust(width)
                  for header, key, width, _ in _COLUMNS)


def format_row(row):
  """One table line; empty cells where a library did not run."""
  cells = []
  for _, key, width, fmt in _COLUMNS:
    value = _target_verdict(row) if key == 'target' else row[key]
    cells.append(' ' * width if value is None else fmt.format(value))
  return ' '.join(cells)


def _target_verdict(row):
  """'ok'/'MISS' against the speedup target, or None where no target applies."""
  if row['target_speedup'] is None or row['speedup'] is None:
    return None
  return 'ok' if row['speedup'] >= row['target_speedup'] else 'MISS'


def _choose_libraries(choice):
  """Loads the libraries `choice` asks for; returns `(ours, te, notes)`."""
  notes = []
  ours = tensor_encoding = None
  if choice in ('auto', 'ours', 'both'):
    ours, note = load_ours()
    if note:
      if choice != 'auto':
        raise SystemExit(note)
      notes.append(note)
  if choice in ('auto', 'tensor_encoding', 'both'):
    tensor_encoding, note = load_tensor_encoding()
    if note:
      if choice == 'tensor_encoding':
        raise SystemExit(note)
      notes.append(note)
  if ours is None and tensor_encoding is None:
    raise SystemExit('neither library could be loaded: ' + '; '.join(notes))
  return ours, tensor_encoding, notes


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='sizes 1e4 and 1e6 and fewer repeats')
  parser.add_argument('--sizes', type=parse_sizes,
                      help='comma-separated element counts, e.g. 1e4,1e6')
  parser.add_argument('--repeats', type=int,
                      help='timed samples per measurement (median is reported)')
  parser.add_argument('--library', choices=LIBRARY_CHOICES, default='auto',
                      help='auto: ours, plus tensor_encoding where it imports')
  parser.add_argument('--encoders', default=','.join(ENCODERS),
                      help='comma-separated subset of: ' + ', '.join(ENCODERS))
  parser.add_argument('--json', metavar='PATH', help='write the rows here')
  args = parser.parse_args(argv)
  args.encoders = tuple(args.encoders.split(','))
  unknown = [name for name in args.encoders if name not in ENCODERS]
  if unknown:
    parser.error(f'unknown encoders {unknown}; known: {list(ENCODERS)}')
  if args.sizes is None:
    args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
  if args.repeats is None:
    args.repeats = QUICK_REPEATS if args.quick else FULL_REPEATS
  if args.repeats < 1:
    parser.error('--repeats must be at least 1')
  return args


class _DropMessages(logging.Filter):
  """Drops log records containing any of `fragments`."""

  def __init__(self, fragments):
    super().__init__()
    self._fragments = fragments

  def filter(self, record):
    message = record.getMessage()
    return not any(fragment in message for fragment in self._fragments)


# tensor_encoding warns about bitpacking memory on every trace; once is plenty.
_REPEATED_TE_WARNINGS = ('b/161433177',)


def main(argv=None):
  args = parse_args(argv)
  logging.getLogger().addFilter(_DropMessages(_REPEATED_TE_WARNINGS))
  ours, tensor_encoding, notes = _choose_libraries(args.library)
  for lib, label in ((ours, 'our encoders'), (tensor_encoding, 'tensor_encoding')):
    missing = [name for name in args.encoders if lib and not has_encoder(lib, name)]
    if missing:
      notes.append(f'{label} has no {", ".join(missing)}: those columns are empty')
  for note in notes:
    print('note:', note)
  targets = ', '.join(f'{name} >= {speedup:g}x' for name, speedup in TARGET_SPEEDUPS.items())
  print(f'float32 input, median of up to {args.repeats} samples, ours and te '
        f'alternating. "x copy": our time / '
        f'numpy copy time. "ours/te": te time / our time; target at n >= '
        f'{TARGET_MIN_SIZE:.0e}: {targets}.')
  print(format_header())
  rows = run(args.sizes, args.repeats, args.encoders, ours, tensor_encoding)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(rows, f, indent=1)
    print('wrote', args.json)
  return rows


if __name__ == '__main__':
  main()
