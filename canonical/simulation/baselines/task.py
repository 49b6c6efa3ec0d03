"""TFF's baseline task pieces: `ClientSpec` (how a client reads its data),
`BaselineTaskDatasets` (train, test and validation data with their
preprocessing) and `BaselineTask` (those and the model to train)."""

from collections.abc import Callable
import dataclasses
import numbers
from typing import Any

import numpy as np
import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import client_data as client_data_lib

ClientData = client_data_lib.ClientData


def _positive_int(name, value, optional):
  if value is None and optional:
    return None
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or (
      int(value) != value):
    raise errors.InvalidTypeError(
        f'ClientSpec: {name} must be an integer, got {value!r}.')
  if value <= 0:
    raise errors.InvalidValueError(
        f'ClientSpec: {name} must be positive, got {value}.')
  return int(value)


@dataclasses.dataclass(frozen=True, eq=False)
class ClientSpec:
  """How each client reads its data: `num_epochs` passes, at most
  `max_elements` examples of those (all by default), in batches of
  `batch_size`, shuffled through a buffer of `shuffle_buffer_size` (the
  task's default when None; 1 does not shuffle)."""
  num_epochs: int
  batch_size: int
  max_elements: int | None = None
  shuffle_buffer_size: int | None = None

  def __post_init__(self):
    for name, optional in (('num_epochs', False), ('batch_size', False),
                           ('max_elements', True),
                           ('shuffle_buffer_size', True)):
      object.__setattr__(self, name, _positive_int(
          name, getattr(self, name), optional))


def shuffle_repeat_take(dataset: tf.data.Dataset, spec: ClientSpec,
                        default_buffer: int,
                        seed: int | None = None) -> tf.data.Dataset:
  """The steps every task's preprocessing begins with, in TFF's order:
  shuffle, repeat for the epochs, keep at most `max_elements`."""
  buffer = spec.shuffle_buffer_size or default_buffer
  if buffer > 1:
    dataset = dataset.shuffle(buffer, seed=seed)
  if spec.num_epochs > 1:
    dataset = dataset.repeat(spec.num_epochs)
  if spec.max_elements is not None:
    dataset = dataset.take(spec.max_elements)
  return dataset


def _element_spec(data, preprocess_fn=None):
  if isinstance(data, ClientData):
    if preprocess_fn is not None:
      data = data.preprocess(preprocess_fn)
    return data.element_type_structure
  if preprocess_fn is not None:
    data = preprocess_fn(data)
  return data.element_spec


def _check_data(name, data, allow_dataset, optional=False):
  kinds = (ClientData, tf.data.Dataset) if allow_dataset else (ClientData,)
  if data is None and optional:
    return
  if not isinstance(data, kinds):
    what = 'a ClientData or a tf.data.Dataset' if allow_dataset else (
        'a ClientData')
    raise errors.InvalidTypeError(
        f'BaselineTaskDatasets: {name} must be {what}, got '
        f'{type(data).__name__}.')


