"""Simulations of federated training (TFF's `tff.simulation`): which clients
take part in a round (`sampling`).

Client data directories and in-memory client data live with the runner that
reads them (`beam_runner.worker_io.client_data`).
"""

from canonical.simulation.sampling import sample_clients
from canonical.simulation.sampling import SAMPLINGS

__all__ = ['SAMPLINGS', 'sample_clients']
