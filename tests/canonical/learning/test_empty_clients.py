"""Clients with no examples: every shipped model, plain and compressed, sends
a zero update of weight zero, and nothing aborts.

A zero-size batch once aborted the process inside the work piece; the work
runs in a child process here so that such a regression fails this test, not
the session.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../../..'))

_CHILD = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, {root!r})
    import numpy as np
    import tensorflow as tf
    import canonical as cf
    import encoders as te
    from canonical import learning
    from canonical.learning import algorithms
    from canonical.learning import framework
    from canonical.learning import models

    model = learning.KerasFunctionalModel.from_keras(models.{model}, seed=0)
    aggregation = None
    if {compressed!r}:
      aggregation = framework.build_encoded_mean_process_from_model(
          model, lambda spec: te.encoders.as_gather_encoder(
              te.encoders.hadamard_quantization(2), spec))
    form = cf.compile(algorithms.build_federated_averaging_process(
        model, lambda: learning.sgd(0.1), aggregation_process=aggregation))
    form = cf.saving.from_bytes(cf.saving.to_bytes(form))  # As workers run it.
    x_spec, y_spec = form.client_data_spec.element_spec
    def batch(n):
      return (np.full([n] + x_spec.shape[1:].as_list(), 0.5,
                      x_spec.dtype.as_numpy_dtype),
              np.zeros([n], y_spec.dtype.as_numpy_dtype))
    clients = {{
        'zero-size batch': tf.data.Dataset.from_tensors(batch(0)),
        'no batch': tf.data.Dataset.from_tensors(batch(0)).take(0),
        'zero-size batch, then one of 3': tf.data.Dataset.from_tensors(
            batch(0)).concatenate(tf.data.Dataset.from_tensors(batch(3))),
    }}
    state = form.initialize()
    c = form.prepare(state)
    results = {{}}
    for name, data in clients.items():
      update, _ = form.work(data, c)
      update = [np.asarray(t) for t in tf.nest.flatten(update)]
      accumulator = form.accumulate(form.zero(), form.work(data, c)[0])
      _, metrics = form.update(state, form.report(accumulator))
      train = metrics['client_work']['train']
      results[name] = {{
          'finite': all(np.isfinite(t).all() for t in update
                        if t.dtype.kind == 'f'),
          'metrics': {{k: float(v) for k, v in train.items()}},
          'model_finite': all(
              np.isfinite(t).all() for t in tf.nest.flatten(
                  form.update(state, form.report(accumulator))[0]
                  .global_model_weights)),
      }}
    print(json.dumps(results))
''')


@pytest.mark.slow
@pytest.mark.parametrize('model, compressed', [
    ('small_8x8', False), ('small_8x8', True), ('cnn_28x28', False)])
def test_clients_without_examples_send_nothing_and_abort_nothing(model,
                                                                  compressed):
  code = _CHILD.format(root=ROOT, model=model, compressed=compressed)
  child = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, timeout=600,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  assert child.returncode == 0, child.stderr[-3000:]
  results = json.loads(child.stdout.strip().splitlines()[-1])
  for name, result in results.items():
    assert result['finite'], name
    assert result['model_finite'], name
    examples = result['metrics']
    # One client per round here: its examples are the round's.
    expected = 3.0 if name.endswith('one of 3') else 0.0
    assert examples.get('num_examples') == expected, (name, examples)
