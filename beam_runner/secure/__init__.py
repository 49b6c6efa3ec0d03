"""A round's secure sums on Beam: the masking protocol's steps as pipeline
stages (`round`, which wires `protocol_steps`)."""
