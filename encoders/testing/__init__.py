"""Tools for testing encoding stages, two ways.

The harness (`harness.py`, re-exported here) checks any stage against the
contract the encoders rely on, from pytest:

  from encoders import testing

  def test_my_stage():
    testing.check_stage(MyStage(bits=8), max_relative_error=0.02, unbiased=True)

`check_stage` runs every applicable check; each check is also a function of
its own (`check_round_trip`, `check_separate_traces`, ...).

`encoders.testing.test_utils` is tensor_encoding's `test_utils` API
(`BaseEncodingStageTest` and example stages), for stage tests written for
tensor_encoding. Import it by that path; this package does not load it.
"""

from encoders.testing.harness import ALL_CHECKS
from encoders.testing.harness import check_commutes_with_sum
from encoders.testing.harness import check_deterministic
from encoders.testing.harness import check_dtypes
from encoders.testing.harness import check_round_trip
from encoders.testing.harness import check_scalar_empty_dynamic
from encoders.testing.harness import check_separate_traces
from encoders.testing.harness import check_shape_and_dtype
from encoders.testing.harness import check_stage
from encoders.testing.harness import check_structure
from encoders.testing.harness import check_unbiased
from encoders.testing.harness import DEFAULT_SHAPES
from encoders.testing.harness import FLOAT_DTYPES
from encoders.testing.harness import make_input
from encoders.testing.harness import NUM_SUMMANDS_DTYPE
from encoders.testing.harness import SCALAR_AND_EMPTY_SHAPES
from encoders.testing.harness import SEED_KEY
from encoders.testing.harness import UNBIASED_SHAPE
