"""TFF 0.87's `tff.learning.models.save` / `load`: a `VariableModel` as a
TensorFlow SavedModel, and back.

`save` writes a `tf.Module` holding the model's variables (trainable,
non-trainable, local) and its methods as traced functions: `forward_pass`
and `predict_on_batch` in training and in inference, each metric's
finalizer (on its unfinalized values' types), `report_local_unfinalized_
metrics` and `reset_metrics`; the default serving signature is
`predict_on_batch` in inference, as TFF's is (for TFLite). `load` gives a
`VariableModel` over those functions and variables; it is not the saved
Python class, and its finalizers are the saved functions.

A loaded model also works where TFF makes models afresh inside
computations (`model_fn = lambda: tff.learning.models.load(path)` in any
learning builder): loaded inside a computation, its variables are made
there (call-local, lowered into values like any other) with the saved
values, and the saved functions run on them in place of the variables they
were saved with.
"""

import collections
import collections.abc
import functools

import tensorflow as tf
from tensorflow.core.protobuf import struct_pb2
from tensorflow.python.ops import resource_variable_ops

from canonical import errors
from canonical.learning import variable_model
from canonical.learning.functional import BatchOutput
from canonical.saving import structure_coding

_WHO = 'tff.learning.models'


def _spec_of(value):
  tensor = tf.convert_to_tensor(value)
  return tf.TensorSpec(tensor.shape, tensor.dtype)


def _plain(spec):
  return tf.TensorSpec(spec.shape, spec.dtype) if isinstance(
      spec, tf.TensorSpec) else spec


def _string_variable(data):
  return tf.Variable(data, trainable=False, dtype=tf.string)


def _encoded(structure):
  return structure_coding.encode(structure).SerializeToString(
      deterministic=True)


def _decoded(variable):
  return structure_coding.decode(struct_pb2.StructuredValue.FromString(
      variable.numpy()))


def _batch_output(output):
  return dict(loss=output.loss, predictions=output.predictions,
              num_examples=output.num_examples)


class _Saved(tf.Module):
  """What `save` writes."""


def save(model, path, input_type=None):
  """Writes `model` (a `VariableModel`) to `path` as a SavedModel.
  `input_type` types `predict_on_batch`'s input (default: `input_spec`'s
  x)."""
  if not isinstance(model, variable_model.VariableModel):
    raise errors.InvalidTypeError(
        f'{_WHO}.save: model must be a tff.learning.models.VariableModel, '
        f'got {type(model).__name__}.')
  if not isinstance(path, str) or not path:
    raise errors.InvalidValueError(
        f'{_WHO}.save: path must be a non-empty string, got {path!r}.')
  if not tf.executing_eagerly():
    raise errors.InvalidValueError(
        f'{_WHO}.save runs eagerly, outside a computation or tf.function.')
  if isinstance(model, LoadedModel):
    _write(model.module, path)
    return
  input_spec = tf.nest.map_structure(_plain, model.input_spec)
  if input_type is None:
    input_type = (input_spec['x'] if isinstance(
        input_spec, collections.abc.Mapping) else input_spec[0])
  module = _Saved()
  module.tff_trainable_variables = list(model.trainable_variables)
  module.tff_non_trainable_variables = list(model.non_trainable_variables)
  module.tff_local_variables = list(model.local_variables)
  for training, suffix in ((True, 'training'), (False, 'inference')):
    setattr(module, f'forward_pass_{suffix}', tf.function(
        lambda batch, t=training: _batch_output(
            model.forward_pass(batch, training=t)),
        input_signature=[input_spec]).get_concrete_function())
    setattr(module, f'predict_on_batch_{suffix}', tf.function(
        lambda x, t=training: model.predict_on_batch(x, training=t),
        input_signature=[input_type]).get_concrete_function())
  unfinalized = model.report_local_unfinalized_metrics()
  names = list(unfinalized)
  module.metric_names = _string_variable(names)
  module.report_local_unfinalized_metrics = tf.function(
      lambda: dict(model.report_local_unfinalized_metrics()),
      input_signature=[]).get_concrete_function()
  finalizers = model.metric_finalizers()
  if list(finalizers) != names:
    raise errors.InvalidValueError(
        f'{_WHO}.save: metric_finalizers() names {list(finalizers)}, '
        f'report_local_unfinalized_metrics() {names}.')
  module.metric_finalizers = {
      name: tf.function(
          finalizers[name],
          input_signature=[tf.nest.map_structure(
              _spec_of, unfinalized[name])]).get_concrete_function()
      for name in names}
  module.input_spec = _string_variable(_encoded(input_spec))
  try:
    module.reset_metrics = tf.function(
        model.reset_metrics, input_signature=[]).get_concrete_function()
  except NotImplementedError:
    module.reset_metrics = None
  _write(module, path)


