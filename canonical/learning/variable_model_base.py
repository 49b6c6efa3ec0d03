"""TFF 0.87's `tff.learning.models.VariableModel`: the interface alone.

Apart from how the builders run one (`variable_model.py`), so that what
only checks for one (`model_weights.py`) imports no builder machinery.
"""

import abc


class VariableModel(abc.ABC):
  """TFF's model that holds its weights and metrics in `tf.Variable`s.

  Subclass it as TFF's docs do: the variables (`trainable_variables`,
  `non_trainable_variables`, `local_variables` for metrics), `input_spec`
  (a batch's spec), `forward_pass(batch_input, training)` returning a
  `BatchOutput` (and updating the metric variables), `predict_on_batch`,
  `report_local_unfinalized_metrics()` and `metric_finalizers()` (same keys)
  and `reset_metrics()`. Every learning builder takes a `model_fn`
  returning one; it runs as pure functions (see this module's docstring).
  """

  @property
  @abc.abstractmethod
  def trainable_variables(self):
    """The variables training changes."""

  @property
  @abc.abstractmethod
  def non_trainable_variables(self):
    """The model's other weights (batch norm statistics, say)."""

  @property
  @abc.abstractmethod
  def local_variables(self):
    """The variables of the metrics (never sent between server and clients)."""

  @property
  @abc.abstractmethod
  def input_spec(self):
    """The spec of one batch: `(x, y)` or a mapping with 'x' and 'y'."""

  @abc.abstractmethod
  def forward_pass(self, batch_input, training=True):
    """A `BatchOutput` (loss, predictions, num_examples) of one batch; it
    updates the metrics."""

  @abc.abstractmethod
  def predict_on_batch(self, batch_input, training=True):
    """The model's output on the batch's `x`."""

  @abc.abstractmethod
  def report_local_unfinalized_metrics(self):
    """An `OrderedDict` of metric name -> its unfinalized values (what sums
    across clients)."""

  @abc.abstractmethod
  def metric_finalizers(self):
    """An `OrderedDict` of metric name -> a function of its unfinalized
    values giving its value."""

  @abc.abstractmethod
  def reset_metrics(self):
    """Sets the metrics back to their values before any batch."""
