"""The ResNets of TFF's CIFAR-100 baseline (pre-activation ResNets, He et
al. 2016, with group normalization by default), as Keras 3 models with TFF's
layers and shapes."""

import enum

import keras

from canonical import errors

_BATCH_NORM_DECAY = 0.997
_BATCH_NORM_EPSILON = 1e-5
_L2_WEIGHT_DECAY = 1e-4


class ResidualBlock(enum.Enum):
  BASIC = 'basic'
  BOTTLENECK = 'bottleneck'


class NormLayer(enum.Enum):
  GROUP_NORM = 'group_norm'
  BATCH_NORM = 'batch_norm'


def _norm(x, norm):
  if norm is NormLayer.GROUP_NORM:
    return keras.layers.GroupNormalization(axis=-1)(x)
  if norm is NormLayer.BATCH_NORM:
    return keras.layers.BatchNormalization(
        axis=-1, momentum=_BATCH_NORM_DECAY, epsilon=_BATCH_NORM_EPSILON)(x)
  raise errors.InvalidValueError(
      f'norm must be a NormLayer, got {norm!r}.')


def _conv(x, filters, kernel_size, strides=(1, 1), padding='same'):
  return keras.layers.Conv2D(
      filters, kernel_size, strides=strides, padding=padding, use_bias=False,
      kernel_initializer='he_normal',
      kernel_regularizer=keras.regularizers.L2(_L2_WEIGHT_DECAY))(x)


def _norm_relu(x, norm):
  return keras.layers.Activation('relu')(_norm(x, norm))


def _shortcut(inputs, residual, norm):
  """`inputs + residual`, `inputs` projected by a 1x1 convolution (and
  normalized) where the shapes differ."""
  in_shape, out_shape = inputs.shape, residual.shape
  stride_rows = int(round(in_shape[1] / out_shape[1]))
  stride_cols = int(round(in_shape[2] / out_shape[2]))
  shortcut = inputs
  if stride_rows > 1 or stride_cols > 1 or in_shape[-1] != out_shape[-1]:
    shortcut = _conv(inputs, out_shape[-1], (1, 1),
                     strides=(stride_rows, stride_cols), padding='valid')
    shortcut = _norm(shortcut, norm)
  return keras.layers.add([shortcut, residual])


def _basic_block(x, filters, norm, strides, normalize_first):
  y = _norm_relu(x, norm) if normalize_first else x
  y = _conv(y, filters, (3, 3), strides)
  y = _conv(_norm_relu(y, norm), filters, (3, 3), strides)
  return _shortcut(x, y, norm)


def _bottleneck_block(x, filters, norm, strides, normalize_first):
  y = _norm_relu(x, norm) if normalize_first else x
  y = _conv(y, filters, (1, 1), strides)
  y = _conv(_norm_relu(y, norm), filters, (3, 3), strides)
  y = _conv(_norm_relu(y, norm), filters * 4, (1, 1), strides)
  return _shortcut(x, y, norm)


def _positive_ints(value, length=None):
  try:
    values = list(value)
  except TypeError:
    return False
  return (all(isinstance(v, int) and v > 0 for v in values) and
          (length is None or len(values) == length))


def create_resnet(input_shape, num_classes=10,
                  residual_block=ResidualBlock.BOTTLENECK, repetitions=None,
                  initial_filters=64, initial_strides=(2, 2),
                  initial_kernel_size=(7, 7), initial_max_pooling=True,
                  norm_layer=NormLayer.GROUP_NORM):
  """A ResNet on `input_shape` images (channels last) with softmax outputs
  over `num_classes`; `repetitions` blocks per stage (default [3, 4, 6,
  3]), each stage doubling the filters."""
  if not _positive_ints(input_shape, 3):
    raise errors.InvalidValueError(
        f'input_shape must be three positive integers, got {input_shape!r}.')
  if num_classes < 1 or initial_filters < 1:
    raise errors.InvalidValueError(
        'num_classes and initial_filters must be positive integers.')
  blocks = {ResidualBlock.BASIC: _basic_block,
            ResidualBlock.BOTTLENECK: _bottleneck_block}
  if residual_block not in blocks:
    raise errors.InvalidValueError(
        f'residual_block must be a ResidualBlock, got {residual_block!r}.')
  repetitions = repetitions or [3, 4, 6, 3]
  for name, value, length in (('repetitions', repetitions, None),
                              ('initial_strides', initial_strides, 2),
                              ('initial_kernel_size', initial_kernel_size,
                               2)):
    if not _positive_ints(value, length):
      raise errors.InvalidValueError(
          f'{name} must be positive integers, got {value!r}.')
  if not isinstance(norm_layer, NormLayer):
    raise errors.InvalidValueError(
        f'norm_layer must be a NormLayer, got {norm_layer!r}.')
  block = blocks[residual_block]
  images = keras.Input(shape=tuple(input_shape))
  x = _norm_relu(_conv(images, initial_filters, tuple(initial_kernel_size),
                       tuple(initial_strides)), norm_layer)
  if initial_max_pooling:
    x = keras.layers.MaxPooling2D(pool_size=(3, 3),
                                  strides=tuple(initial_strides),
                                  padding='same')(x)
  filters = initial_filters
  for stage, count in enumerate(repetitions):
    for i in range(count):
      x = block(x, filters, norm_layer, strides=(1, 1),
                normalize_first=not (stage == 0 and i == 0))
    filters *= 2
  x = _norm_relu(x, norm_layer)
  x = keras.layers.GlobalAveragePooling2D()(x)
  x = keras.layers.Dense(
      num_classes, activation='softmax',
      kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
      kernel_regularizer=keras.regularizers.L2(_L2_WEIGHT_DECAY),
      bias_regularizer=keras.regularizers.L2(_L2_WEIGHT_DECAY))(x)
  return keras.Model(images, x)


def _create(block, repetitions):
  def create(input_shape, num_classes, norm_layer=NormLayer.GROUP_NORM):
    return create_resnet(input_shape, num_classes, residual_block=block,
                         repetitions=repetitions, norm_layer=norm_layer)
  return create


create_resnet18 = _create(ResidualBlock.BASIC, [2, 2, 2, 2])
create_resnet34 = _create(ResidualBlock.BASIC, [3, 4, 6, 3])
create_resnet50 = _create(ResidualBlock.BOTTLENECK, [3, 4, 6, 3])
create_resnet101 = _create(ResidualBlock.BOTTLENECK, [3, 4, 23, 3])
create_resnet152 = _create(ResidualBlock.BOTTLENECK, [3, 8, 36, 3])
