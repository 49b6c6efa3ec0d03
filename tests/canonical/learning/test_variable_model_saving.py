"""TFF 0.87's `tff.learning.models.save` / `load`: a `VariableModel` as a
SavedModel and back, usable eagerly and by every learning builder."""

import numpy as np
import pytest
import tensorflow as tf

import canonical as tff
import tff_087_examples
import variable_model_examples

MODELS = {
    'user_written': (variable_model_examples.MnistModel,
                     variable_model_examples.client_data),
    'from_keras_model': (tff_087_examples.model_fn,
                         tff_087_examples.client_data),
}


@pytest.mark.parametrize('name', [
    'user_written', pytest.param('from_keras_model', marks=pytest.mark.slow)])
def test_a_loaded_model_computes_as_the_saved_one(name, tmp_path):
  model_fn, make_data = MODELS[name]
  model, batch = model_fn(), next(iter(make_data()[0]))
  model.trainable_variables[1].assign(
      tf.range(model.trainable_variables[1].shape[0], dtype=tf.float32))
  tff.learning.models.save(model, str(tmp_path))
  loaded = tff.learning.models.load(str(tmp_path))
  assert isinstance(loaded, tff.learning.models.VariableModel)
  for want, got in zip(model.trainable_variables, loaded.trainable_variables):
    np.testing.assert_array_equal(got, want)
  x = batch['x'] if isinstance(batch, dict) else batch[0]
  for training in (True, False):
    np.testing.assert_array_equal(loaded.predict_on_batch(x, training),
                                  model.predict_on_batch(x, training))
    want, got = model.forward_pass(batch), loaded.forward_pass(batch)
    assert float(got.loss) == float(want.loss)
    assert int(got.num_examples) == int(want.num_examples)
  unfinalized = loaded.report_local_unfinalized_metrics()
  assert list(unfinalized) == list(model.report_local_unfinalized_metrics())
  assert list(loaded.metric_finalizers()) == list(unfinalized)
  for metric, finalizer in loaded.metric_finalizers().items():
    want = model.metric_finalizers()[metric](
        model.report_local_unfinalized_metrics()[metric])
    assert float(finalizer(unfinalized[metric])) == float(want), metric
  loaded.reset_metrics()
  assert all(not np.any(v) for v in tf.nest.flatten(
      loaded.report_local_unfinalized_metrics()))
  assert loaded.input_spec == tf.nest.map_structure(
      lambda s: tf.TensorSpec(s.shape, s.dtype), model.input_spec)


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(MODELS))
def test_a_builder_trains_a_loaded_model_as_the_saved_one(name, tmp_path):
  model_fn, make_data = MODELS[name]
  tff.learning.models.save(model_fn(), str(tmp_path))
  data = make_data()
  processes = [tff.learning.algorithms.build_weighted_fed_avg(
      fn, tff.learning.optimizers.build_sgdm(0.1)) for fn in (
          model_fn, lambda: tff.learning.models.load(str(tmp_path)))]
  outputs = [p.next(p.initialize(), data) for p in processes]
  tf.nest.map_structure(np.testing.assert_array_equal,
                        outputs[0].state.global_model_weights,
                        outputs[1].state.global_model_weights,
                        check_types=False)
  assert outputs[0].metrics == outputs[1].metrics


def test_save_refuses_what_is_not_a_variable_model(tmp_path):
  with pytest.raises(TypeError, match='must be a tff.learning.models.'
                     'VariableModel'):
    tff.learning.models.save(tff_087_examples.functional_model(),
                             str(tmp_path))
