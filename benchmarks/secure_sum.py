"""The secure sum's cost against the plain sum, per round, on the Beam runner.

One round of a process whose clients each send an int32 vector of
`--elements` values, summed either by `federated_sum` (plain) or by
`federated_secure_sum_bitwidth(value, 16)` (the masking protocol's stages,
see beam_runner/secure/round.py), on Beam's in-process runner, at each
`--clients` count and each mask graph of `--neighbors`: `all` (every client
masks with every other, Bonawitz et al.), `auto` (SecAgg+ ring of the k that
`canonical.secagg.graph.neighbors_for` picks: rounds fail below 1e-6 at 5%
dropouts) or a number k. The complete graph is quadratic: it runs up to
`--largest-complete` clients only. Each measured round is a run's second
(the first makes the clients' secrets and warms the caches, as in any run
past its first round). Plain and secure rounds alternate (`--repeats` pairs),
so machine noise hits both; each figure is a median. With `--dask-workers N`
every row is measured again on a local Dask cluster of N worker processes
(started once, on 127.0.0.1, stopped at the end; the clients' data written
as TFRecord shards, as a cluster reads it).

Secure rounds run the protocol against a malicious server (the runner's
default: signed keys, a consistency check); each row also times the
semi-honest protocol (`secure_server='honest'`) in the same run.

Reported per row:
  plain_seconds, secure_seconds   one round, start to commit
  ratio                           secure / plain (target at 100 clients: 2x)
  honest_seconds                  the semi-honest protocol's round
  malicious_over_honest           secure / honest: what the active version
                                  costs
  honest_bits_sent / _received    a client's protocol messages, semi-honest
  secure_seconds_per_client       secure_seconds / clients
  masked_input_bits               a client's masked input (its U on the wire)
  protocol_bits_sent / _received  a client's key, share and unmasking
                                  messages (secagg.client_cost_bits; ids
                                  'c00042' are 48 bits)
  plain_bits                      a client's plain U
  crypto_floor_seconds            the protocol's cryptography alone for all
                                  clients, timed in the same run: each
                                  client's 2k X25519 agreements (k share-
                                  encryption keys, k mask seeds) and k+1 masks
                                  expanded and added to its input (k
                                  pairwise, one self mask); no
                                  Beam, no files, no Shamir shares
  floor_ratio                     (plain + crypto floor / workers) / plain:
                                  the ratio no implementation of this
                                  protocol with these primitives beats on
                                  that many cores
  protocol_seconds                the whole protocol for all clients in one
                                  process (secagg.secure_sum_round: keys,
                                  shares, masks, aggregation, unmasking; no
                                  Beam, no files), timed in the same run
  protocol_ratio                  (plain + protocol / workers) / plain: the
                                  ratio if running the protocol on the Beam
                                  runner cost nothing beyond the plain round

Usage (from the repository root):
  python -m benchmarks.secure_sum [--clients 10,100,1000] [--elements 1000]
      [--neighbors all,auto] [--largest-complete 100] [--repeats 3]
      [--dask-workers 0 [--only-dask]] [--json PATH]
"""

import argparse
import json
import os
import statistics
import tempfile
import time

from cryptography.hazmat.primitives.asymmetric import x25519
import numpy as np
import tensorflow as tf

import beam_runner
import canonical as cf
from canonical import secagg
from canonical.secagg import kdf
from canonical.secagg import masks
from canonical.secagg import sums as secure_sums

TARGET_RATIO = 2.0
TARGET_CLIENTS = 100
BITWIDTH = 16


def build_form(elements, secure):
  spec = tf.TensorSpec([elements], tf.int32)

  @cf.federated_computation(cf.server(tf.TensorSpec([], tf.int32)),
                            cf.clients(spec))
  def next_fn(state, data):
    total = (cf.federated_secure_sum_bitwidth(data, BITWIDTH) if secure
             else cf.federated_sum(data))
    return state, total

  return cf.compile(cf.IterativeProcess(
      cf.tf_computation(lambda: tf.constant(0)), next_fn))


class Engine:
  """Where rounds run: Beam's in-process runner on in-memory data, or a
  Dask cluster (`options`) on data written as shards under `directory`."""

  def __init__(self, name, workers=1, options=None, directory=None):
    self.name, self.workers = name, workers
    self.options, self.directory = options, directory
    self._written = {}  # Clients -> their shards' directory.

  def client_data(self, data):
    """`data` as this engine reads it (shards written once per count)."""
    if self.directory is None:
      return data
    if len(data) not in self._written:
      self._written[len(data)] = beam_runner.write_client_data(
          os.path.join(self.directory, f'clients-{len(data)}'),
          data).directory
    return self._written[len(data)]


