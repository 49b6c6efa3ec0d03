"""Ready models for simulations (TFF's `tff.simulation.models`)."""

from canonical.simulation.models import mnist

__all__ = ['mnist']
