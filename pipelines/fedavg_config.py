"""The main job's experiment: `Config`, one field per flag, checked as a
whole before any work (`ConfigError` names the flags at fault), and what a
rerun in the same output directory must match to resume
(`Config.run_description`)."""

import dataclasses

# TensorFlow and what imports it are imported where they are used, so that
# --help and bad flags are answered at once.
from canonical import errors
from canonical import io as storage_lib
from pipelines import encoder_choice

# The model builders of `canonical.learning.models` a run may name.
MODELS = ('cnn_28x28', 'small_8x8')
# --tff-aggregator: TFF 0.87's model aggregators for its FedAvg
# (`tff_aggregator`); dp (with --noise-multiplier) runs its unweighted FedAvg.
TFF_AGGREGATORS = ('mean', 'compression', 'robust', 'secure', 'dp')
# --dp-mechanism: how --noise-multiplier noises the mean (in words), and how
# the run samples clients so that it can be accounted (`sampling`).
DP_MECHANISMS = {
    'gaussian': 'DP-FedAvg',
    'tree': 'DP-FTRL, tree aggregation',
    'banded': 'DP-FTRL, banded matrix factorization',
    'distributed_skellam': 'distributed DP, Skellam noise at each client',
    'distributed_dgauss': 'distributed DP, discrete Gaussian noise at each '
                          'client',
}

# Defaults that depend on the dataset: the digits are few (1,437 training
# examples, ~72 per client), so each client makes more, larger steps.
# The threshold (tensors of fewer elements travel as they are): the digits
# model's tensors have 72, 8, 4,096, 32, 320 and 10 values, and 1,000
# encodes its 4,096-value kernel (90% of its weights) as the tutorial's
# 10,000 encodes the large ones of its CNN.
_DATASET_DEFAULTS = {
    'digits': {'num_clients': 20, 'epochs': 3, 'client_lr': 0.3,
               'threshold': 1000},
    None: {'num_clients': 100, 'epochs': 1, 'client_lr': 0.1,  # The others.
           'threshold': encoder_choice.DEFAULT_THRESHOLD},
}

DATA_DIR = 'data'
# The command line's experiments go to OUTPUT_ROOT/NAME (`experiment_dir`).
OUTPUT_ROOT = 'fedavg_output'


class ConfigError(errors.Error, ValueError):
  """Flags that do not make a runnable experiment."""


