"""TFF 0.87's `tff.learning.programs`: program logic that trains a model
(`train_model`), evaluates its checkpoints beside the training
(`EvaluationManager`) and tunes it with Vizier (`train_model_with_vizier`),
over `tff.program`'s data sources, program state and release managers.
Everything is a coroutine, as in TFF: `asyncio.run(train_model(...))`."""

from canonical.learning.programs.evaluation_program_logic import EvaluationManager
from canonical.learning.programs.evaluation_program_logic import extract_and_rewrap_metrics
from canonical.learning.programs.evaluation_program_logic import MetricsNotFoundError
from canonical.learning.programs.training_program_logic import ProgramState
from canonical.learning.programs.training_program_logic import train_model
from canonical.learning.programs.vizier_program_logic import train_model_with_vizier

__all__ = [
    'EvaluationManager', 'MetricsNotFoundError', 'ProgramState',
    'extract_and_rewrap_metrics', 'train_model', 'train_model_with_vizier',
]
