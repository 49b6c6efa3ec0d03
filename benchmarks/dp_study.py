"""Accuracy against epsilon: DP-FedAvg, DP-FTRL (tree and banded matrix
factorization) and distributed DP on Fashion-MNIST, at the same rounds and
clients per round.

Every run trains the same linear softmax model (7,850 parameters) with TFF's
`build_unweighted_fed_avg` (client SGD, server SGD with momentum 0.9, as
DP-FTRL is run) whose model aggregator is the mechanism's, each at
`--noise` multipliers, from the same initial model and client partition:

| mechanism           | aggregator                                    | sampling |
| gaussian            | DifferentiallyPrivateFactory.gaussian_fixed   | Poisson  |
| tree                | DifferentiallyPrivateFactory.tree_aggregation | cyclic   |
| banded              | BandedMatrixFactorizationFactory (bands =     | cyclic   |
|                     | the cycle's groups, fitted to --rounds)       |          |
| distributed_skellam | UnweightedMeanFactory of DistributedDpSumFactory | Poisson |
|                     | (the masking protocol sums the noised values) |          |

Poisson runs sample each client with q = clients-per-round / clients; cyclic
runs cut the clients into clients // clients-per-round groups taken in turn.
Epsilon (at `--delta`) is what `beam_runner.run` would report for that
form's releases and sampling after `--rounds` (`canonical.privacy.spending`):
subsampling amplifies only DP-FedAvg's Gaussian rounds; correlated noise and
distributed DP are accounted without it. Also one run without noise (the
same clip): the accuracy the noise costs. Accuracy is the final server
model's on the 10,000 test images, one seed.

    python -m benchmarks.dp_study [--quick] [--json PATH] [--plot PATH]
"""

import argparse
import json
import math
import os
import time

import numpy as np
import tensorflow as tf

import canonical as tff
from canonical import aggregators
from canonical.privacy import spending
from canonical.simulation import sampling as sampling_lib
from pipelines import datasets
from pipelines import partition as partition_lib
from pipelines.fedavg_process import make_evaluator

MECHANISMS = ('gaussian', 'tree', 'banded', 'distributed_skellam')
_SAMPLING = {'gaussian': 'poisson', 'tree': 'cyclic', 'banded': 'cyclic',
             'distributed_skellam': 'poisson'}


def _model():
  keras = tf.keras

  def build():
    return keras.Sequential([keras.Input(shape=(28, 28, 1)),
                             keras.layers.Flatten(),
                             keras.layers.Dense(10)], name='linear_28x28')

  return tff.learning.KerasFunctionalModel.from_keras(build, seed=0)


def _factory(mechanism, z, args, model):
  k, clip = args.clients_per_round, args.clip
  seed = 1234
  dp = aggregators.DifferentiallyPrivateFactory
  if mechanism == 'gaussian':
    return dp.gaussian_fixed(z, k, clip, seed=seed)
  if mechanism == 'tree':
    return dp.tree_aggregation(z, k, clip, model.weights_spec.trainable,
                               noise_seed=seed)
  if mechanism == 'banded':
    groups = sampling_lib.cyclic_groups(args.clients, k)
    return aggregators.BandedMatrixFactorizationFactory(
        z, k, clip, min(groups, args.rounds), args.rounds, noise_seed=seed)
  return aggregators.UnweightedMeanFactory(
      value_sum_factory=aggregators.DistributedDpSumFactory(
          z, k, args.ddp_bits, clip, mechanism=mechanism,
          rotation_type='hd'),
      count_sum_factory=aggregators.SecureSumFactory(1, 0))


def _clients(data, args):
  parts = partition_lib.partition(data.train_y, args.clients, 'iid', seed=0)
  return [tf.data.Dataset.from_tensor_slices(
      (data.train_x[p], data.train_y[p])).batch(args.batch_size)
          for p in parts]


def run_one(mechanism, z, args, data, clients):
  """One training run: its accuracy, epsilon and seconds."""
  model = _model()
  factory = _factory(mechanism, z, args, model)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model, client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          args.client_lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          args.server_lr, momentum=0.9),
      model_aggregator=factory)
  form = tff.compile(process)
  sampling = _SAMPLING[mechanism]
  ids = list(range(args.clients))
  state, start = process.initialize(), time.perf_counter()
  for round_number in range(args.rounds):
    chosen = sampling_lib.sample_clients(ids, args.clients_per_round, 0,
                                         round_number, sampling)
    state = process.next(state, [clients[i] for i in chosen]).state
  seconds = time.perf_counter() - start
  weights = state.global_model_weights
  evaluate = make_evaluator(model, data.test_x, data.test_y)
  accuracy = evaluate(((tuple(weights.trainable),
                        tuple(weights.non_trainable)),))['accuracy']
  spent = spending.spent(
      form.privacy_releases, sampling=sampling,
      clients_per_round=args.clients_per_round, population=args.clients,
      rounds=args.rounds, delta=args.delta)
  return {'mechanism': mechanism, 'noise_multiplier': z,
          'sampling': sampling, 'accuracy': accuracy,
          'epsilon': spent['epsilon'], 'delta': args.delta,
          'releases': [r.describe() for r in form.privacy_releases],
          'seconds': seconds}


