"""`tff.tensorflow` of TensorFlow Federated 0.87: `computation`, a pure
TensorFlow function (typed, or typed by its first use)."""

from canonical.core.computations import tf_computation as computation

__all__ = ['computation']