def round_seconds(form, data, clients, engine, **secure):
  """Seconds of the second committed round of a run of all `clients`."""
  with tempfile.TemporaryDirectory(prefix='secure-sum-bench-') as out:
    out = os.path.join(out, 'run')
    quiet = lambda line: None
    beam_runner.run(form, data, 1, clients, out, progress=quiet,
                    pipeline_options=engine.options, **secure)
    start = time.perf_counter()
    beam_runner.run(form, data, 2, clients, out, progress=quiet,
                    pipeline_options=engine.options, **secure)
    return time.perf_counter() - start


def crypto_floor_seconds(clients, peers, elements, modulus):
  """Seconds of the cryptography every client of a round must do, whatever
  runs it: 2 * `peers` X25519 agreements and `peers` + 1 masks of `elements`
  values modulo `modulus` expanded and added to its input."""
  own = [x25519.X25519PrivateKey.generate() for _ in range(2)]
  peer_keys = [x25519.X25519PrivateKey.generate().public_key()
               for _ in range(2 * peers)]
  value = np.zeros(elements, np.uint64)
  start = time.perf_counter()
  for _ in range(clients):
    for i, peer in enumerate(peer_keys):
      secret = own[i % 2].exchange(peer)
    masks.add_masks(value, [kdf.derive_key(secret, 'mask', i)
                            for i in range(peers + 1)], [], modulus)
  return time.perf_counter() - start


def protocol_seconds(values, modulus, threshold, degree, round_id):
  """Seconds of `secagg.secure_sum_round` over `values`: the protocol's
  own work for a round of these clients, with no runner around it."""
  start = time.perf_counter()
  secagg.secure_sum_round(values, modulus, threshold, neighbors=degree,
                          round_id=round_id, malicious_server=True)
  return time.perf_counter() - start


def measure(clients, elements, repeats, forms, neighbors, engine):
  rng = np.random.default_rng(clients)
  values = {f'c{i:05d}': rng.integers(0, 2**BITWIDTH, elements).astype(
      np.int32) for i in range(clients)}
  data = engine.client_data(values)
  degree = secagg.graph.resolve(neighbors, clients)
  modulus = secure_sums.modulus(secure_sums.BITWIDTH, BITWIDTH, clients)
  config = secure_sums.round_config(
      (forms[True].secure_update_spec[0],), (modulus,),
      secure_sums.default_threshold(clients, degree), 0, degree)
  peers = clients - 1 if degree is None else min(degree, clients - 1)
  plain, secure, honest, floor, protocol = [], [], [], [], []
  for repeat in range(repeats):
    plain.append(round_seconds(forms[False], data, clients, engine))
    secure.append(round_seconds(forms[True], data, clients, engine,
                                secure_neighbors=neighbors))
    honest.append(round_seconds(forms[True], data, clients, engine,
                                secure_neighbors=neighbors,
                                secure_server='honest'))
    floor.append(crypto_floor_seconds(clients, peers, elements, modulus))
    protocol.append(protocol_seconds(values, modulus, config.threshold,
                                     degree, repeat))
  id_bits = secagg.messages.id_bits(next(iter(values)))
  steps = secagg.client_cost_bits(config, clients, id_bits,
                                  malicious_server=True)
  honest_steps = secagg.client_cost_bits(config, clients, id_bits)
  plain_seconds, secure_seconds, floor_seconds, own_seconds = (
      statistics.median(plain), statistics.median(secure),
      statistics.median(floor), statistics.median(protocol))
  honest_seconds = statistics.median(honest)
  return {
      'engine': engine.name, 'workers': engine.workers,
      'clients': clients, 'elements': elements, 'repeats': repeats,
      'neighbors': 'all' if secagg.graph.is_complete(degree, clients) else
                   degree,
      'threshold': config.threshold,
      'plain_seconds': plain_seconds, 'secure_seconds': secure_seconds,
      'ratio': secure_seconds / plain_seconds,
      'secure_seconds_per_client': secure_seconds / clients,
      'masked_input_bits': secagg.masked_input_bits(config),
      'protocol_bits_sent': sum(s.sent for s in steps.values()) -
                            secagg.masked_input_bits(config),
      'protocol_bits_received': sum(s.received for s in steps.values()),
      'honest_seconds': honest_seconds,
      'malicious_over_honest': secure_seconds / honest_seconds,
      'honest_bits_sent': sum(s.sent for s in honest_steps.values()) -
                          secagg.masked_input_bits(config),
      'honest_bits_received': sum(s.received
                                  for s in honest_steps.values()),
      'plain_bits': 32 * elements,
      'crypto_floor_seconds': floor_seconds,
      'floor_ratio': (plain_seconds + floor_seconds / engine.workers) /
                     plain_seconds,
      'protocol_seconds': own_seconds,
      'protocol_ratio': (plain_seconds + own_seconds / engine.workers) /
                        plain_seconds,
  }


