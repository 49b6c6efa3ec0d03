"""TFF's FedAvg with error feedback (our extension of TFF's API), on the
small model of `tff_087_examples`: shared by its tests in process, on Beam
and on Dask."""

import canonical as tff
from canonical.learning import algorithms
from encoders import encoders as te
import tff_087_examples as example

SGDM = tff.learning.optimizers.build_sgdm


def top_half(spec):
  """Top-k of each matrix, the bias as it is: error feedback has work."""
  if spec.shape.num_elements() > 3:
    return te.as_gather_encoder(te.top_k(0.5), spec)
  return te.as_gather_encoder(te.identity(), spec)


def fed_avg(model_fn=example.model_fn):
  """`build_weighted_fed_avg` whose mean's value sum keeps residuals."""
  return algorithms.build_weighted_fed_avg(
      model_fn, SGDM(0.5), SGDM(1.0),
      model_aggregator=tff.aggregators.MeanFactory(
          tff.aggregators.EncodedSumFactory(top_half, error_feedback=True)))


def client_data():
  """Four clients, a dict as the Beam runner takes them."""
  return {f'c{i}': data for i, data in
          enumerate(example.client_data() + example.client_data())}