def _write(module, path):
  tf.saved_model.save(module, export_dir=path,
                      signatures=module.predict_on_batch_inference)


def load(path):
  """The `VariableModel` saved at `path` (`save`)."""
  if not isinstance(path, str) or not path:
    raise errors.InvalidValueError(
        f'{_WHO}.load: path must be a non-empty string, got {path!r}.')
  if tf.executing_eagerly():
    return LoadedModel(_loaded(path))
  # Inside a computation: the saved functions, on variables of this call.
  return LoadedModel(_loaded(path), call_local=True)


@functools.lru_cache(maxsize=16)
def _loaded_once(path, version):
  del version  # Part of the key: a model saved again is loaded again.
  return tf.saved_model.load(path)


def _loaded(path):
  """The SavedModel at `path`: loaded afresh eagerly; inside a computation,
  loaded once (eagerly) per saved file, its variables only read."""
  if tf.executing_eagerly():
    return tf.saved_model.load(path)
  with tf.init_scope():
    version = tf.io.gfile.stat(
        tf.io.gfile.join(path, 'saved_model.pb')).mtime_nsec
    return _loaded_once(path, version)


class LoadedModel(variable_model.VariableModel):
  """A `VariableModel` read from a SavedModel (`load`)."""

  def __init__(self, module, call_local=False):
    self.module = module
    saved = (list(module.tff_trainable_variables),
             list(module.tff_non_trainable_variables),
             list(module.tff_local_variables))
    if call_local:  # Fresh variables of this call, with the saved values.
      with tf.init_scope():
        values = [[v.numpy() for v in part] for part in saved]
      own = [[tf.Variable(value, trainable=trainable)
              for value in part]
             for part, trainable in zip(values, (True, False, False))]
    else:
      own = saved
    self._trainable, self._non_trainable, self._local = own
    # The saved functions' captured variables, run on ours.
    self._handles = {id(v.handle): mine.handle
                     for part, mine_part in zip(saved, own)
                     for v, mine in zip(part, mine_part)}
    with tf.init_scope():  # Read once, eagerly.
      self._names = [n.decode() for n in module.metric_names.numpy()]
      self._input_spec = _decoded(module.input_spec)

  def _run(self, function, *args):
    """`function` (a saved concrete function) on `args`, its captured
    variables replaced by this model's."""
    captured = [self._handles.get(id(c), c) for c in function.captured_inputs]
    for variable in self._trainable + self._non_trainable + self._local:
      # What the call reads, as a gradient tape has to know.
      resource_variable_ops.variable_accessed(variable)
    flat = tf.nest.flatten(args, expand_composites=True)
    return function._call_flat(  # pylint: disable=protected-access
        [tf.convert_to_tensor(t) for t in flat], captured)

  @property
  def trainable_variables(self):
    return self._trainable

  @property
  def non_trainable_variables(self):
    return self._non_trainable

  @property
  def local_variables(self):
    return self._local

  @property
  def input_spec(self):
    return self._input_spec

  def forward_pass(self, batch_input, training=True):
    function = (self.module.forward_pass_training if training else
                self.module.forward_pass_inference)
    return BatchOutput(**self._run(function, batch_input))

  def predict_on_batch(self, x, training=True):
    function = (self.module.predict_on_batch_training if training else
                self.module.predict_on_batch_inference)
    return self._run(function, x)

  def report_local_unfinalized_metrics(self):
    values = self._run(self.module.report_local_unfinalized_metrics)
    return collections.OrderedDict((name, values[name])
                                   for name in self._names)

  def metric_finalizers(self):
    return collections.OrderedDict(
        (name, self.module.metric_finalizers[name]) for name in self._names)

  def reset_metrics(self):
    if self.module.reset_metrics is None:
      raise NotImplementedError(
          'The saved model had no reset_metrics (its class did not '
          'implement it).')
    self._run(self.module.reset_metrics)
