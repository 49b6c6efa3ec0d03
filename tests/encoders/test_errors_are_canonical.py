"""Every error `encoders` raises is a `canonical.errors.Error` of the built-in
kind tensor_encoding raises there, so a command line catches one type and
tensor_encoding's own tests (`assertRaises(ValueError)`) still pass."""

import ast
import builtins
import importlib
import pathlib
import pkgutil

import pytest
import tensorflow as tf

from canonical import errors
import encoders
from encoders import errors as encoder_errors
from encoders.core import core_encoder
from encoders.encoders import common_encoders
from encoders.stages import basic
from encoders.stages import float_levels
from encoders.stages import quantization
from encoders.stages import sparsification

_ROOT = pathlib.Path(encoders.__file__).parent
# `encoders.testing` is our test harness, not the library: its errors are
# test failures.
_SKIPPED_PACKAGE = 'testing'
# (path under encoders/, the raised name) -> why it may stay a plain builtin.
# None needs to: tensor_encoding's interfaces are abstract (abc), with no
# `raise NotImplementedError` of theirs to keep.
_ALLOWED = {}


def _library_modules():
  for info in pkgutil.walk_packages(encoders.__path__, 'encoders.'):
    if info.name.split('.')[1] != _SKIPPED_PACKAGE:
      yield importlib.import_module(info.name)


def _path(module):
  return pathlib.Path(module.__file__).relative_to(_ROOT).as_posix()


def _resolve(node, namespace):
  """The object an `a.b.C` expression names in `namespace`, or None (a local
  name: a caught exception raised again, not one made here)."""
  if isinstance(node, ast.Name):
    if node.id in namespace:
      return namespace[node.id]
    return getattr(builtins, node.id, None)
  if isinstance(node, ast.Attribute):
    owner = _resolve(node.value, namespace)
    return None if owner is None else getattr(owner, node.attr, None)
  return None


def _raises(module):
  """(line, name as written, class) of each `raise` in `module` whose
  exception class it names."""
  tree = ast.parse(pathlib.Path(module.__file__).read_text(encoding='utf-8'))
  for node in ast.walk(tree):
    if not isinstance(node, ast.Raise) or node.exc is None:
      continue  # A bare `raise` raises what was caught.
    target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    cls = _resolve(target, vars(module))
    if isinstance(cls, type) and issubclass(cls, BaseException):
      yield node.lineno, ast.unparse(target), cls


def test_every_raise_is_a_canonical_error():
  seen, plain = 0, []
  for module in _library_modules():
    for line, name, cls in _raises(module):
      seen += 1
      if (not issubclass(cls, errors.Error)
          and (_path(module), name) not in _ALLOWED):
        plain.append((_path(module), line, name))
  assert seen > 100, f'the scan found only {seen} raises: is it broken?'
  assert not plain, ('raises that are not canonical.errors.Error (raise '
                     'errors.InvalidValueError for a ValueError, '
                     'errors.InvalidTypeError for a TypeError):\n' +
                     '\n'.join(f'encoders/{path}:{line}: raise {name}'
                               for path, line, name in sorted(plain)))


def test_exception_classes_of_encoders_are_canonical_errors():
  defined = [value for module in _library_modules()
             for value in vars(module).values()
             if isinstance(value, type) and issubclass(value, BaseException)
             and value.__module__ == module.__name__]
  assert encoder_errors.StageKeyError in defined
  assert encoder_errors.InvalidValueError is errors.InvalidValueError
  assert [cls for cls in defined if not issubclass(cls, errors.Error)] == []
  # What AutoGraph asks of a class to raise it again as itself.
  assert [cls for cls in defined
          if cls.__init__ is not Exception.__init__] == []


@pytest.mark.parametrize('bits', [0, 17])
def test_bits_out_of_range_is_a_value_error_and_an_error(bits):
  with pytest.raises(ValueError) as caught:
    quantization.IntegerUniformQuantizationEncodingStage(bits=bits)
  assert isinstance(caught.value, errors.Error)
  assert str(caught.value) == (
      'IntegerUniformQuantizationEncodingStage: bits must be in [1, 16], '
      f'got {bits}.')
  with pytest.raises(errors.InvalidValueError):
    float_levels.UniformQuantizationEncodingStage(bits=bits)


def test_bits_of_a_wrong_kind_is_a_type_error_and_an_error():
  with pytest.raises(TypeError) as caught:
    quantization.IntegerUniformQuantizationEncodingStage(bits='8')
  assert isinstance(caught.value, errors.Error)
  with pytest.raises(errors.InvalidTypeError):
    float_levels.UniformQuantizationEncodingStage(bits=tf.constant(8))


def test_not_an_encoder_is_a_type_error_and_an_error():
  with pytest.raises(TypeError) as caught:
    common_encoders.as_simple_encoder(basic.IdentityEncodingStage(),
                                      tf.TensorSpec([3], tf.float32))
  assert isinstance(caught.value, errors.Error)


def test_a_bad_key_is_a_key_error_and_an_error():
  composer = core_encoder.EncoderComposer(basic.FlattenEncodingStage())
  with pytest.raises(KeyError) as caught:
    composer.add_child(basic.IdentityEncodingStage(), 'no_such_key')
  assert isinstance(caught.value, errors.Error)
  # Its text is a KeyError's: the message, quoted.
  assert str(caught.value).startswith('"Stage ')
  composer.add_child(basic.IdentityEncodingStage(), 'flattened_values')
  with pytest.raises(encoder_errors.StageKeyError, match='already has a child'):
    composer.add_child(basic.IdentityEncodingStage(), 'flattened_values')


def test_raised_while_tracing_it_stays_a_value_error_and_an_error():
  # AutoGraph raises an error from traced code again as a new one of its
  # class only for classes it can rebuild; others become a StagingError.
  stage = sparsification.TopKEncodingStage(k=6)
  encode = tf.function(lambda x: stage.encode(x, {}))
  with pytest.raises(ValueError,
                     match='TopKEncodingStage: k=6 exceeds') as caught:
    encode(tf.zeros([5]))
  assert isinstance(caught.value, errors.Error)
  assert isinstance(caught.value, encoder_errors.InvalidValueError)
