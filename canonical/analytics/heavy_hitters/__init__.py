"""Private heavy hitters (TFF's `tff.analytics.heavy_hitters`): `iblt`."""

from canonical.analytics.heavy_hitters import iblt

__all__ = ['iblt']
