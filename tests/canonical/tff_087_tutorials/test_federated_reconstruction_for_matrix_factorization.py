"""TFF 0.87's "Federated Reconstruction for Matrix Factorization", its cells
written as a TFF user writes them, with only the import line changed:
MovieLens ratings per user, a matrix factorization `ReconstructionModel`
(item embeddings global, each user's embedding local and never sent),
trained with `tff.learning.algorithms.build_fed_recon` and evaluated with
`build_fed_recon_eval`.

What differs from the tutorial's cells, and why:
- MovieLens 1M is downloaded (refused here): the tutorial's own
  `download_movielens_data` copies it from a local directory when given
  one, so the test writes made-up `ratings.dat`, `movies.dat` and
  `users.dat` in MovieLens's format (20 users, 30 movies) and passes that
  directory; the rest of the loading runs as written (pandas).
- 8 clients a round where the tutorial samples 50, and 2 rounds where it
  runs 20.
- Its optimizers (`lambda: tf.keras.optimizers.SGD(1.0)`, and
  `functools.partial(tf.keras.optimizers.SGD, 0.1)`) are refused by TFF
  0.87 itself ('function' object has no attribute 'initialize'): they are
  `tff.learning.optimizers.build_sgdm(...)` at the same rates, as TFF 0.87's
  users write them.
- Left out: the `!pip install` / `nest_asyncio` cell and the plotting lines
  (`plt.*`: matplotlib is not installed; nothing is computed there).

The weights start from Keras's random initializers, so losses differ from
run to run on TFF 0.87 too; the data cells print what TFF 0.87 prints, and
the losses are checked against what the data implies (a model that starts
near zero has a loss near the mean squared rating).
"""


import collections
import functools
import io
import os
import requests  # The tutorial's; unused on a local directory.
import zipfile
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

import canonical as tff

np.random.seed(42)


def write_made_up_movielens(directory, num_users=20, num_movies=30, seed=0):
  """ratings.dat, movies.dat, users.dat as MovieLens 1M writes them."""
  rng = np.random.RandomState(seed)
  genres = ['Action', 'Comedy', 'Drama', 'Romance', 'Thriller', "Children's"]
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'movies.dat'), 'w',
            encoding='latin-1') as f:
    for m in range(num_movies + 2):  # Two movies nobody rated.
      g = '|'.join(rng.choice(genres, rng.randint(1, 3), replace=False))
      f.write(f'{m * 3 + 1}::Movie {m} (19{60 + m})::{g}\n')
  with open(os.path.join(directory, 'users.dat'), 'w') as f:
    for u in range(num_users):
      f.write(f'{u + 1}::{"MF"[u % 2]}::25::{u % 20}::0{u:04d}\n')
  taste = rng.normal(size=(num_users, 3))
  items = rng.normal(size=(num_movies, 3))
  with open(os.path.join(directory, 'ratings.dat'), 'w') as f:
    for u in range(num_users):
      for m in rng.choice(num_movies, rng.randint(8, 20), replace=False):
        r = int(np.clip(np.round(3 + taste[u] @ items[m]), 1, 5))
        f.write(f'{u + 1}::{m * 3 + 1}::{r}::{978300000 + u * 100 + m}\n')


def download_movielens_data(dataset_path):
  """Downloads and copies MovieLens data to local /tmp directory."""
  if dataset_path.startswith('http'):
    r = requests.get(dataset_path)
    z = zipfile.ZipFile(io.BytesIO(r.content))
    z.extractall(path='/tmp')
  else:
    tf.io.gfile.makedirs('/tmp/ml-1m/')
    for filename in ['ratings.dat', 'movies.dat', 'users.dat']:
      tf.io.gfile.copy(
          os.path.join(dataset_path, filename),
          os.path.join('/tmp/ml-1m/', filename),
          overwrite=True)


