"""TFF's baseline tasks (`tff.simulation.baselines`): a task is its data
(`BaselineTaskDatasets`: federated training data, test and validation data,
and their preprocessing by a `ClientSpec`) and a model function, made by a
builder per data set (`emnist.create_character_recognition_task`, ...).

The models are Keras 3 models with TFF's layers and shapes, given as
`tff.learning.models.from_keras_model` makes them; the data is read by
`tff.simulation.datasets` (TFF's cached files, or `use_synthetic_data`).
"""

from canonical.simulation.baselines import cifar100
from canonical.simulation.baselines import emnist
from canonical.simulation.baselines import landmark
from canonical.simulation.baselines import shakespeare
from canonical.simulation.baselines import stackoverflow
from canonical.simulation.baselines.task import BaselineTask
from canonical.simulation.baselines.task import BaselineTaskDatasets
from canonical.simulation.baselines.task import ClientSpec

__all__ = ['BaselineTask', 'BaselineTaskDatasets', 'ClientSpec', 'cifar100',
           'emnist', 'landmark', 'shakespeare', 'stackoverflow']
