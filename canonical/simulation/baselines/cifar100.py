"""TFF's CIFAR-100 baseline (`tff.simulation.baselines.cifar100`): image
classification with a ResNet (group normalization) on crops of CIFAR-100,
read by `tff.simulation.datasets.cifar100` (or its synthetic version)."""

import collections.abc
import enum

import keras
import tensorflow as tf

from canonical import errors
from canonical.learning import models as learning_models
from canonical.simulation.baselines import task as task_lib
from canonical.simulation.datasets import cifar100 as cifar100_data
from canonical.simulation.models import resnet

DEFAULT_CROP_HEIGHT = 24
DEFAULT_CROP_WIDTH = 24
_NUM_CLASSES = 100
_NUM_EXAMPLES_PER_CLIENT = 500
CIFAR_SHAPE = (32, 32, 3)


class ResnetModel(enum.Enum):
  """The ResNets, by TFF's ids."""
  RESNET18 = 'resnet18'
  RESNET34 = 'resnet34'
  RESNET50 = 'resnet50'
  RESNET101 = 'resnet101'
  RESNET152 = 'resnet152'


_BUILDERS = {ResnetModel.RESNET18: resnet.create_resnet18,
             ResnetModel.RESNET34: resnet.create_resnet34,
             ResnetModel.RESNET50: resnet.create_resnet50,
             ResnetModel.RESNET101: resnet.create_resnet101,
             ResnetModel.RESNET152: resnet.create_resnet152}


def _resnet(model_id, input_shape):
  try:
    model = ResnetModel(model_id)
  except ValueError:
    raise errors.InvalidValueError(
        f'model_id must be one of {[m.value for m in ResnetModel]}, got '
        f'{model_id!r}.') from None
  return _BUILDERS[model](input_shape=input_shape, num_classes=_NUM_CLASSES)


def build_image_map(crop_shape, distort=False):
  """example -> (standardized crop as float32, label): a random crop and
  flip with `distort`, else the central crop."""

  def crop(image):
    if distort:
      return tf.image.random_flip_left_right(
          tf.image.random_crop(image, size=crop_shape))
    return tf.image.resize_with_crop_or_pad(image, crop_shape[0],
                                            crop_shape[1])

  def image_map(example):
    image = crop(tf.cast(example['image'], tf.float32))
    return tf.image.per_image_standardization(image), example['label']

  return image_map


def create_preprocess_fn(spec, crop_shape=CIFAR_SHAPE, distort_image=False):
  """Dataset of CIFAR-100 examples -> batches of (crop, label)."""
  if not isinstance(crop_shape, collections.abc.Iterable):
    raise errors.InvalidTypeError('crop_shape must be an iterable.')
  crop_shape = tuple(crop_shape)
  if len(crop_shape) != 3:
    raise errors.InvalidValueError(
        f'crop_shape must be (height, width, channels), got {crop_shape}.')
  image_map = build_image_map(crop_shape, distort_image)

  def preprocess_fn(dataset):
    dataset = task_lib.shuffle_repeat_take(dataset, spec,
                                           _NUM_EXAMPLES_PER_CLIENT)
    # Cropped before batching: each image its own crop.
    return dataset.map(image_map, num_parallel_calls=tf.data.AUTOTUNE).batch(
        spec.batch_size)

  return preprocess_fn


def create_image_classification_task_with_datasets(
    train_client_spec, eval_client_spec, model_id, crop_height, crop_width,
    distort_train_images, train_data, test_data) -> task_lib.BaselineTask:
  """The image classification task on given CIFAR-100-like data."""
  if not (1 <= crop_height <= 32 and 1 <= crop_width <= 32):
    raise errors.InvalidValueError(
        'crop_height and crop_width must be between 1 and 32, got '
        f'{crop_height} and {crop_width}.')
  crop_shape = (crop_height, crop_width, 3)
  _resnet(model_id, crop_shape)  # Checks the id now, as TFF does later.
  eval_client_spec = eval_client_spec or task_lib.ClientSpec(
      num_epochs=1, batch_size=64, shuffle_buffer_size=1)
  task_datasets = task_lib.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data,
      train_preprocess_fn=create_preprocess_fn(
          train_client_spec, crop_shape, distort_train_images),
      eval_preprocess_fn=create_preprocess_fn(eval_client_spec, crop_shape))

  def model_fn():
    return learning_models.from_keras_model(
        _resnet(model_id, crop_shape),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        input_spec=task_datasets.element_type_structure,
        metrics=[keras.metrics.SparseCategoricalAccuracy()])

  return task_lib.BaselineTask(task_datasets, model_fn)


def create_image_classification_task(
    train_client_spec: task_lib.ClientSpec,
    eval_client_spec: task_lib.ClientSpec | None = None,
    model_id: str | ResnetModel = 'resnet18',
    crop_height: int = DEFAULT_CROP_HEIGHT,
    crop_width: int = DEFAULT_CROP_WIDTH,
    distort_train_images: bool = False, cache_dir: str | None = None,
    use_synthetic_data: bool = False) -> task_lib.BaselineTask:
  """TFF's CIFAR-100 classification: a ResNet (`model_id`) on
  `crop_height` x `crop_width` crops (random crops and flips for training
  with `distort_train_images`), sparse categorical cross-entropy and
  accuracy."""
  if use_synthetic_data:
    train = test = cifar100_data.get_synthetic()
  else:
    train, test = cifar100_data.load_data(cache_dir=cache_dir)
  return create_image_classification_task_with_datasets(
      train_client_spec, eval_client_spec, model_id, crop_height, crop_width,
      distort_train_images, train, test)
