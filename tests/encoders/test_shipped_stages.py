"""Every shipped float stage passes the public harness, with what it claims."""

import pytest

from encoders import stages
from encoders import testing

# (stage factory, harness claims). The bitpacking stages take quantization
# levels, not arbitrary floats, so the float harness does not apply; their
# exactness is tested in test_stages_quantization.py.
SHIPPED = {
    'identity': (stages.IdentityEncodingStage, dict(lossless=True)),
    'flatten': (stages.FlattenEncodingStage, dict(lossless=True)),
    'cast_float16': (lambda: stages.CastEncodingStage('float16'),
                     dict(max_relative_error=1e-3)),
    'cast_bfloat16': (lambda: stages.CastEncodingStage('bfloat16'),
                      dict(max_relative_error=1e-2)),
    'clip_by_norm': (lambda: stages.ClipByNormEncodingStage(1e6),
                     dict(lossless=True, atol=1e-6)),
    'clip_by_value': (lambda: stages.ClipByValueEncodingStage(-1e6, 1e6),
                      dict(lossless=True)),
    'uniform_8bit': (lambda: stages.UniformQuantizationEncodingStage(8),
                     dict(unbiased=True, max_relative_error=0.02)),
    'uniform_2bit_fixed_range': (
        lambda: stages.UniformQuantizationEncodingStage(2, min_max=(-8., 8.)),
        dict(unbiased=True, max_relative_error=3.0)),
    'uniform_4bit_nearest': (
        lambda: stages.UniformQuantizationEncodingStage(4, stochastic=False),
        dict(max_relative_error=0.1)),
    'integer_uniform_8bit': (
        lambda: stages.IntegerUniformQuantizationEncodingStage(8),
        dict(unbiased=True, max_relative_error=0.02)),
    'integer_uniform_2bit_fixed_range': (
        lambda: stages.IntegerUniformQuantizationEncodingStage(
            2, min_max=(-8., 8.)),
        dict(unbiased=True, max_relative_error=3.0)),
    'adaptive_range_8bit': (
        lambda: stages.AdaptiveRangeQuantizationEncodingStage(
            8, initial_range=10.0),
        dict(unbiased=True, max_relative_error=0.05)),
    # Lossless up to rounding, which bfloat16 makes ~1e-2 (exactness in float32
    # and float64 is tested in test_stages_rotation.py).
    'hadamard': (stages.HadamardEncodingStage, dict(max_relative_error=2e-2)),
    'unpadded_hadamard': (stages.UnpaddedHadamardEncodingStage,
                          dict(max_relative_error=2e-2)),
    'top_k': (lambda: stages.TopKEncodingStage(fraction=0.5),
              dict(max_relative_error=0.9)),
    'random_k': (lambda: stages.RandomSubsamplingEncodingStage(0.5),
                 dict(unbiased=True)),
    'sign': (stages.SignEncodingStage, dict(max_relative_error=1.0)),
}


@pytest.mark.parametrize('name', sorted(SHIPPED))
def test_shipped_stage_passes_harness(name):
  factory, claims = SHIPPED[name]
  testing.check_stage(factory(), **claims)
