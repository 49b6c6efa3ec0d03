"""Differential privacy: what rounds of private training spend, with
dp-accounting.

`accounting`: (epsilon, delta) of Poisson-subsampled Gaussian rounds, plans
checked against a budget, and the ledger a run keeps. `spending`: what a
run of a form spends, from what the form releases each round
(`canonical.core.privacy_releases`: noted by its DP aggregators, kept by
the compiler) and the run's sampling (`beam_runner.run` reports it):
independent Gaussian rounds, DP-FTRL's correlated noise (`correlated`: the
tree's and banded matrices' sensitivity over a run) and distributed DP's
discrete noise (`distributed`: zCDP bounds). `banded` fits banded
strategies; `discrete_gaussian` samples the discrete Gaussian statelessly.
The mechanisms themselves are aggregation processes in
`canonical.aggregators` (`dp_mean`, `dp_secure_mean`,
`differential_privacy`, `banded_mf`, `distributed_dp`).
"""

from canonical.privacy.accounting import ACCOUNTANTS
from canonical.privacy.accounting import check_delta
from canonical.privacy.accounting import check_noise_multiplier
from canonical.privacy.accounting import check_plan
from canonical.privacy.accounting import check_rounds
from canonical.privacy.accounting import check_sampling_probability
from canonical.privacy.accounting import check_target_epsilon
from canonical.privacy.accounting import combined_noise_multiplier
from canonical.privacy.accounting import epsilon
from canonical.privacy.accounting import PrivacyLedger
from canonical.privacy.accounting import round_event
from canonical.privacy.accounting import rounds_within_budget

__all__ = [
    'ACCOUNTANTS', 'PrivacyLedger', 'check_delta', 'check_noise_multiplier',
    'check_plan', 'check_rounds', 'check_sampling_probability',
    'check_target_epsilon', 'combined_noise_multiplier', 'epsilon',
    'round_event', 'rounds_within_budget',
]
