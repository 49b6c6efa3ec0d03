"""Simulations of federated training (TFF's `tff.simulation`): client data
(`datasets`), which clients take part in a round (`sampling`), the training
loop (`run_training_process`), processes whose clients make their own
data from an id (`compositions`), ready models (`models`) and TFF's
baseline tasks (`baselines`).

Client data directories and in-memory client data for the Beam runner live
with the runner that reads them (`beam_runner.worker_io.client_data`); a
`ClientData`'s `to_dict()` is what the runner takes.
"""

from canonical.simulation.compositions import compose_dataset_computation_with_computation
from canonical.simulation.compositions import compose_dataset_computation_with_iterative_process
from canonical.simulation.compositions import compose_dataset_computation_with_learning_process
from canonical.simulation.compositions import SequenceTypeNotAssignableError
from canonical.simulation.compositions import SequenceTypeNotFoundError
from canonical.simulation import baselines
from canonical.simulation import datasets
from canonical.simulation import models
from canonical.simulation.sampling import build_uniform_sampling_fn
from canonical.simulation.sampling import sample_clients
from canonical.simulation.sampling import SAMPLINGS
from canonical.simulation.training_loop import EVALUATION_METRICS_PREFIX
from canonical.simulation.training_loop import EVALUATION_TIME_KEY
from canonical.simulation.training_loop import ROUND_NUMBER_KEY
from canonical.simulation.training_loop import ROUND_TIME_KEY
from canonical.simulation.training_loop import run_training_process
from canonical.simulation.training_loop import TRAINING_TIME_KEY

__all__ = [
    'EVALUATION_METRICS_PREFIX', 'EVALUATION_TIME_KEY', 'ROUND_NUMBER_KEY',
    'ROUND_TIME_KEY', 'SAMPLINGS', 'SequenceTypeNotAssignableError',
    'SequenceTypeNotFoundError', 'TRAINING_TIME_KEY',
    'build_uniform_sampling_fn',
    'compose_dataset_computation_with_computation',
    'compose_dataset_computation_with_iterative_process',
    'compose_dataset_computation_with_learning_process', 'baselines',
    'datasets', 'models',
    'run_training_process', 'sample_clients',
]
