"""Bits each client sends and receives in each step of a round.

Payloads only (the transport's envelope is not counted): public keys are 256
bits, a share message 2 field elements + a 128-bit tag, a masked input
ceil(log2 m) bits per element, a revealed share one field element (257 bits),
and the contributor list a bitmap over the clients that shared keys. Shares
travel encrypted (ChaCha20-Poly1305), relayed by the server.
"""

import collections
import dataclasses

from canonical.secagg import graph
from canonical.secagg import identity
from canonical.secagg import masks
from canonical.secagg import messages
from canonical.secagg import shamir


@dataclasses.dataclass(frozen=True)
class StepBits:
  sent: int = 0
  received: int = 0


def masked_input_bits(config):
  """The bits of one masked input: what the masked U costs on the wire."""
  return sum(leaf.size * masks.bits_per_element(leaf.modulus)
             for leaf in config.leaves)


def client_cost_bits(config, num_clients, id_bits=64,
                     malicious_server=False):
  """{step: StepBits} for a client of a round of `num_clients`, no dropouts.

  In a sparse round a client receives its neighbors' keys and the other
  clients' ids (`id_bits` each: `messages.id_bits`; it places itself on the
  ring); shares go to and come from its neighbors only. Against a malicious
  server each advertisement carries a signature, and the consistency check
  adds one signature sent and, with the contributor list, the signatures of
  the clients holding its shares received."""
  others = num_clients - 1
  peers = others if graph.is_complete(config.neighbors, num_clients) else (
      config.neighbors)
  signature_bits = 8 * identity.SIGNATURE_BYTES if malicious_server else 0
  key_bits = 2 * 8 * messages.PUBLIC_KEY_BYTES + signature_bits
  share_bits = 8 * messages.SHARES_CIPHERTEXT_BYTES
  return {
      messages.ADVERTISE_KEYS: StepBits(
          key_bits, peers * key_bits + (others - peers) * id_bits),
      messages.SHARE_KEYS: StepBits(peers * share_bits, peers * share_bits),
      messages.MASKED_INPUT: StepBits(masked_input_bits(config), 0),
      messages.CONSISTENCY: StepBits(signature_bits, 0),
      messages.UNMASKING: StepBits((peers + 1) * shamir.FIELD_BITS,
                                   num_clients +
                                   (peers + 1) * signature_bits),
  }


def measured_cost_bits(result):
  """{client id: {step: StepBits}} counted from a round's recorded messages."""
  sent = collections.defaultdict(collections.Counter)
  received = collections.defaultdict(collections.Counter)
  for message in result.messages_to_server:
    sent[message.sender][message.step] += message.num_bits
  for message in result.messages_to_clients:
    received[message.recipient][message.step] += message.num_bits
  clients = sorted(set(sent) | set(received))
  return {u: {step: StepBits(sent[u][step], received[u][step])
              for step in messages.STEPS} for u in clients}
