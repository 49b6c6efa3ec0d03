"""Helpers for writing encoding stages, as tensor_encoding's `utils` package.

`py_utils` works on Python structures and never touches a graph; `tf_utils`
builds TensorFlow ops (Hadamard transform, seeded random values, bit
packing).
"""

from encoders.utils import py_utils
from encoders.utils import tf_utils