def load_movielens_data(
    data_directory: str = "/tmp",
) -> Tuple[pd.DataFrame, pd.DataFrame]:
  """Loads pandas DataFrames for ratings, movies, users from data directory."""
  # Load pandas DataFrames from data directory. Assuming data is formatted as
  # specified in http://files.grouplens.org/datasets/movielens/ml-1m-README.txt.
  ratings_df = pd.read_csv(
      os.path.join(data_directory, "ml-1m", "ratings.dat"),
      sep="::",
      names=["UserID", "MovieID", "Rating", "Timestamp"], engine="python")
  movies_df = pd.read_csv(
      os.path.join(data_directory, "ml-1m", "movies.dat"),
      sep="::",
      names=["MovieID", "Title", "Genres"], engine="python", 
      encoding = "ISO-8859-1")

  # Create dictionaries mapping from old IDs to new (remapped) IDs for both
  # MovieID and UserID. Use the movies and users present in ratings_df to
  # determine the mapping, since movies and users without ratings are unneeded.
  movie_mapping = {
      old_movie: new_movie for new_movie, old_movie in enumerate(
          ratings_df.MovieID.astype("category").cat.categories)
  }
  user_mapping = {
      old_user: new_user for new_user, old_user in enumerate(
          ratings_df.UserID.astype("category").cat.categories)
  }

  # Map each DataFrame consistently using the now-fixed mapping.
  ratings_df.MovieID = ratings_df.MovieID.map(movie_mapping)
  ratings_df.UserID = ratings_df.UserID.map(user_mapping)
  movies_df.MovieID = movies_df.MovieID.map(movie_mapping)

  # Remove nulls resulting from some movies being in movies_df but not
  # ratings_df.
  movies_df = movies_df[pd.notnull(movies_df.MovieID)]

  return ratings_df, movies_df


def create_tf_datasets(ratings_df: pd.DataFrame,
                       batch_size: int = 1,
                       max_examples_per_user: Optional[int] = None,
                       max_clients: Optional[int] = None) -> List[tf.data.Dataset]:
  """Creates TF Datasets containing the movies and ratings for all users."""
  num_users = len(set(ratings_df.UserID))
  # Optionally limit to `max_clients` to speed up data loading.
  if max_clients is not None:
    num_users = min(num_users, max_clients)

  def rating_batch_map_fn(rating_batch):
    """Maps a rating batch to an OrderedDict with tensor values."""
    # Each example looks like: {x: movie_id, y: rating}.
    # We won't need the UserID since each client will only look at their own
    # data.
    return collections.OrderedDict([
        ("x", tf.cast(rating_batch[:, 1:2], tf.int64)),
        ("y", tf.cast(rating_batch[:, 2:3], tf.float32))
    ])

  tf_datasets = []
  for user_id in range(num_users):
    # Get subset of ratings_df belonging to a particular user.
    user_ratings_df = ratings_df[ratings_df.UserID == user_id]

    tf_dataset = tf.data.Dataset.from_tensor_slices(user_ratings_df)

    # Define preprocessing operations.
    tf_dataset = tf_dataset.take(max_examples_per_user).shuffle(
        buffer_size=max_examples_per_user, seed=42).batch(batch_size).map(
        rating_batch_map_fn,
        num_parallel_calls=tf.data.experimental.AUTOTUNE)
    tf_datasets.append(tf_dataset)

  return tf_datasets


def split_tf_datasets(
    tf_datasets: List[tf.data.Dataset],
    train_fraction: float = 0.8,
    val_fraction: float = 0.1,
) -> Tuple[List[tf.data.Dataset], List[tf.data.Dataset], List[tf.data.Dataset]]:
  """Splits a list of user TF datasets into train/val/test by user.
  """
  np.random.seed(42)
  np.random.shuffle(tf_datasets)

  train_idx = int(len(tf_datasets) * train_fraction)
  val_idx = int(len(tf_datasets) * (train_fraction + val_fraction))

  # Note that the val and test data contains completely different users, not
  # just unseen ratings from train users.
  return (tf_datasets[:train_idx], tf_datasets[train_idx:val_idx],
          tf_datasets[val_idx:])


