"""Compile time and piece sizes: federated averaging with 8-bit encoded broadcast and mean.

The model is the compression tutorial's CNN (two 5x5 convolutions of 32 and 64
filters, dense 512, 10 outputs: 1,663,370 parameters). Encoders follow the
tutorial: `uniform_quantization(bits=8)` for variables of more than 10,000
elements, identity for the rest.

Reported:
  build_seconds    building the process (model, encoders, federated computations)
  compile_seconds  `canonical.compile(process)`: trace, check, partition, and emit
                   the eight pieces (every piece traced by TensorFlow)
  baseline_seconds tracing one plain `client_update` tf.function of the same model:
                   the cost of tracing the model once, which compiling cannot avoid
  compile_ratio    compile_seconds / baseline_seconds
  piece_bytes      serialized GraphDef size of each piece
  form_bytes       size of the form file `canonical.save` writes
  load_seconds     `canonical.load` of that file (parse, check, import every piece)

Usage (from the repository root):
  python -m benchmarks.compile [--repeats N] [--json PATH]
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import tensorflow as tf

import canonical
from canonical import learning
from canonical.learning import algorithms
from canonical.learning import framework
import encoders as te

TARGET_SECONDS = 1.0
LOAD_TARGET_SECONDS = 1.0


def encoder_fn(kind):
  """The tutorial's encoder_fn: 8 bits for large variables, identity otherwise."""
  wrap = (te.encoders.as_simple_encoder if kind == 'broadcast' else
          te.encoders.as_gather_encoder)

  def build(spec):
    if spec.shape.num_elements() > 10000:
      return wrap(te.encoders.uniform_quantization(bits=8), spec)
    return wrap(te.encoders.identity(), spec)

  return build


def build_process(model):
  return algorithms.build_federated_averaging_process(
      model,
      client_optimizer_fn=lambda: learning.sgd(0.02),
      server_optimizer_fn=lambda: learning.sgd(1.0),
      broadcast_process=framework.build_encoded_broadcast_process_from_model(
          model, encoder_fn('broadcast')),
      aggregation_process=framework.build_encoded_mean_process_from_model(
          model, encoder_fn('mean')))


def trace_client_update_seconds(model):
  """Baseline: trace the plain client update of the same model once."""
  weights_spec = tf.nest.map_structure(lambda s: s, model.weights_spec)
  data_spec = tf.data.DatasetSpec(model.batch_spec)
  optimizer = learning.sgd(0.02)

  def client_update(weights, dataset):
    return learning.client_update(model, optimizer, weights, dataset)

  start = time.perf_counter()
  tf.function(client_update, input_signature=[weights_spec, data_spec],
              autograph=False).get_concrete_function()
  return time.perf_counter() - start


def measure_once():
  start = time.perf_counter()
  model = learning.KerasFunctionalModel.from_keras(learning.models.cnn_28x28)
  process = build_process(model)
  build_seconds = time.perf_counter() - start
  start = time.perf_counter()
  form = canonical.compile(process)
  compile_seconds = time.perf_counter() - start
  return model, form, build_seconds, compile_seconds


def measure_load(form, repeats):
  """(form file bytes, median seconds of canonical.load) for `form`."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'form.pb')
    canonical.save(form, path)
    canonical.load(path)  # Warm up: the loader's one-time TF initialization.
    seconds = []
    for _ in range(repeats):
      start = time.perf_counter()
      canonical.load(path)
      seconds.append(time.perf_counter() - start)
    return os.path.getsize(path), statistics.median(seconds)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--json', help='write the result here')
  args = parser.parse_args(argv)

  measure_once()  # Warm up: imports, Keras and TF one-time initialization.
  builds, compiles, baselines = [], [], []
  for _ in range(args.repeats):
    model, form, build_seconds, compile_seconds = measure_once()
    builds.append(build_seconds)
    compiles.append(compile_seconds)
    baselines.append(trace_client_update_seconds(model))
  params = sum(s.shape.num_elements()
               for s in tf.nest.flatten(model.weights_spec))
  piece_bytes = {
      name: len(piece.concrete_function.graph.as_graph_def()
                .SerializeToString())
      for name, piece in form.pieces.items()
  }
  form_bytes, load_seconds = measure_load(form, args.repeats)
  result = {
      'model': 'cnn_28x28',
      'params': params,
      'build_seconds': statistics.median(builds),
      'compile_seconds': statistics.median(compiles),
      'baseline_seconds': statistics.median(baselines),
      'compile_ratio': statistics.median(compiles) / statistics.median(
          baselines),
      'target_seconds': TARGET_SECONDS,
      'broadcast_bits': form.broadcast_bits,
      'aggregated_bits': form.aggregated_bits,
      'piece_bytes': piece_bytes,
      'form_bytes': form_bytes,
      'load_seconds': load_seconds,
      'load_target_seconds': LOAD_TARGET_SECONDS,
  }
  print(f'federated averaging, 8-bit encoded broadcast and mean, '
        f'{params:,} parameters (median of {args.repeats})')
  print(f'  build the process      {result["build_seconds"]:.3f} s')
  print(f'  compile                {result["compile_seconds"]:.3f} s '
        f'(target < {TARGET_SECONDS} s: '
        f'{"ok" if result["compile_seconds"] < TARGET_SECONDS else "MISS"})')
  print(f'  trace client_update    {result["baseline_seconds"]:.3f} s '
        f'(compile is {result["compile_ratio"]:.2f}x this)')
  print(f'  load the saved form    {load_seconds:.3f} s '
        f'(target < {LOAD_TARGET_SECONDS} s: '
        f'{"ok" if load_seconds < LOAD_TARGET_SECONDS else "MISS"}), '
        f'{form_bytes:,} bytes on disk')
  print(f'  C per client           {form.broadcast_bits:,} bits')
  print(f'  U per client           {form.aggregated_bits:,} bits')
  print('  piece         GraphDef bytes')
  for name, size in piece_bytes.items():
    print(f'  {name:<13} {size:>14,}')
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(result, f, indent=2)
    print(f'wrote {args.json}')
  return result


if __name__ == '__main__':
  main()