def engines_for(dask_workers, directory, only_dask=False):
  """The in-process engine (unless `only_dask`), and with `dask_workers` a
  local Dask cluster (yields them; stops the cluster after)."""
  if not only_dask:
    yield Engine('in-process')
  if not dask_workers:
    return
  cluster = beam_runner.engines.start_local_cluster(dask_workers,
                                                    lifetime='2 hours')
  try:
    yield Engine('dask', dask_workers,
                 {'runner': 'DaskRunner',
                  'dask_client_address': cluster.scheduler_address},
                 directory)
  finally:
    cluster.close()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--clients', default='10,100,1000')
  parser.add_argument('--elements', type=int, default=1000)
  parser.add_argument('--neighbors', default='all,auto',
                      help='mask graphs: all, auto or even numbers')
  parser.add_argument('--largest-complete', type=int, default=100,
                      help='the complete graph runs up to this many clients')
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--dask-workers', type=int, default=0,
                      help='also measure on a local Dask cluster of this '
                      'many workers')
  parser.add_argument('--only-dask', action='store_true',
                      help='skip the in-process rows (with --dask-workers)')
  parser.add_argument('--json', help='write the rows here')
  args = parser.parse_args(argv)
  if args.only_dask and not args.dask_workers:
    parser.error('--only-dask needs --dask-workers')
  counts = [int(c) for c in args.clients.split(',')]
  graphs = [None if g == 'all' else g if g == 'auto' else int(g)
            for g in args.neighbors.split(',')]
  forms = {secure: build_form(args.elements, secure)
           for secure in (False, True)}
  rows = []
  print(f'one round (a run\'s second), {args.elements} int32 values per '
        f'client, median of {args.repeats} interleaved pairs')
  print(f'{"engine":>10} {"clients":>8} {"graph":>6} {"t":>4} '
        f'{"plain s":>9} {"secure s":>9} {"ratio":>7} {"s/client":>9} '
        f'{"masked U bits":>14} {"protocol sent":>14} {"protocol recv":>14} '
        f'{"crypto s":>9} {"floor":>6} {"protocol s":>11} {"alone":>6} '
        f'{"honest s":>9} {"mal/hon":>8} {"honest sent":>12} '
        f'{"honest recv":>12}')
  with tempfile.TemporaryDirectory(prefix='secure-sum-data-') as directory:
    for engine in engines_for(args.dask_workers, directory, args.only_dask):
      for clients in counts:
        for neighbors in graphs:
          degree = secagg.graph.resolve(neighbors, clients)
          complete = secagg.graph.is_complete(degree, clients)
          if complete and neighbors is not None:
            continue  # The same round as the complete graph's row.
          if complete and clients > args.largest_complete:
            continue
          row = measure(clients, args.elements, args.repeats, forms,
                        neighbors, engine)
          rows.append(row)
          print(_line(row), flush=True)
  for row in rows:
    if row['clients'] == TARGET_CLIENTS:
      verdict = 'met' if row['ratio'] <= TARGET_RATIO else 'MISSED'
      print(f'target: secure <= {TARGET_RATIO}x plain at {TARGET_CLIENTS} '
            f'clients, {_engine(row)}, graph {row["neighbors"]}: '
            f'{row["ratio"]:.2f}x, {verdict} (the cryptography alone: '
            f'{row["floor_ratio"]:.2f}x; the protocol alone: '
            f'{row["protocol_ratio"]:.2f}x)')
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'rows': rows, 'target_ratio': TARGET_RATIO,
                 'target_clients': TARGET_CLIENTS}, f, indent=1)


def _engine(row):
  return row['engine'] + (f' ({row["workers"]} workers)'
                          if row['workers'] > 1 else '')


def _line(row):
  return (f'{row["engine"]:>10} {row["clients"]:>8} '
          f'{str(row["neighbors"]):>6} {row["threshold"]:>4} '
          f'{row["plain_seconds"]:>9.2f} {row["secure_seconds"]:>9.2f} '
          f'{row["ratio"]:>6.1f}x {row["secure_seconds_per_client"]:>9.4f} '
          f'{row["masked_input_bits"]:>14,} {row["protocol_bits_sent"]:>14,} '
          f'{row["protocol_bits_received"]:>14,} '
          f'{row["crypto_floor_seconds"]:>9.2f} {row["floor_ratio"]:>5.1f}x '
          f'{row["protocol_seconds"]:>11.2f} {row["protocol_ratio"]:>5.1f}x '
          f'{row["honest_seconds"]:>9.2f} '
          f'{row["malicious_over_honest"]:>7.2f}x '
          f'{row["honest_bits_sent"]:>12,} {row["honest_bits_received"]:>12,}')


if __name__ == '__main__':
  main()