class UserEmbedding(tf.keras.layers.Layer):
  """Keras layer representing an embedding for a single user, used below."""

  def __init__(self, num_latent_factors, **kwargs):
    super().__init__(**kwargs)
    self.num_latent_factors = num_latent_factors

  def build(self, input_shape):
    self.embedding = self.add_weight(
        shape=(1, self.num_latent_factors),
        initializer='uniform',
        dtype=tf.float32,
        name='UserEmbeddingKernel')
    super().build(input_shape)

  def call(self, inputs):
    return self.embedding

  def compute_output_shape(self):
    return (1, self.num_latent_factors)


def get_matrix_factorization_model(
    num_items: int,
    num_latent_factors: int) -> tff.learning.models.ReconstructionModel:
  """Defines a Keras matrix factorization model."""
  # Layers with variables will be partitioned into global and local layers.
  # We'll pass this to `tff.learning.models.ReconstructionModel.from_keras_model_and_layers`.
  global_layers = []
  local_layers = []

  # Extract the item embedding.
  item_input = tf.keras.layers.Input(shape=[1], name='Item')
  item_embedding_layer = tf.keras.layers.Embedding(
      num_items,
      num_latent_factors,
      name='ItemEmbedding')
  global_layers.append(item_embedding_layer)
  flat_item_vec = tf.keras.layers.Flatten(name='FlattenItems')(
      item_embedding_layer(item_input))

  # Extract the user embedding.
  user_embedding_layer = UserEmbedding(
      num_latent_factors,
      name='UserEmbedding')
  local_layers.append(user_embedding_layer)

  # The item_input never gets used by the user embedding layer,
  # but this allows the model to directly use the user embedding.
  flat_user_vec = user_embedding_layer(item_input)

  # Compute the dot product between the user embedding, and the item one.
  pred = tf.keras.layers.Dot(
      1, normalize=False, name='Dot')([flat_user_vec, flat_item_vec])

  input_spec = collections.OrderedDict(
      x=tf.TensorSpec(shape=[None, 1], dtype=tf.int64),
      y=tf.TensorSpec(shape=[None, 1], dtype=tf.float32))

  model = tf.keras.Model(inputs=item_input, outputs=pred)

  return tff.learning.models.ReconstructionModel.from_keras_model_and_layers(
      keras_model=model,
      global_layers=global_layers,
      local_layers=local_layers,
      input_spec=input_spec)


# This will be used to produce our training process.
# User and item embeddings will be 50-dimensional.
model_fn = functools.partial(
    get_matrix_factorization_model,
    num_items=3706,
    num_latent_factors=50)


class RatingAccuracy(tf.keras.metrics.Mean):
  """Keras metric computing accuracy of reconstructed ratings."""

  def __init__(self,
               name: str = 'rating_accuracy',
               **kwargs):
    super().__init__(name=name, **kwargs)

  def update_state(self,
                   y_true: tf.Tensor,
                   y_pred: tf.Tensor,
                   sample_weight: Optional[tf.Tensor] = None):
    absolute_diffs = tf.abs(y_true - y_pred)
    # A [batch_size, 1] tf.bool tensor indicating correctness within the
    # threshold for each example in a batch. A 0.5 threshold corresponds
    # to correctness when predictions are rounded to the nearest whole
    # number.
    example_accuracies = tf.less_equal(absolute_diffs, 0.5)
    super().update_state(example_accuracies, sample_weight=sample_weight)


loss_fn = lambda: tf.keras.losses.MeanSquaredError()
metrics_fn = lambda: [RatingAccuracy()]


@pytest.fixture(scope='module')
def movielens(tmp_path_factory):
  np.random.seed(42)
  made_up = str(tmp_path_factory.mktemp('movielens'))
  write_made_up_movielens(made_up)
  download_movielens_data(made_up)
  ratings_df, movies_df = load_movielens_data()
  return ratings_df, movies_df


