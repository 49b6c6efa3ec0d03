"""Processes, with TensorFlow Federated's names (`tff.templates`).

`IterativeProcess` (initialize + next: what the compiler lowers to a form),
`MeasuredProcess` and its `MeasuredProcessOutput(state, result,
measurements)`, composed by `chain_measured_processes` and
`concatenate_measured_processes`, `AggregationProcess` (what
`tff.aggregators` factories create) and `EstimationProcess` (an adaptive
norm's, with `report`). The
building block of a value spec that federated averaging composes stays at
`canonical.templates.measured_process.MeasuredProcess`.
"""

from canonical.templates.aggregation_process import AggregationProcess
from canonical.templates.composition import chain_measured_processes
from canonical.templates.composition import concatenate_measured_processes
from canonical.templates.estimation_process import EstimationProcess
from canonical.templates.iterative_process import IterativeProcess
from canonical.templates.measured import MeasuredProcess
from canonical.templates.measured import MeasuredProcessOutput
from canonical.templates.measured import MeasuredProcessOutputWithClientState

__all__ = ['AggregationProcess', 'EstimationProcess', 'IterativeProcess',
           'MeasuredProcess', 'MeasuredProcessOutput',
           'MeasuredProcessOutputWithClientState',
           'chain_measured_processes', 'concatenate_measured_processes']
