"""Research stages, at tensor_encoding's `stages.research` module paths.

`kashin`, `misc`, `quantization` and `clipping` hold the stages of the same
names there; each is our own implementation, written to the published
algorithms and to tensor_encoding's tests.
"""

from encoders.stages.research import clipping
from encoders.stages.research import kashin
from encoders.stages.research import misc
from encoders.stages.research import quantization