@pytest.fixture(scope='module')
def datasets(movielens):
  ratings_df, _ = movielens
  # We limit the number of clients to speed up dataset creation. Feel free to pass
  # max_clients=None to load all clients' data.
  tf_datasets = create_tf_datasets(
      ratings_df=ratings_df,
      batch_size=5,
      max_examples_per_user=300,
      max_clients=2000)

  # Split the ratings into training/val/test by client.
  tf_train_datasets, tf_val_datasets, tf_test_datasets = split_tf_datasets(
      tf_datasets,
      train_fraction=0.8,
      val_fraction=0.1)
  return tf_train_datasets, tf_val_datasets, tf_test_datasets


def test_the_ratings_and_movies(movielens, capsys):
  ratings_df, movies_df = movielens
  print(ratings_df.head())
  print(movies_df.head())
  print('Num users:', len(set(ratings_df.UserID)))
  print('Num movies:', len(set(ratings_df.MovieID)))
  ratings = ratings_df.Rating.tolist()


  print('Average rating:', np.mean(ratings))
  print('Median rating:', np.median(ratings))
  def print_top_genres_for_user(ratings_df, movies_df, user_id):
    """Prints top movie genres for user with ID user_id."""
    user_ratings_df = ratings_df[ratings_df.UserID == user_id]
    movie_ids = user_ratings_df.MovieID

    genre_count = collections.Counter()
    for movie_id in movie_ids:
      genres_string = movies_df[movies_df.MovieID == movie_id].Genres.tolist()[0]
      for genre in genres_string.split('|'):
        genre_count[genre] += 1

    print(f'\nFor user {user_id}:')
    for (genre, freq) in genre_count.most_common(5):
      print(f'{genre} was rated {freq} times')

  print_top_genres_for_user(ratings_df, movies_df, user_id=0)
  print_top_genres_for_user(ratings_df, movies_df, user_id=10)
  print_top_genres_for_user(ratings_df, movies_df, user_id=19)
  # As TFF 0.87's (pandas and numpy) print them:
  out = capsys.readouterr().out
  assert out.startswith(
      '   UserID  MovieID  Rating  Timestamp\n'
      '0       0       15       1  978300015\n')
  assert ('Num users: 20\nNum movies: 30\n'
          'Average rating: 3.046511627906977\nMedian rating: 3.0\n') in out
  assert out.endswith('For user 19:\nDrama was rated 4 times\n'
                      "Children's was rated 3 times\n"
                      'Comedy was rated 3 times\n'
                      'Action was rated 2 times\n'
                      'Romance was rated 1 times\n')


def test_the_genres(movielens):
  _, movies_df = movielens
  movie_genres_list = movies_df.Genres.tolist()
  # Count the number of times each genre describes a movie.
  genre_count = collections.defaultdict(int)
  for genres in movie_genres_list:
    curr_genres_list = genres.split('|')
    for genre in curr_genres_list:
      genre_count[genre] += 1
  genre_name_list, genre_count_list = zip(*genre_count.items())

  assert sum(genre_count_list) == sum(
      len(g.split('|')) for g in movies_df.Genres)


def test_the_client_datasets(datasets, capsys):
  tf_train_datasets, tf_val_datasets, tf_test_datasets = datasets
  assert (len(tf_train_datasets), len(tf_val_datasets),
          len(tf_test_datasets)) == (16, 2, 2)
  print(next(iter(tf_train_datasets[0])))
  def count_examples(curr_count, batch):
    return curr_count + tf.size(batch['x'])

  num_examples_list = []
  # Compute number of examples for every other user.
  for i in range(0, len(tf_train_datasets), 2):
    num_examples = tf_train_datasets[i].reduce(tf.constant(0), count_examples).numpy()
    num_examples_list.append(num_examples)

  # The first training batch, as TFF 0.87 prints it:
  out = ''.join(capsys.readouterr().out.split())
  assert 'numpy=array([[14],[21],[19],[13],[23]])' in out
  assert 'numpy=array([[5.],[3.],[3.],[2.],[5.]],dtype=float32)' in out
  assert len(num_examples_list) == 8


