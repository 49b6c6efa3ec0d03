"""Secure aggregation (Bonawitz et al., CCS 2017) with dropouts: semi-honest,
or against a malicious server (signed keys, a trust store, one contributor
list a round; see `client` and `identity`).

The server learns the modular sum of the clients' integer inputs and nothing
else about them. Each party's step is a function of its own state and messages:

  client: `advertise_keys` -> `share_keys` -> `masked_input`
          [-> `sign_contributors`, against a malicious server]
          -> `unmasking_shares`
  aggregator: `aggregation.zero` / `accumulate` / `merge` (modular addition)
  server: `relay_shares`, `unmask`

`secure_sum_round` runs a whole round in one process; `client_cost_bits` and
`measured_cost_bits` count what each client sends and receives. `graph`: who
masks with whom (every pair, or k ring neighbors: SecAgg+).
"""

from canonical.secagg import aggregation
from canonical.secagg.aggregation import MaskedSum
from canonical.secagg.client import advertise_keys
from canonical.secagg.client import ClientKeys
from canonical.secagg.client import masked_input
from canonical.secagg.client import MaskingState
from canonical.secagg.client import receive_shares
from canonical.secagg.client import share_keys
from canonical.secagg.client import sharing_state
from canonical.secagg.client import sign_contributors
from canonical.secagg.client import SharingState
from canonical.secagg.client import unmasking_shares
from canonical.secagg.config import make_config
from canonical.secagg.config import SecAggConfig
from canonical.secagg.cost import client_cost_bits
from canonical.secagg.cost import masked_input_bits
from canonical.secagg.cost import measured_cost_bits
from canonical.secagg.cost import StepBits
from canonical.secagg.driver import secure_sum_round
from canonical.secagg.driver import SecureSumResult
from canonical.secagg.errors import ProtocolViolationError
from canonical.secagg.errors import RoundFailedError
from canonical.secagg.errors import SecAggError
from canonical.secagg import graph
from canonical.secagg import identity
from canonical.secagg.identity import ServedRounds
from canonical.secagg.identity import TrustStore
from canonical.secagg.messages import ContributorList
from canonical.secagg.messages import ContributorsSignature
from canonical.secagg.messages import EncryptedShares
from canonical.secagg.messages import KeyAdvertisement
from canonical.secagg.messages import MaskedInput
from canonical.secagg.messages import Roster
from canonical.secagg.messages import SignedContributors
from canonical.secagg.messages import UnmaskingShares
from canonical.secagg.randomness import SeededRandom
from canonical.secagg.randomness import SystemRandom
from canonical.secagg.server import check_connected
from canonical.secagg.server import relay_shares
from canonical.secagg.server import roster_for
from canonical.secagg.server import unmask
from canonical.secagg import shamir
from canonical.secagg import wire

__all__ = [
    'ClientKeys', 'ContributorList', 'ContributorsSignature',
    'EncryptedShares', 'KeyAdvertisement', 'ServedRounds',
    'SignedContributors', 'TrustStore', 'identity', 'sign_contributors',
    'MaskedInput', 'MaskedSum', 'MaskingState', 'ProtocolViolationError',
    'Roster', 'RoundFailedError', 'SecAggConfig', 'SecAggError',
    'SecureSumResult', 'SeededRandom', 'SharingState', 'StepBits',
    'SystemRandom', 'UnmaskingShares', 'advertise_keys', 'aggregation',
    'check_connected',
    'client_cost_bits', 'graph', 'make_config', 'masked_input', 'masked_input_bits',
    'measured_cost_bits', 'receive_shares', 'relay_shares', 'roster_for', 'secure_sum_round', 'shamir',
    'share_keys', 'sharing_state', 'unmask', 'unmasking_shares', 'wire',
]
