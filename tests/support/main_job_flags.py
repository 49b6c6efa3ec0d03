"""The main job's flag combinations whose forms are recorded
(scripts/record_main_job_forms.py), and how a test builds and runs today's
process for one of them. Two records: BEFORE, the forms of commit feb7b67
(the older FedAvg builder, before issue 37 moved the main job onto TFF's
FedAvg), kept as history; AFTER, the forms since, which the script rewrites.

Every combination runs `small_8x8` on 8x8 images of 10 classes (the digits'
shape); each aggregation the main job offers appears once: none, 8-bit both
ways, DRIVE, top-k with error feedback, secure sums, DP (fixed and adaptive
clip), DP through secure sums, and TFF's FedAvg with each of its aggregators.
"""

import os

import numpy as np
import tensorflow as tf

from pipelines import fedavg

_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), 'data')
BEFORE = os.path.join(_DATA, 'main_job_forms')
AFTER = os.path.join(_DATA, 'main_job_forms_tff')
NOISE_SEED = 20261129  # A DP run's secret seed, fixed for the record.

FLAGS = {
    'plain': {},
    'uniform8_both_ways': dict(broadcast_encoder='uniform:8',
                               aggregation_encoder='uniform:8'),
    'drive': dict(aggregation_encoder='drive'),
    'top_k_error_feedback': dict(aggregation_encoder='top_k:0.05',
                                 error_feedback=True, threshold=100),
    'secure8': dict(aggregation_encoder='secure:8'),
    'dp': dict(noise_multiplier=0.5, clip=0.5),
    'dp_adaptive_clip': dict(noise_multiplier=0.5, clip=0.5,
                             adaptive_clip=True),
    'dp_through_secure8': dict(noise_multiplier=0.5, clip=0.5,
                               aggregation_encoder='secure:8'),
    'tff_mean': dict(tff_aggregator='mean'),
    'tff_compression': dict(tff_aggregator='compression'),
    'tff_robust': dict(tff_aggregator='robust'),
    'tff_secure': dict(tff_aggregator='secure'),
}


def config(name):
  return fedavg.Config(clients_per_round=3, seed=7, output_dir='unused',
                       **FLAGS[name])


def process(name):
  """Today's process for the named flags (the main job's `build_process`)."""
  cfg = config(name)
  _, model = fedavg.model_for(cfg, (8, 8, 1), 10)
  return fedavg.build_process(cfg, model, noise_seed=NOISE_SEED)


def form_path(name, record=AFTER):
  return os.path.join(record, f'{name}.pb')


def clients():
  """Three clients of 8x8 images, batched as the main job's data is."""
  rng = np.random.default_rng(3)
  return [tf.data.Dataset.from_tensor_slices(
      (rng.uniform(size=(n, 8, 8, 1)).astype(np.float32),
       rng.integers(0, 10, n).astype(np.int32))).batch(20) for n in
          (12, 30, 25)]