@dataclasses.dataclass
class Config:
  """One experiment; every field has a flag of the same name (dashes for _)."""
  dataset: str = 'digits'
  partition: str = 'iid'
  alpha: float = 0.5
  shards_per_client: int = 2
  # None for these three (and threshold): the dataset's default
  # (_DATASET_DEFAULTS).
  num_clients: int = None
  epochs: int = None
  client_lr: float = None
  model: str = 'auto'
  rounds: int = 10
  clients_per_round: int = 10
  batch_size: int = 20
  server_optimizer: str = 'sgd'
  server_lr: float = 1.0
  server_momentum: float = 0.0
  broadcast_encoder: str = 'none'
  aggregation_encoder: str = 'none'
  threshold: int = None  # None: the dataset's default (_DATASET_DEFAULTS).
  error_feedback: bool = False
  # None: the model aggregator our flags name (encoders, error feedback,
  # secure sums, DP). A name: that tff.learning / tff.aggregators model
  # aggregator (TFF_AGGREGATORS) in TFF 0.87's build_weighted_fed_avg; dp:
  # build_unweighted_fed_avg with tff.learning.dp_aggregator.
  tff_aggregator: str = None
  # With secure:BITS: None (every pair of clients masks), 'auto' or an even k
  # (SecAgg+ ring neighbors; see beam_runner.run's secure_neighbors).
  secure_neighbors: str = None
  # Whom the secure sums' clients hold against: 'malicious' (signed keys and
  # the consistency check) or 'honest' (an honest-but-curious server).
  secure_server: str = 'malicious'
  # DP-FedAvg: None, or the noise multiplier z of a clipped, noised mean.
  noise_multiplier: float = None
  clip: float = 1.0
  adaptive_clip: bool = False
  dp_mechanism: str = 'gaussian'
  bands: int = 4  # --dp-mechanism banded: its strategy's bands.
  ddp_bits: int = 20  # --dp-mechanism distributed_*: the secure sum's bits.
  target_epsilon: float = None
  delta: float = 1e-5
  eval_every: int = 1
  seed: int = 0
  output_dir: str = OUTPUT_ROOT  # Local, or a URL (s3://bucket/run).
  data_dir: str = None  # None: OUTPUT_DIR/data.

  def __post_init__(self):
    if self.tff_aggregator is not None and self.epochs is None:
      self.epochs = 1  # TFF's FedAvg: one pass over each client's data.
    defaults = _DATASET_DEFAULTS.get(self.dataset, _DATASET_DEFAULTS[None])
    for name, value in defaults.items():
      if getattr(self, name) is None:
        setattr(self, name, value)
    if self.data_dir is None:
      self.data_dir = storage_lib.join(self.output_dir, DATA_DIR)
    for name in ('rounds', 'clients_per_round', 'epochs', 'batch_size',
                 'num_clients', 'eval_every', 'shards_per_client'):
      if getattr(self, name) < 1:
        raise ConfigError(f'--{name.replace("_", "-")} must be at least 1, '
                          f'got {getattr(self, name)}.')
    if storage_lib.is_within(self.output_dir, self.data_dir):
      raise ConfigError(f'--output-dir {self.output_dir!r} is inside '
                        f'--data-dir {self.data_dir!r}; the run would write '
                        'among the clients\' files. Choose one outside it.')
    if self.clients_per_round > self.num_clients:
      raise ConfigError(f'--clients-per-round {self.clients_per_round} is '
                        f'more than the {self.num_clients} clients '
                        '(--num-clients); a round cannot sample them.')
    if not self.client_lr > 0 or not self.server_lr > 0:
      raise ConfigError('--client-lr and --server-lr must be positive, got '
                        f'{self.client_lr} and {self.server_lr}.')
    if self.threshold < 0:
      raise ConfigError(f'--threshold must be >= 0, got {self.threshold}.')
    if self.model != 'auto' and self.model not in MODELS:
      raise ConfigError(f'Unknown --model {self.model!r}; choose auto or one '
                        f'of {", ".join(MODELS)}.')
    if self.server_optimizer not in ('sgd', 'adam'):
      raise ConfigError('--server-optimizer must be sgd or adam, got '
                        f'{self.server_optimizer!r}.')
    for flag, text in (('--broadcast-encoder', self.broadcast_encoder),
                       ('--aggregation-encoder', self.aggregation_encoder)):
      try:
        encoder_choice.parse(text)
      except encoder_choice.EncoderChoiceError as e:
        raise ConfigError(f'{flag}: {e}') from None
    if self.error_feedback and encoder_choice.is_identity(
        self.aggregation_encoder):
      raise ConfigError('--error-feedback needs a lossy --aggregation-encoder '
                        '(with none there is no error to feed back).')
    if encoder_choice.secure_bits(self.broadcast_encoder) is not None:
      raise ConfigError('--broadcast-encoder secure: secure aggregation hides '
                        'what clients send; use it as --aggregation-encoder.')
    self._check_privacy()
    self._check_secure_neighbors()
    self._check_tff_aggregator()
    if self.error_feedback and encoder_choice.secure_bits(
        self.aggregation_encoder) is not None:
      raise ConfigError('--error-feedback does not combine with '
                        '--aggregation-encoder secure (its levels are '
                        'unbiased; nothing is dropped to feed back).')

  def _check_tff_aggregator(self):
    if self.tff_aggregator is None:
      return
    if self.tff_aggregator not in TFF_AGGREGATORS:
      raise ConfigError(f'Unknown --tff-aggregator {self.tff_aggregator!r}; '
                        f'choose one of {", ".join(TFF_AGGREGATORS)}.')
    if self.tff_aggregator == 'dp' and not self.private:
      raise ConfigError('--tff-aggregator dp needs --noise-multiplier (the '
                        'round\'s total, as TFF\'s dp_aggregator takes it).')
    ours = [flag for flag, used in (
        ('--broadcast-encoder', not encoder_choice.is_identity(
            self.broadcast_encoder)),
        ('--aggregation-encoder', not encoder_choice.is_identity(
            self.aggregation_encoder)),
        ('--error-feedback', self.error_feedback),
        ('--noise-multiplier', self.private and self.tff_aggregator != 'dp'),
        ('--adaptive-clip', self.adaptive_clip)) if used]
    if ours:
      raise ConfigError(f'--tff-aggregator names one of TFF\'s model '
                        f'aggregators, which compress and noise as they '
                        f'do; drop {", ".join(ours)} (they choose ours).')

  def _check_secure_neighbors(self):
    if self.secure_server not in ('malicious', 'honest'):
      raise ConfigError('--secure-server must be malicious or honest, got '
                        f'{self.secure_server!r}.')
    if self.secure_neighbors is None:
      return
    if encoder_choice.secure_bits(self.aggregation_encoder) is None:
      raise ConfigError('--secure-neighbors needs --aggregation-encoder '
                        'secure:BITS (it shapes the secure sums\' masks).')
    try:
      self.runner_secure_neighbors  # pylint: disable=pointless-statement
    except ValueError:
      raise ConfigError('--secure-neighbors must be auto or an even number, '
                        f'2 or more, got {self.secure_neighbors!r}.') from None

  @property
  def runner_secure_neighbors(self):
    """`secure_neighbors` as `beam_runner.run` takes it."""
    from canonical.secagg import graph as secagg_graph  # pylint: disable=g-import-not-at-top
    return secagg_graph.from_text(
        None if self.secure_neighbors is None else str(self.secure_neighbors))

  @property
  def private(self):
    return self.noise_multiplier is not None

  @property
  def sampling_probability(self):
    return min(1.0, self.clients_per_round / self.num_clients)

  def round_noise_multiplier(self):
    if self.tff_aggregator == 'dp':  # TFF's: the round's total already.
      return self.noise_multiplier
    from canonical import aggregators  # pylint: disable=g-import-not-at-top
    return aggregators.round_noise_multiplier(
        self.noise_multiplier, self.clients_per_round, self.adaptive_clip)

  @property
  def sampling(self):
    """How the runner samples clients: cyclic for DP-FTRL (its accounting
    needs returns bounded), Poisson for the other DP, else fixed."""
    if not self.private:
      return 'fixed'
    return 'cyclic' if self.dp_mechanism in ('tree', 'banded') else 'poisson'

  def _check_privacy(self):
    if not self.private:
      if self.target_epsilon is not None or self.adaptive_clip or (
          self.dp_mechanism != 'gaussian'):
        raise ConfigError('--target-epsilon, --adaptive-clip and '
                          '--dp-mechanism need --noise-multiplier.')
      return
    if self.dp_mechanism not in DP_MECHANISMS:
      raise ConfigError(f'Unknown --dp-mechanism {self.dp_mechanism!r}; '
                        f'choose one of {", ".join(DP_MECHANISMS)}.')
    if self.dp_mechanism != 'gaussian':
      others = [flag for flag, used in (
          ('--tff-aggregator', self.tff_aggregator is not None),
          ('--aggregation-encoder', not encoder_choice.is_identity(
              self.aggregation_encoder)),
          ('--adaptive-clip', self.adaptive_clip and
           self.dp_mechanism != 'tree')) if used]
      if others:
        raise ConfigError(f'--dp-mechanism {self.dp_mechanism} does not '
                          f'combine with {", ".join(others)}.')
      if self.dp_mechanism == 'banded' and not 1 <= self.bands <= self.rounds:
        raise ConfigError(f'--bands must be between 1 and --rounds '
                          f'({self.rounds}), got {self.bands}.')
    from canonical import privacy  # pylint: disable=g-import-not-at-top
    secure = encoder_choice.secure_bits(self.aggregation_encoder) is not None
    if not (secure or encoder_choice.is_identity(self.aggregation_encoder)):
      raise ConfigError('--noise-multiplier replaces the aggregation with '
                        'DP-FedAvg\'s clipped, noised mean; it combines with '
                        '--aggregation-encoder secure:BITS (levels through '
                        'secure aggregation) but not with '
                        f'{self.aggregation_encoder}.')
    if secure and self.adaptive_clip:
      raise ConfigError('--adaptive-clip does not combine with '
                        '--aggregation-encoder secure:BITS yet (its range is '
                        'fixed by the clip); use a fixed --clip.')
    try:
      privacy.check_noise_multiplier(self.noise_multiplier)
      if self.tff_aggregator == 'dp' or (  # Its count's noise must leave
          self.dp_mechanism == 'tree' and self.adaptive_clip):  # room.
        from canonical.aggregators import differential_privacy  # pylint: disable=g-import-not-at-top
        differential_privacy.adaptive_clip_noise_params(
            self.noise_multiplier, self.clients_per_round)
      privacy.check_delta(self.delta)
      if not self.clip > 0:
        raise errors.InvalidValueError(
            f'--clip must be positive, got {self.clip}.')
      if self.target_epsilon is not None and self.dp_mechanism == 'gaussian':
        privacy.check_plan(self.round_noise_multiplier(),
                           self.sampling_probability, self.rounds,
                           self.delta, self.target_epsilon)
    except ValueError as e:
      raise ConfigError(str(e)) from None

  def run_description(self):
    """What must match for a rerun in the same output directory to resume."""
    fields = dataclasses.asdict(self)
    for volatile in ('rounds', 'output_dir', 'data_dir', 'target_epsilon'):
      fields.pop(volatile)
    if not self.private:  # As runs recorded before DP existed.
      for name in ('noise_multiplier', 'clip', 'adaptive_clip', 'delta'):
        fields.pop(name)
    if self.dp_mechanism == 'gaussian':  # As runs recorded before the others.
      fields.pop('dp_mechanism')
    for name, used in (('bands', 'banded'), ('ddp_bits', 'distributed')):
      if not self.dp_mechanism.startswith(used):
        fields.pop(name)
    if self.secure_neighbors is None:  # As runs recorded before it existed.
      fields.pop('secure_neighbors')
    if self.secure_server == 'malicious':  # The default before the flag.
      fields.pop('secure_server')
    if self.tff_aggregator is None:  # As runs recorded before it existed.
      fields.pop('tff_aggregator')
      # Runs before issue 37 kept the older builder's state, which TFF's
      # FedAvg cannot resume: they are another experiment now.
      fields['fed_avg_builder'] = 'tff.learning.algorithms'
    return fields
