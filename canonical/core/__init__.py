"""The federated language: types, the IR, computations, intrinsics, sequences.

What a user writes (`tf_computation`, `federated_computation`, the
`federated_*` and `sequence_*` intrinsics) is traced into the IR that the
compiler (`canonical.compiler`) and the executors (`canonical.executors`) read.
"""
