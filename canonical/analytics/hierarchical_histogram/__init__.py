"""Hierarchical histograms (TFF's `build_hierarchical_histogram_process`,
`HierarchicalHistogramDecoder`)."""

from canonical.analytics.hierarchical_histogram.hierarchical_histogram_decoder import HierarchicalHistogramDecoder
from canonical.analytics.hierarchical_histogram.hierarchical_histogram_lib import build_hierarchical_histogram_process

__all__ = ['HierarchicalHistogramDecoder',
           'build_hierarchical_histogram_process']