def table(rows, args):
  lines = [f'{args.rounds} rounds, {args.clients_per_round} of '
           f'{args.clients} clients a round (IID, '
           f'{60000 // args.clients} examples each), clip {args.clip:g}, '
           f'delta {args.delta:g}.', '',
           '| mechanism | sampling | noise multiplier | epsilon | test '
           'accuracy | seconds |', '|---|---|---|---|---|---|']
  for r in rows:
    epsilon = ('inf' if math.isinf(r['epsilon'])
               else f'{r["epsilon"]:.3g}')
    lines.append(f'| {r["mechanism"]} | {r["sampling"]} | '
                 f'{r["noise_multiplier"]:g} | {epsilon} | '
                 f'{r["accuracy"]:.4f} | {r["seconds"]:.0f} |')
  return '\n'.join(lines)


def plot(rows, path, args):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  figure, axes = pyplot.subplots(figsize=(7, 4.5))
  for mechanism in MECHANISMS:
    points = sorted((r['epsilon'], r['accuracy']) for r in rows
                    if r['mechanism'] == mechanism and r['noise_multiplier']
                    and math.isfinite(r['epsilon']))
    if points:
      axes.plot(*zip(*points), marker='o', label=mechanism)
  for r in rows:
    if not r['noise_multiplier']:
      axes.axhline(r['accuracy'], color='gray', linestyle='--',
                   label='no noise (same clip)')
      break
  axes.set_xscale('log')
  axes.set_xlabel(f'epsilon at delta {args.delta:g}')
  axes.set_ylabel('test accuracy')
  axes.set_title(f'Fashion-MNIST, linear model: {args.rounds} rounds, '
                 f'{args.clients_per_round} of {args.clients} clients a round')
  axes.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=120)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=50)
  parser.add_argument('--clients', type=int, default=1000)
  parser.add_argument('--clients-per-round', type=int, default=100)
  parser.add_argument('--noise', default='0.5,1,2,4',
                      help='noise multipliers, comma-separated')
  parser.add_argument('--mechanisms', default=','.join(MECHANISMS))
  parser.add_argument('--clip', type=float, default=0.5)
  parser.add_argument('--client-lr', type=float, default=0.1)
  parser.add_argument('--server-lr', type=float, default=1.0)
  parser.add_argument('--batch-size', type=int, default=20)
  parser.add_argument('--ddp-bits', type=int, default=20)
  parser.add_argument('--delta', type=float, default=1e-5)
  parser.add_argument('--quick', action='store_true',
                      help='5 rounds, 200 clients, 20 a round, one noise')
  parser.add_argument('--json', help='write the rows here')
  parser.add_argument('--merge', action='store_true',
                      help='keep the rows of the mechanisms not run from '
                      'the --json file already there (one mechanism rerun)')
  parser.add_argument('--plot', help='write the plot (PNG) here')
  args = parser.parse_args(argv)
  if args.quick:
    args.rounds, args.clients, args.clients_per_round = 5, 200, 20
    args.noise = '1'
  data = datasets.load('fashion_mnist')
  clients = _clients(data, args)
  rows = []
  runs = [('gaussian', 0.0)] + [
      (m, float(z)) for m in args.mechanisms.split(',')
      for z in args.noise.split(',')]
  for mechanism, z in runs:
    rows.append(run_one(mechanism, z, args, data, clients))
    r = rows[-1]
    print(f'{mechanism} z={z:g}: accuracy {r["accuracy"]:.4f}, epsilon '
          f'{r["epsilon"]:.3g}, {r["seconds"]:.0f} s', flush=True)
  if args.merge:
    with open(args.json) as f:
      kept = json.load(f)['rows']
    ran = {r['mechanism'] for r in rows} - {'gaussian'}
    rows = [r for r in kept if r['mechanism'] not in ran] + [
        r for r in rows if r['mechanism'] in ran]
    args.mechanisms = ','.join(dict.fromkeys(r['mechanism'] for r in rows))
  text = table(rows, args)
  print(text)
  if args.json:
    os.makedirs(os.path.dirname(args.json) or '.', exist_ok=True)
    with open(args.json, 'w') as f:
      json.dump({'args': vars(args), 'rows': rows}, f, indent=2)
    print(f'wrote {args.json}')
  if args.plot:
    plot(rows, args.plot, args)
    print(f'wrote {args.plot}')


if __name__ == '__main__':
  main()
