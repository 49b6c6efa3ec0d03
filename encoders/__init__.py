"""Composable lossy tensor encoders in pure TensorFlow, compatible with tensor_encoding.

`import encoders as te` gives `te.core`, `te.encoders` and `te.stages`, with the
names tensor_encoding users know.
"""

from encoders import core
from encoders import encoders
from encoders import stages
