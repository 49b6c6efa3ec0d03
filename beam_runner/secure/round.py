"""A round with secure sums as Beam stages: the masking protocol of
`canonical.secagg` between the clients (their batches, on any worker) and the
server (single steps after each combine).

    batches -> Work (round_pipeline.WorkFn): each client's U, kept at the
         client (its secure part checked against its range), and the
         client's public keys advertised
      -> Aggregate (CombineFn): the work's counts and the advertisements
      -> Roster (server): publishes the roster
      -> ShareKeys: each client's Shamir shares, encrypted for each peer
      -> Collect -> Relay (server): writes each batch's inbox
      -> Mask: each client's kept input plus its masks, and the plain part
         of its U accumulated (the form's zero and accumulate)
      -> MaskedSum (CombineFn): the form's merge of the plain parts, and
         modular addition of masked inputs
      -> Unmask request (server): keeps the plain aggregate and the masked
         total (or fails the round below the threshold)
      [-> Sign: against a malicious server (the default), each contributor
         signs the contributor list -> Collect -> CheckSignatures (server):
         publishes them if t or more signed]
      -> Unmask: each contributor's shares -> Collect
      -> Update (round_pipeline.UpdateFn): unmasks the sums, then report and
         update as in any round

A client's work, the round's heavy part, runs where `Create` put its batch
(every engine spreads those); the protocol's steps after it spread at a
Reshuffle where the engine does (Dask keeps them where the combine put them).
A round whose clients are one element runs the same steps in one Beam step
(`steps.InOneStep`): its protocol then costs what its cryptography and files
cost, not fifteen Beam steps and four barriers.

The aggregation tier and every worker that is not the client itself only
ever handle public keys, ciphertexts, masked inputs, plain parts of U and
sums of them. A client draws its keys and masks from its own secret (one
32-byte file per client in the run directory, `client_secrets/`, made on
first use) and the round's attempt, so each step recomputes its earlier
draws on whatever worker runs it (a worker keeps the clients it has drawn,
`clients.client_of`); its U, and after masking the shares it decrypted, wait
like its state in the run directory: in this simulation that directory is
the clients' devices' storage, and no server step reads a secret, an input
or a held share. Messages (the server's, and the clients' n*k shares: k = n - 1
unless the round's `secure_neighbors` makes the mask graph a sparse ring)
travel as files of the attempt (`secure/`), deleted when the round commits;
the pipeline carries only their paths.

Clients drop out at any step, as devices do (Bonawitz et al.): one whose
key sharing or masking fails is in no sum, plain or secure (its U travels
with its masked input, so both parts go in together or not at all), is
counted dropped with the step, and keeps its old state; the survivors'
shares remove the masks others added for it. One whose unmasking fails goes
silent: its input stays in the sums, unmasked from its holders' shares.
Below the threshold at any step, or with survivors not connected in a
sparse graph, the round fails and commits nothing.

This module is the server's bookkeeping of an attempt and the wiring of its
steps; `protocol_steps` holds the steps, `clients` a client's secret and
draws, `kept` a batch's kept updates, `messages` the round's files.
"""

import json

import numpy as np
import tensorflow as tf

from beam_runner.pipeline import round as round_pipeline
from beam_runner.pipeline import steps
from beam_runner.secure import clients
from beam_runner.secure import kept
from beam_runner.secure import messages
from beam_runner.secure import protocol_steps
from beam_runner.worker_io import tensor_io
from canonical import io as storage_lib
from canonical import secagg
from canonical.secagg import sums as secure_sums