def build_processes():
  # We'll use this by doing:
  # state = training_process.initialize()
  # state, metrics = training_process.next(state, federated_train_data)
  training_process = tff.learning.algorithms.build_fed_recon(
      model_fn=model_fn,
      loss_fn=loss_fn,
      metrics_fn=metrics_fn,
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
      reconstruction_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  evaluation_process = tff.learning.algorithms.build_fed_recon_eval(
      model_fn,
      loss_fn=loss_fn,
      metrics_fn=metrics_fn,
      reconstruction_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  return training_process, evaluation_process


def _mean_squared_rating(datasets):
  ys = np.concatenate([b['y'].numpy().ravel() for d in datasets for b in d])
  return float(np.mean(ys ** 2))


@pytest.mark.slow
def test_training_and_evaluation(datasets, capsys):
  tf_train_datasets, tf_val_datasets, tf_test_datasets = datasets
  training_process, evaluation_process = build_processes()
  state = training_process.initialize()
  model = training_process.get_model_weights(state)
  print(model)
  print('Item variables shape:', model.trainable[0].shape)
  # We shouldn't expect good evaluation results here, since we haven't trained
  # yet!
  eval_state = evaluation_process.initialize()
  eval_state = evaluation_process.set_model_weights(
    eval_state, training_process.get_model_weights(state)
  )
  _, eval_metrics = evaluation_process.next(eval_state, tf_val_datasets)
  print('Initial Eval:', eval_metrics['client_work']['eval'])
  federated_train_data = np.random.choice(tf_train_datasets, size=8, replace=False).tolist()
  state, metrics = training_process.next(state, federated_train_data)
  print(f'Train metrics:', metrics['client_work']['train'])
  NUM_ROUNDS = 2

  train_losses = []
  train_accs = []

  state = training_process.initialize()

  # This may take a couple minutes to run.
  for i in range(NUM_ROUNDS):
    federated_train_data = np.random.choice(tf_train_datasets, size=8, replace=False).tolist()
    state, metrics = training_process.next(state, federated_train_data)
    print(f'Train round {i}:', metrics['client_work']['train'])
    train_losses.append(metrics['client_work']['train']['loss'])
    train_accs.append(metrics['client_work']['train']['rating_accuracy'])


  eval_state = evaluation_process.set_model_weights(
    eval_state, training_process.get_model_weights(state))
  _, eval_metrics = evaluation_process.next(eval_state, tf_val_datasets)
  print('Final Eval:', eval_metrics['client_work']['eval'])
  eval_state = evaluation_process.set_model_weights(
      eval_state, training_process.get_model_weights(state)
  )
  _, eval_metrics = evaluation_process.next(eval_state, tf_test_datasets)
  print('Final Test:', eval_metrics['client_work']['eval'])
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith('ModelWeights(trainable=')
  assert 'Item variables shape: (3706, 50)' in out
  assert [line.split(':')[0] for line in out[-6:]] == [
      'Initial Eval', 'Train metrics', 'Train round 0', 'Train round 1',
      'Final Eval', 'Final Test']
  assert list(metrics['client_work']['train']) == ['rating_accuracy', 'loss']
  assert list(eval_metrics['client_work']['eval']) == [
      'current_round_metrics', 'total_rounds_metrics']
  # Embeddings start within 0.05 of zero, so the first loss is about the
  # mean squared rating of the ratings it evaluates on (those left after
  # reconstruction; TFF 0.87: 9.796 on the same validation users).
  first_loss = float(out[-6].split("('loss', ")[1].split(')')[0].replace(
      'np.float32(', ''))
  assert 0.6 < first_loss / _mean_squared_rating(tf_val_datasets) < 1.4
  assert train_losses and all(np.isfinite(train_losses))


@pytest.mark.slow
def test_the_processes_compile(datasets):
  tf_train_datasets, _, _ = datasets
  training_process, evaluation_process = build_processes()
  form = tff.compile(training_process)
  state, metrics = tff.run_round(form, form.initialize(),
                                 tf_train_datasets[:4])
  assert np.asarray(state.global_model_weights.trainable[0]).shape == (
      3706, 50)
  assert float(metrics['client_work']['train']['loss']) > 0
  assert tff.compile(evaluation_process) is not None
