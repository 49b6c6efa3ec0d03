"""TFF's data set tools for simulations: a mixture of two data sets, one
label's examples, and i.i.d. clients drawn from all clients' examples."""

import tensorflow as tf

from canonical import errors
from canonical.simulation.datasets import client_data as client_data_lib


def build_dataset_mixture(a: tf.data.Dataset, b: tf.data.Dataset,
                          a_probability: float,
                          seed: int | None = None) -> tf.data.Dataset:
  """Each element from `a` with probability `a_probability`, else from `b`
  (one element of each is read per element; it ends with the shorter).

  As in TFF, the draws come from a `tf.random.Generator` (seeded by `seed`,
  else non-deterministic), so iterating the data set again draws anew.
  """
  if not 0.0 <= a_probability <= 1.0:
    raise errors.InvalidValueError(
        f'build_dataset_mixture: a_probability must be in [0, 1], got '
        f'{a_probability}.')
  if seed is not None:
    generator = tf.random.Generator.from_seed(seed)
  else:
    generator = tf.random.Generator.from_non_deterministic_state()

  def pick(example_a, example_b):
    take_a = generator.uniform([], 0.0, 1.0) < a_probability
    return tf.cond(take_a, lambda: example_a, lambda: example_b)

  return tf.data.Dataset.zip((a, b)).map(pick)


def build_single_label_dataset(dataset: tf.data.Dataset, label_key: str,
                               desired_label) -> tf.data.Dataset:
  """The examples of `dataset` (mappings) whose `label_key` is
  `desired_label`: a pathologically non-i.i.d. client."""
  spec = dataset.element_spec
  if not hasattr(spec, 'keys') or label_key not in spec:
    raise errors.InvalidValueError(
        f'build_single_label_dataset: the elements have no key '
        f'{label_key!r} (they are {spec}).')
  return dataset.filter(lambda example: example[label_key] == desired_label)


def build_synthethic_iid_datasets(client_data: client_data_lib.ClientData,
                                  client_dataset_size: int,
                                  shuffle_buffer_size: int = 10000
                                 ) -> tf.data.Dataset:
  """An endless data set of clients (TFF's name, spelling included): each
  element a data set of `client_dataset_size` examples drawn through one
  shuffle buffer over every client's examples, so any example may go to
  any client."""
  if client_dataset_size < 1:
    raise errors.InvalidValueError(
        'build_synthethic_iid_datasets: client_dataset_size must be '
        f'positive, got {client_dataset_size}.')
  examples = client_data.create_tf_dataset_from_all_clients().shuffle(
      shuffle_buffer_size, reshuffle_each_iteration=True).repeat(None)
  return examples.window(client_dataset_size)