class SecureRound:
  """One attempt's protocol: where its files are (small; pickled to
  workers), and the steps the round pipeline hands to it."""

  def __init__(self, attempt, run_directory, malicious_server=True):
    self.storage = attempt.storage  # Reaches every file below.
    # The clients' policy (theirs, not the server's to set): against a
    # malicious server, the protocol's active version.
    self.malicious_server = malicious_server
    self.directory = attempt.secure_directory
    self.round_path = storage_lib.join(self.directory, 'round.json')
    self.roster_path = storage_lib.join(self.directory, 'roster.jsonl')
    self.aggregate_path = storage_lib.join(self.directory, 'aggregate.tensors')
    self.stats_path = storage_lib.join(self.directory, 'aggregate.json')
    self.work_stats_path = storage_lib.join(self.directory, 'work.json')
    self.masked_path = storage_lib.join(self.directory, 'masked_total.tensors')
    self.contributors_path = storage_lib.join(self.directory,
                                          'contributors.json')
    self.sharing_path = storage_lib.join(self.directory, 'sharing.json')
    self.signatures_path = storage_lib.join(self.directory,
                                            'signatures.jsonl')
    self.secrets_directory = storage_lib.join(run_directory,
                                              clients.SECRETS_DIR)
    self.round_id = f'{attempt.round}/{attempt.id}'

  def inbox_path(self, batch):
    """The shares the Relay addressed to a batch's clients."""
    return storage_lib.join(self.directory, 'inbox', batch + '.jsonl')

  def kept_path(self, batch, part):
    """Where a batch's clients keep their U until they mask (part `part`
    of the batch's; see `kept.Keeper`)."""
    return storage_lib.join(self.directory, 'kept',
                            f'{batch}-{part:05d}.tensors')

  def held_path(self, batch):
    """Where a batch's clients keep the shares they decrypted (step 3, for
    step 4)."""
    return storage_lib.join(self.directory, 'held', batch + '.json')

  # -- The round pipeline's hooks --------------------------------------------

  def start(self, form, state, num_clients, threshold=None, neighbors=None):
    """Writes the round's public parameters (parameters, noised sums' local
    stddevs, moduli, threshold, the mask graph's degree) from the server
    state S and the number of sampled clients."""
    parameters, stddevs = secure_sums.round_parameters(
        form.secure_sums, form.secure_parameters(state))
    moduli = secure_sums.round_moduli(form.secure_sums, parameters,
                                      num_clients, form.secure_update_spec)
    neighbors = secagg.graph.resolve(neighbors, num_clients)
    if threshold is None:
      threshold = secure_sums.default_threshold(num_clients, neighbors)
    self.storage.write_bytes(self.round_path, json.dumps({
        'parameters': parameters, 'noise_stddevs': stddevs,
        'threshold': threshold,
        'neighbors': neighbors,
        'moduli': [tf.nest.flatten(m) for m in moduli]}).encode())

  def keeper(self, form, tasks):
    """A `kept.Keeper` for the batch of `tasks`, in its files' name (see
    `messages.batch_key`)."""
    return kept.Keeper(self, form, messages.batch_key(tasks))

  def draw_client_ahead(self, form, client_id):
    """Draws the client's keys (reading its secret) before its turn, on the
    worker's reading threads when storage is remote; a failure here shows
    again at its turn, where it counts."""
    try:
      clients.client_of(messages.round_of(form, self), client_id)
    except Exception:  # pylint: disable=broad-except
      pass

  def kept_updates(self, form, batch):
    """(client id, U's plain part, the secure input) of each client whose
    U the batch's `kept.Keeper` kept, in the order it kept them."""
    return kept.read_kept(self, form, batch)

  def masked_bits(self, form):
    """Bits of one client's masked input: each value at its modulus's
    width (a secure part is counted like any other U, as it travels)."""
    return secagg.masked_input_bits(messages.round_of(form, self).config)

  def read_aggregate(self):
    """(the plain aggregate's arrays, the round's stats) the Unmask request
    kept."""
    stats = json.loads(self.storage.read_bytes(self.stats_path))
    return tensor_io.decode(self.storage.read_bytes(self.aggregate_path)), stats

  def unmask(self, form, response_files):
    """The secure sums, in their dtypes, from the masked total and the
    files of the contributors' unmasking shares (RoundFailedError if too
    few of a client's holders answered)."""
    the_round = messages.round_of(form, self)
    the_roster = messages.roster(self)
    contributors = messages.contributors_of(self)
    values = tensor_io.decode(self.storage.read_bytes(self.masked_path))
    total = secagg.MaskedSum(tuple(np.asarray(v, np.uint64) for v in values),
                             frozenset(contributors))
    flat = secagg.unmask(the_round.config, the_roster,
                         messages.sharing_of(self)['senders'], total,
                         [m for path in response_files
                          if not path.endswith(messages.SILENT_SUFFIX)
                          for m in messages.read_messages(self.storage, path)])
    return secure_sums.as_results(form.secure_sums, flat,
                                  form.secure_update_spec)

  def summary(self, form, response_files):
    """The round's protocol for its outcome: the mask graph ('all' pairs,
    or each client's ring neighbors), the threshold, the contributors, and
    the contributors that went silent before unmasking (and why)."""
    config = messages.round_of(form, self).config
    contributors = messages.contributors_of(self)
    silent = messages.silent_clients(self.storage, response_files)
    return {'neighbors': config.neighbors or 'all',
            'threshold': config.threshold,
            'contributors': len(contributors),
            'responders': len(contributors) - len(silent),
            'silent': dict(sorted(silent.items()))}

  def round_steps(self, source, plan, work, update):
    """The round's steps (see the module docstring)."""
    consistency = [
        steps.Spread('SignSpread'),
        steps.Each('Sign', protocol_steps.SignFn(source, self)),
        steps.Collect('Signatures'),
        steps.Each('CheckSignatures', protocol_steps.SignaturesFn(plan)),
    ] if self.malicious_server else []
    return [
        steps.Each('Work', work),
        steps.Combine('Aggregate', round_pipeline.AggregateFn(source)),
        steps.Each('Roster', protocol_steps.RosterFn(plan)),
        steps.Spread('ShareSpread'),
        steps.Each('ShareKeys', protocol_steps.ShareKeysFn(source, self)),
        steps.Collect('Shares'),
        steps.Each('Relay', protocol_steps.RelayFn(plan)),
        steps.Spread('MaskSpread'),
        steps.Each('Mask', protocol_steps.MaskFn(source, self)),
        steps.Combine('MaskedSum', protocol_steps.MaskedSumFn(source, self)),
        steps.Each('UnmaskRequest',
                   protocol_steps.UnmaskRequestFn(source, plan)),
    ] + consistency + [
        steps.Spread('UnmaskSpread'),
        steps.Each('Unmask', protocol_steps.UnmaskFn(source, self)),
        steps.Collect('Responses'),
        steps.Each('Update', update),
    ]

