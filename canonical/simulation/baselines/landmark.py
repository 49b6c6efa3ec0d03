"""TFF's landmark baseline (`tff.simulation.baselines.landmark`): landmark
classification (2,028 classes) with a MobileNetV2 (group normalization) on
128x128 crops of the Google Landmarks v2 images, read by
`tff.simulation.datasets.gldv2` (or its synthetic version)."""

import keras
import tensorflow as tf

from canonical.learning import models as learning_models
from canonical.simulation.baselines import task as task_lib
from canonical.simulation.datasets import gldv2
from canonical.simulation.models import mobilenet_v2

IMAGE_SIZE = 128
_MAX_CLIENT_DATASET_SIZE = 3500
_NUM_GROUPS = 8
_NUM_CLASSES = 2028


def _image_layers(is_training):
  """Crop to 128x128 (randomly, and randomly flipped, for training) and
  rescale to [-1, 1]."""
  rescale = keras.layers.Rescaling(scale=2.0 / 255, offset=-1.0)
  if is_training:
    return keras.Sequential([
        keras.layers.RandomCrop(IMAGE_SIZE, IMAGE_SIZE),
        keras.layers.RandomFlip('horizontal'), rescale])
  return keras.Sequential([keras.layers.CenterCrop(IMAGE_SIZE, IMAGE_SIZE),
                           rescale])


def create_preprocess_fn(spec, is_training, debug_seed=None):
  """Dataset of landmark examples -> batches of (image, class): the image
  cropped and rescaled first, then shuffled, repeated, taken, batched."""

  def preprocess_fn(dataset):
    layers = _image_layers(is_training)
    dataset = dataset.map(
        lambda element: (layers(element['image/decoded'],
                                training=is_training), element['class']),
        num_parallel_calls=tf.data.AUTOTUNE)
    dataset = task_lib.shuffle_repeat_take(
        dataset, spec, _MAX_CLIENT_DATASET_SIZE, seed=debug_seed)
    return dataset.batch(spec.batch_size)

  return preprocess_fn


def create_landmark_classification_task_from_datasets(
    train_client_spec, eval_client_spec, train_data, test_data,
    debug_seed=None) -> task_lib.BaselineTask:
  """The landmark classification task on given GLDv2-like data."""
  eval_client_spec = eval_client_spec or task_lib.ClientSpec(
      num_epochs=1, batch_size=64, shuffle_buffer_size=1)
  task_datasets = task_lib.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data,
      train_preprocess_fn=create_preprocess_fn(train_client_spec, True,
                                               debug_seed),
      eval_preprocess_fn=create_preprocess_fn(eval_client_spec, False,
                                              debug_seed))

  def model_fn():
    return learning_models.from_keras_model(
        mobilenet_v2.create_mobilenet_v2(
            input_shape=(IMAGE_SIZE, IMAGE_SIZE, 3), num_groups=_NUM_GROUPS,
            num_classes=_NUM_CLASSES),
        input_spec=task_datasets.element_type_structure,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False),
        metrics=[keras.metrics.SparseCategoricalAccuracy()])

  return task_lib.BaselineTask(task_datasets, model_fn)


def create_landmark_classification_task(
    train_client_spec: task_lib.ClientSpec,
    eval_client_spec: task_lib.ClientSpec | None = None,
    use_gld23k: bool = False, cache_dir: str | None = None,
    use_synthetic_data: bool = False,
    debug_seed: int | None = None) -> task_lib.BaselineTask:
  """TFF's landmark classification: a MobileNetV2 of 8 groups over 2,028
  classes, sparse categorical cross-entropy and accuracy; the test data is
  centralized (one data set)."""
  if use_synthetic_data:
    train = gldv2.get_synthetic()
    test = train.create_tf_dataset_for_client(train.client_ids[0])
  else:
    train, test = gldv2.load_data(gld23k=use_gld23k,
                                  cache_dir=cache_dir or 'cache')
  return create_landmark_classification_task_from_datasets(
      train_client_spec, eval_client_spec, train, test, debug_seed)
