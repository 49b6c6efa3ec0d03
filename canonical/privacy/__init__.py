"""Differential privacy: what rounds of DP-FedAvg spend, with dp-accounting.

`accounting`: (epsilon, delta) of Poisson-subsampled Gaussian rounds, plans
checked against a budget, and the ledger a run keeps. `spending`: what a
run of a form spends, from what the form releases each round
(`canonical.core.privacy_releases`: noted by its DP aggregators, kept by
the compiler) and the run's sampling (`beam_runner.run` reports it). The
mechanisms
themselves (clipping, noise on the sum) are encoder stages
(`encoders.stages.clipping`) in the aggregation processes
`canonical.aggregators.dp_mean` and `dp_secure_mean`. `discrete_gaussian`
samples the discrete Gaussian statelessly (the hierarchical histograms'
distributed DP in `canonical.analytics`).
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
