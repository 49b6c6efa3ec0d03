"""What a run shows its user: the per-round line, bit counts, time left,
accuracy-vs-bits plots.

Plots are rendered in memory and written through `canonical.io`, so
they land whole wherever the run's output lives (local or s3://).
"""

import io

from canonical import io as storage_lib

_UNITS = (('Gibit', 2**30), ('Mibit', 2**20), ('Kibit', 2**10))


def human_bits(bits):
  """Bits in binary units, as the compression tutorial prints them."""
  for unit, size in _UNITS:
    if bits >= size:
      return f'{bits / size:.2f} {unit}'
  return f'{int(bits)} bit'


def time_left(seconds, done, remaining):
  """'~12 s left' for `remaining` more steps at the pace of the `done` steps
  that took `seconds`; '' when none remain or none is done yet."""
  if remaining <= 0 or done <= 0:
    return ''
  left = seconds / done * remaining
  if left < 90:
    return f'~{max(1, round(left))} s left'
  if left < 90 * 60:
    return f'~{left / 60:.0f} min left'
  return f'~{left / 3600:.1f} h left'


def round_line(point, rounds):
  """The tutorial's line for one round (see `curve_point`)."""
  test = point.get('test_accuracy')
  test_text = '' if test is None else f'  test accuracy {test:.4f}'
  spent = point.get('epsilon')
  spent_text = '' if spent is None else f'  epsilon {spent:.3f}'
  return (f'round {point["round"]:>3}/{rounds}: loss {point["loss"]:.4f}  '
          f'accuracy {point["accuracy"]:.4f}{test_text}{spent_text}  '
          f'broadcast {human_bits(point["broadcast_bits"])}  aggregated '
          f'{human_bits(point["aggregated_bits"])} (cumulative)')


def curve_point(outcome, previous=None):
  """One round's outcome as a point of the run's curve: metrics and
  cumulative bits (the previous point's plus this round's)."""
  metrics = outcome['metrics']
  evaluation = outcome.get('evaluation') or {}
  return {
      'round': outcome['round'],
      'loss': _training_metric(metrics, 'loss'),
      'accuracy': _training_metric(metrics, 'accuracy'),
      'test_loss': evaluation.get('loss'),
      'test_accuracy': evaluation.get('accuracy'),
      # DP runs only: the runner's account (rounds committed before it had
      # one carry the job's own, as an evaluation).
      'epsilon': (outcome.get('privacy') or evaluation).get('epsilon'),
      'clients': outcome['clients_ok'],
      'round_broadcast_bits': outcome['bits_broadcast'],
      'round_aggregated_bits': outcome['bits_aggregated'],
      'broadcast_bits': outcome['bits_broadcast'] + (
          previous['broadcast_bits'] if previous else 0),
      'aggregated_bits': outcome['bits_aggregated'] + (
          previous['aggregated_bits'] if previous else 0),
  }


def _training_metric(metrics, name):
  """A round's training metric: flat as our FedAvg reports it, or under
  TFF's `client_work/train/` (the runner's flattened TFF metrics)."""
  return metrics.get(name, metrics.get(f'client_work/train/{name}'))


def plot_accuracy_vs_bits(curves, path, title, storage=None):
  """One PNG: test accuracy against cumulative uplink and downlink bits.

  `curves` maps a label to its list of `curve_point`s. Log-scale bits, so
  settings that differ by orders of magnitude share the axes.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')  # Files only: no screen on workers or CI.
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  figure, axes = pyplot.subplots(1, 2, figsize=(11, 4.2), sharey=True)
  for label, points in curves.items():
    points = [p for p in points if p.get('test_accuracy') is not None]
    if not points:
      continue
    accuracy = [p['test_accuracy'] for p in points]
    axes[0].plot([p['aggregated_bits'] for p in points], accuracy,
                 marker='.', label=label)
    axes[1].plot([p['broadcast_bits'] for p in points], accuracy,
                 marker='.', label=label)
  for ax, direction in zip(axes, ('uplink (aggregated)',
                                  'downlink (broadcast)')):
    ax.set_xscale('log')
    ax.set_xlabel(f'cumulative {direction} bits')
    ax.grid(True, which='both', alpha=0.3)
  axes[0].set_ylabel('test accuracy')
  axes[1].legend(loc='lower right', fontsize='small')
  figure.suptitle(title)
  figure.tight_layout()
  buffer = io.BytesIO()
  try:
    figure.savefig(buffer, format='png', dpi=110)
  finally:
    pyplot.close(figure)
  return (storage or storage_lib.default()).write_bytes(
      path, buffer.getvalue())  # Whole or not at all.
