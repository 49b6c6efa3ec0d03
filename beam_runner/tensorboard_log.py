"""Each committed round's outcome as TensorBoard scalars, step = round.

Written with TensorFlow's own event writer (`tf.summary.write` with the
scalars plugin's metadata), so the `tensorboard` package is needed only to
view them. A run rebuilds the log from its committed rounds when it starts,
so rounds lost to a crash never show and resumed rounds never show twice.
"""

import numbers
import os

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

# Vector metrics up to this length show as one scalar per element.
MAX_ELEMENTS = 16

_SCALAR = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name='scalars'),
    data_class=summary_pb2.DATA_CLASS_SCALAR)


def scalars(outcome):
  """tag -> number for one round's outcome (see runner.run_round)."""
  values = {
      'clients/ok': outcome['clients_ok'],
      'clients/dropped': outcome['clients_dropped'],
      'bits/broadcast': outcome['bits_broadcast'],
      'bits/aggregated': outcome['bits_aggregated'],
      'seconds/round': outcome['seconds'],
  }
  for name, value in (outcome.get('evaluation') or {}).items():
    values[f'evaluation/{name}'] = value
  for stage, seconds in outcome.get('stage_seconds', {}).items():
    values[f'seconds/{stage}'] = seconds
  for path, value in outcome['metrics'].items():
    tag = 'metrics/' + path.replace('[', '/').replace(']', '').strip('/')
    if isinstance(value, bool) or not isinstance(value, (numbers.Number,
                                                         list)):
      continue
    if isinstance(value, list):
      flat = np.asarray(value, dtype=object).ravel()
      if len(flat) > MAX_ELEMENTS or not all(
          isinstance(v, numbers.Number) and not isinstance(v, bool)
          for v in flat):
        continue
      values.update({f'{tag}/{i}': v for i, v in enumerate(flat)})
    else:
      values[tag] = value
  return values


class TensorBoardLog:
  """Event files under `directory`, one step per committed round."""

  def __init__(self, directory):
    self.directory = os.fspath(directory)
    self._writer = None

  def rebuild(self, outcomes):
    """Replaces the event files by ones holding exactly `outcomes`."""
    self.close()
    if os.path.isdir(self.directory):
      for name in os.listdir(self.directory):
        if name.startswith('events.out.tfevents.'):
          os.remove(os.path.join(self.directory, name))
    os.makedirs(self.directory, exist_ok=True)
    self._writer = tf.summary.create_file_writer(self.directory)
    for outcome in outcomes:
      self.write(outcome)

  def write(self, outcome):
    with self._writer.as_default():
      for tag, value in scalars(outcome).items():
        tf.summary.write(tag, tf.constant(float(value), tf.float32),
                         step=outcome['round'], metadata=_SCALAR)
    self._writer.flush()

  def close(self):
    if self._writer is not None:
      self._writer.close()
      self._writer = None


def read(directory):
  """{tag: [(round, value), ...]} from the event files in `directory`, in
  file order (for tests and tools without TensorBoard)."""
  result = {}
  for name in sorted(os.listdir(directory)):
    if not name.startswith('events.out.tfevents.'):
      continue
    for record in tf.data.TFRecordDataset(os.path.join(directory, name)):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        result.setdefault(value.tag, []).append(
            (event.step, float(tf.make_ndarray(value.tensor))))
  return result
