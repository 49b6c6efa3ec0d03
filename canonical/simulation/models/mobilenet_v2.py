"""The MobileNetV2 of TFF's landmark baseline (Sandler et al. 2018, with
group normalization), as a Keras 3 model with TFF's layers and shapes."""

import math

import keras

from canonical import errors

# (expansion factor, stride, filters) of each inverted residual block.
_BLOCKS = ((1, 1, 16), (6, 2, 24), (6, 1, 24), (6, 2, 32), (6, 1, 32),
           (6, 1, 32), (6, 2, 64), (6, 1, 64), (6, 1, 64), (6, 1, 64),
           (6, 1, 96), (6, 1, 96), (6, 1, 96), (6, 2, 160), (6, 1, 160),
           (6, 1, 160), (6, 1, 320))


def _make_divisible(value, divisor):
  """The multiple of `divisor` nearest `value`, at least 90% of it."""
  return max(divisor * math.floor((value + divisor / 2) / divisor),
             divisor * math.ceil(0.9 * value / divisor))


def compute_pad(image_shape, kernel_size, enforce_odd=True):
  """The zero padding ((top, bottom), (left, right)) before a strided
  convolution of `kernel_size`; one less before an even dimension."""
  half = kernel_size // 2
  adjust = ((1 - image_shape[0] % 2, 1 - image_shape[1] % 2)
            if enforce_odd else (0, 0))
  return (half - adjust[0], half), (half - adjust[1], half)


def _normalized(x, name, num_groups, dropout_prob):
  x = keras.layers.GroupNormalization(groups=num_groups, axis=-1,
                                      name=f'{name}_gn')(x)
  if dropout_prob:
    x = keras.layers.Dropout(dropout_prob, name=f'{name}_dropout')(x)
  return x


def _inverted_res_block(inputs, expansion_factor, stride, filters, alpha,
                        block_number, num_groups, dropout_prob,
                        expansion_layer):
  prefix = f'block_{block_number}_'
  channels = inputs.shape[-1]
  x = inputs
  if expansion_layer:
    x = keras.layers.Conv2D(expansion_factor * channels, kernel_size=1,
                            padding='same', use_bias=False,
                            name=prefix + 'expand_conv')(x)
    x = _normalized(x, prefix + 'expand', num_groups, dropout_prob)
    x = keras.layers.ReLU(6.0, name=prefix + 'expand_relu')(x)
  if stride % 2 == 0:
    x = keras.layers.ZeroPadding2D(
        padding=compute_pad((inputs.shape[1], inputs.shape[2]), 3),
        name=prefix + 'pad')(x)
  x = keras.layers.DepthwiseConv2D(
      kernel_size=3, strides=stride, use_bias=False,
      padding='same' if stride == 1 else 'valid',
      name=prefix + 'depthwise_conv')(x)
  x = _normalized(x, prefix + 'depthwise', num_groups, dropout_prob)
  x = keras.layers.ReLU(6.0, name=prefix + 'depthwise_relu')(x)
  projection = _make_divisible(int(filters * alpha), 8)
  x = keras.layers.Conv2D(projection, kernel_size=1, padding='same',
                          use_bias=False, name=prefix + 'project_conv')(x)
  x = _normalized(x, prefix + 'project', num_groups, dropout_prob)
  if channels == projection and stride == 1:
    x = keras.layers.add([inputs, x])
  return x


def create_mobilenet_v2(input_shape, alpha=1.0, pooling='avg', num_groups=2,
                        dropout_prob=None, num_classes=1000):
  """MobileNetV2 on `input_shape` images (channels last) with softmax
  outputs over `num_classes`; `alpha` scales the widths."""
  if not (isinstance(input_shape, tuple) and len(input_shape) == 3 and
          all(isinstance(d, int) and d > 0 for d in input_shape)):
    raise errors.InvalidValueError(
        f'input_shape must be a tuple of three positive integers, got '
        f'{input_shape!r}.')
  if not isinstance(alpha, float) or alpha <= 0:
    raise errors.InvalidValueError(f'alpha must be a positive float, got '
                                   f'{alpha!r}.')
  if pooling not in ('avg', 'max'):
    raise errors.InvalidValueError(
        f"pooling must be 'avg' or 'max', got {pooling!r}.")
  if num_groups < 1 or num_classes < 1:
    raise errors.InvalidValueError(
        'num_groups and num_classes must be positive integers.')
  if dropout_prob and not (isinstance(dropout_prob, float) and
                           0 <= dropout_prob <= 1):
    raise errors.InvalidValueError(
        f'dropout_prob must be None or a float in [0, 1], got '
        f'{dropout_prob!r}.')
  images = keras.Input(shape=input_shape)
  x = keras.layers.ZeroPadding2D(compute_pad(input_shape[:2], 3),
                                 name='initial_pad')(images)
  x = keras.layers.Conv2D(_make_divisible(32 * alpha, 8), kernel_size=3,
                          strides=(2, 2), padding='valid', use_bias=False,
                          name='initial_conv')(x)
  x = _normalized(x, 'initial', num_groups, dropout_prob)
  x = keras.layers.ReLU(6.0, name='initial_relu')(x)
  for number, (expansion, stride, filters) in enumerate(_BLOCKS):
    x = _inverted_res_block(x, expansion, stride, filters, alpha, number,
                            num_groups, dropout_prob,
                            expansion_layer=number > 0)
  # As the paper: alpha < 1 does not narrow the last layer.
  last = _make_divisible(1280 * alpha, 8) if alpha > 1.0 else 1280
  x = keras.layers.Conv2D(last, kernel_size=1, use_bias=False,
                          name='last_conv')(x)
  x = _normalized(x, 'last', num_groups, dropout_prob)
  x = keras.layers.ReLU(6.0, name='last_relu')(x)
  pool = (keras.layers.GlobalAveragePooling2D if pooling == 'avg' else
          keras.layers.GlobalMaxPooling2D)
  x = pool()(x)
  x = keras.layers.Dense(num_classes, activation='softmax', name='logits')(x)
  return keras.Model(inputs=images, outputs=x)