class BaselineTaskDatasets:
  """A task's data: federated `train_data`, `test_data` and optional
  `validation_data` (each a `ClientData` or, centralized, a
  `tf.data.Dataset`), and the functions (dataset -> dataset) preprocessing
  training and evaluation data. `element_type_structure` is what a
  preprocessed training data set yields, what the task's model takes."""

  def __init__(self, train_data: ClientData, test_data,
               validation_data=None,
               train_preprocess_fn: Callable | None = None,
               eval_preprocess_fn: Callable | None = None):
    _check_data('train_data', train_data, allow_dataset=False)
    _check_data('test_data', test_data, allow_dataset=True)
    _check_data('validation_data', validation_data, allow_dataset=True,
                optional=True)
    for name, fn in (('train_preprocess_fn', train_preprocess_fn),
                     ('eval_preprocess_fn', eval_preprocess_fn)):
      if fn is not None and not callable(fn):
        raise errors.InvalidValueError(
            f'BaselineTaskDatasets: {name} must be None or a function '
            f'dataset -> dataset, got {type(fn).__name__}.')
    self._train_data = train_data
    self._test_data = test_data
    self._validation_data = validation_data
    self._train_preprocess_fn = train_preprocess_fn
    self._eval_preprocess_fn = eval_preprocess_fn
    self._preprocessed_train_data = (
        train_data if train_preprocess_fn is None else
        train_data.preprocess(train_preprocess_fn))
    self._element_type_structure = (
        self._preprocessed_train_data.element_type_structure)
    if validation_data is not None:
      test_type = _element_spec(test_data)
      validation_type = _element_spec(validation_data)
      if test_type != validation_type:
        raise errors.InvalidValueError(
            'BaselineTaskDatasets: the validation data must have the test '
            f'data\'s elements; test data has {test_type}, validation data '
            f'{validation_type}.')

  @property
  def train_data(self) -> ClientData:
    return self._train_data

  @property
  def test_data(self):
    return self._test_data

  @property
  def validation_data(self):
    return self._validation_data

  @property
  def train_preprocess_fn(self):
    return self._train_preprocess_fn

  @property
  def eval_preprocess_fn(self):
    return self._eval_preprocess_fn

  @property
  def element_type_structure(self):
    return self._element_type_structure

  def sample_train_clients(self, num_clients: int, replace: bool = False,
                           random_seed: int | None = None
                          ) -> list[tf.data.Dataset]:
    """`num_clients` preprocessed training clients' data sets, drawn
    uniformly as TFF draws them (numpy's `RandomState(random_seed)`)."""
    ids = np.random.RandomState(seed=random_seed).choice(
        self._preprocessed_train_data.client_ids, size=num_clients,
        replace=replace)
    return [self._preprocessed_train_data.create_tf_dataset_for_client(i)
            for i in ids]

  def get_centralized_test_data(self) -> tf.data.Dataset:
    """The test data as one data set (every client's, if federated),
    preprocessed for evaluation."""
    data = self._test_data
    if isinstance(data, ClientData):
      data = data.create_tf_dataset_from_all_clients()
    if self._eval_preprocess_fn is not None:
      data = self._eval_preprocess_fn(data)
    return data

  def _rows(self):
    rows = [['Split', 'Dataset Type', 'Number of Clients'],
            ['Train', 'Federated', len(self._train_data.client_ids)]]
    for name, data in (('Test', self._test_data),
                       ('Validation', self._validation_data)):
      if data is None:
        continue
      if isinstance(data, ClientData):
        rows.append([name, 'Federated', len(data.client_ids)])
      else:
        rows.append([name, 'Centralized', 'N/A'])
    return rows

  def summary(self, print_fn: Callable[[str], Any] = print):
    """Prints a table of the splits (federated or centralized, how many
    clients) and whether each preprocessing function is given, as TFF
    prints it."""
    rows = self._rows()
    widths = [max(len(str(row[i])) for row in rows) + 1 for i in range(3)]
    lines = [''.join(f'{str(v):<{w}}|' for v, w in zip(row, widths))
             for row in rows]
    total = sum(widths) + len(widths)
    lines.insert(1, '=' * total)
    lines.append('_' * total)
    for line in lines:
      print_fn(line)
    print_fn(f'Train Preprocess Function: '
             f'{self._train_preprocess_fn is not None}')
    print_fn(f'Eval Preprocess Function: '
             f'{self._eval_preprocess_fn is not None}')


@dataclasses.dataclass(frozen=True)
class BaselineTask:
  """A baseline simulation: its `datasets` (`BaselineTaskDatasets`) and
  `model_fn`, making the model that trains on them (what
  `tff.learning.models.from_keras_model` gives); the model's input spec
  must be what the preprocessed training data yields."""
  datasets: BaselineTaskDatasets
  model_fn: Callable[[], Any]

  def __post_init__(self):
    if not isinstance(self.datasets, BaselineTaskDatasets):
      raise errors.InvalidTypeError(
          'BaselineTask: datasets must be a BaselineTaskDatasets, got '
          f'{type(self.datasets).__name__}.')
    if not callable(self.model_fn):
      raise errors.InvalidTypeError(
          'BaselineTask: model_fn must be a function making the model, got '
          f'{type(self.model_fn).__name__}.')
    model = self.model_fn()
    input_spec = getattr(model, 'input_spec', None)
    if input_spec is None:
      raise errors.InvalidTypeError(
          'BaselineTask: model_fn must make a model of tff.learning.models '
          f'(with an input_spec), it made {type(model).__name__}.')
    element_spec = self.datasets.element_type_structure
    if not _same_spec(element_spec, input_spec):
      raise errors.InvalidValueError(
          'BaselineTask: the data set elements and the model\'s input spec '
          f'differ: data {element_spec}, model {input_spec}.')


def _same_spec(a, b):
  try:
    tf.nest.assert_same_structure(a, b, check_types=False)
  except (TypeError, ValueError):
    return False
  return all(x.shape == y.shape and x.dtype == y.dtype
             for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)))
