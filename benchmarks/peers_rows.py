"""What one row of ours in `benchmarks/peers.py` measures, in its own process.

The parent (`benchmarks.peers`) starts one child per task
(`python -m benchmarks.peers --child TASK --child-result PATH`); the child
calls `child_main` here and writes its result as JSON. As in
`runner_rows`, every module imported at the top of this file is from the
standard library: a Dask cluster's workers re-import the child's main module.

A task's `kind` says what it does:
  prepare  once per data set, before anything is timed: partitions
           Fashion-MNIST (IID: a seeded permutation of the training set cut
           into equal clients), draws the model's initial weights, writes
           each client's batches as its TFRecord file, builds the process
           as a TFF user would (`import canonical as tff`), compiles and
           saves it, and draws each workload's clients per round with the
           runner's own `sample_clients`. Every system starts from these
           weights and trains these clients.
  floor    the compute floor: the round's client SGD steps as one plain TF
           loop over the round's clients, data in memory (a `tf.function`
           per batch; each client starts from the server weights; deltas
           averaged weighted by examples; a server SGD step).
  loop     ours: the saved form loaded (`tff.load`), rounds run by
           `canonical.run_round`, each sampled client's file read in the
           timed round into the list of its batches (`read_elements`, as
           the runner reads it).
  api      ours through TFF's API, as a TFF 0.87 user runs a simulation
           (and as the TFF row does): the process built in the row
           (`build_process`), each round's clients given as in-memory
           `tf.data` datasets built before the round is timed, rounds by
           `process.next(state, datasets)` (which runs the compiled form).
  beam     ours: `beam_runner.run` over the saved form and the client files,
           in process (mode 'in_memory') or on a local Dask cluster of
           `workers` processes (mode 'dask', started once in this process and
           warmed as `runner_rows.engine_options` does): a call running the
           warm-up rounds, then one timed call running the measured rounds;
           seconds per round are that call's wall time over the rounds.
Every row writes its model's final trainable weights (`weights_out`, .npz) so
the parent can check that the systems computed the same thing.
"""

import json
import os
import time

from benchmarks import runner_rows

SEED = 0
# In a prepared data directory, the settings its data was written with.
DATA_FILE = 'data.json'
# Keras's name of a logistic regression on flattened 28x28 images.
LOGISTIC_NAME = 'logistic_784'


def client_id(index):
  """The id (and file name) of client `index`: sorted ids keep index order."""
  return f'{index:05d}'


def build_keras(model):
  """A fresh Keras model of the workload's architecture."""
  import keras  # pylint: disable=g-import-not-at-top
  from canonical.learning import models  # pylint: disable=g-import-not-at-top
  if model == 'cnn':
    return models.cnn_28x28()
  if model == 'logistic':
    return keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(10)],
                            name=LOGISTIC_NAME)
  raise ValueError(f'Unknown model {model!r}.')


def images(model, x):
  """Images [N, 28, 28, 1] as the model takes them."""
  return x.reshape(len(x), 784) if model == 'logistic' else x


def _load_initial(path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  with np.load(path) as saved:
    return [saved[f'w{i}'] for i in range(len(saved.files))]


def save_weights(path, weights):
  import numpy as np  # pylint: disable=g-import-not-at-top
  np.savez(path, **{f'w{i}': np.asarray(w) for i, w in enumerate(weights)})


def _train_data(task):
  """(images as the model takes them, labels) of the training set."""
  from pipelines import datasets  # pylint: disable=g-import-not-at-top
  data = datasets.load('fashion_mnist')
  return images(task['model'], data.train_x), data.train_y


def _versions():
  import importlib.metadata as metadata  # pylint: disable=g-import-not-at-top
  import platform  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # The wheel may be tensorflow or tensorflow-cpu: ask the module.
  found = {'python': platform.python_version(), 'tensorflow': tf.__version__}
  for name in ('fedcanon', 'keras', 'apache-beam', 'dask', 'distributed',
               'numpy'):
    try:
      found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      pass
  return found


# ---------------------------------------------------------------------------
# Inputs (built once per data set)


def build_process(model, initial, input_spec, client_lr, server_lr):
  """FedAvg as a TFF user builds it, on the model starting at `initial`."""
  import keras  # pylint: disable=g-import-not-at-top
  import canonical as tff  # pylint: disable=g-import-not-at-top

  def model_fn():
    keras_model = build_keras(model)
    keras_model.set_weights(initial)
    return tff.learning.models.from_keras_model(
        keras_model,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec)

  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=client_lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=server_lr))


def prepare(task):
  """See the module docstring; returns the sampled clients and facts.

  The data (partition, initial weights, client files) is reused from
  `task['dir']` when its `DATA_FILE` says it was written with the same
  settings; the form is compiled anew every time, by the code measured."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import beam_runner  # pylint: disable=g-import-not-at-top
  import canonical as tff  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  model, count = task['model'], task['num_clients']
  x, y = _train_data(task)
  settings = dict(seed=SEED, **{k: task[k] for k in (
      'model', 'num_clients', 'examples', 'batch_size')})
  marker = os.path.join(task['dir'], DATA_FILE)
  reused = False
  if os.path.exists(marker):
    with open(marker) as f:
      reused = json.load(f) == settings
  if reused:
    initial = _load_initial(task['initial_weights'])
  else:
    initial = _write_data(task, x, y)
    with open(marker, 'w') as f:  # Last: the data is complete.
      json.dump(settings, f)
  input_spec = (tf.TensorSpec((None,) + x.shape[1:], tf.float32),
                tf.TensorSpec([None], tf.int32))
  form = tff.compile(build_process(model, initial, input_spec,
                                   task['client_lr'], task['server_lr']))
  tff.save(form, task['form'])
  ids = [client_id(i) for i in range(count)]
  samples = {}
  for name, sampling in task['sampling'].items():
    samples[name] = [
        [int(c) for c in beam_runner.sample_clients(
            ids, sampling['clients_per_round'], SEED, r)]
        for r in range(1, sampling['rounds'] + 1)]
  return dict(samples=samples,
              parameters=int(sum(w.size for w in initial)),
              prepare_seconds=time.perf_counter() - start,
              reused_data=reused, versions=_versions())


def _write_data(task, x, y):
  """Writes the partition, the initial weights and the client files;
  returns the initial weights."""
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import beam_runner  # pylint: disable=g-import-not-at-top
  count, examples = task['num_clients'], task['examples']
  if count * examples > len(x):
    raise ValueError(f'{count} clients of {examples} examples need '
                     f'{count * examples} examples; Fashion-MNIST has '
                     f'{len(x)}.')
  os.makedirs(task['dir'], exist_ok=True)
  partition = np.random.default_rng(SEED).permutation(len(x))[
      :count * examples].reshape(count, examples)
  np.save(task['partition'], partition)
  keras.utils.set_random_seed(SEED)
  initial = build_keras(task['model']).get_weights()
  save_weights(task['initial_weights'], initial)
  batch = task['batch_size']
  beam_runner.write_client_data(task['shards'], {
      client_id(i): tf.data.Dataset.from_tensor_slices(
          (x[rows], y[rows])).batch(batch)
      for i, rows in enumerate(partition)})
  return initial


# ---------------------------------------------------------------------------
# Rows


def _mean(values):
  return sum(values) / len(values)


def _timed_rounds(task, run_one, before=None):
  """Runs `run_one(sampled)` for every round of the task's samples (given
  `before(sampled)`'s result too, made before the clock starts, if there is
  a `before`); the row's timing: the warm-up rounds', then the measured
  rounds' seconds and CPU seconds (this process's) per round."""
  warmup = task['warmup']
  seconds, cpu = [], []
  for sampled in task['samples']:
    made = () if before is None else (before(sampled),)
    with runner_rows.Clock() as clock:
      run_one(sampled, *made)
    seconds.append(clock.seconds)
    cpu.append(clock.cpu)
  measured = seconds[warmup:]
  return dict(round_seconds=_mean(measured), each_round_seconds=measured,
              warmup_seconds=seconds[:warmup],
              cpu_seconds=_mean(cpu[warmup:]),
              rounds=len(measured), timed='each round, in this process')


def floor_row(task):
  """The compute floor (see the module docstring)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x, y = _train_data(task)
  partition = np.load(task['partition'])
  batch = task['batch_size']
  model = build_keras(task['model'])
  initial = _load_initial(task['initial_weights'])
  model.set_weights(initial)
  trainable = model.trainable_variables
  server = [tf.Variable(w) for w in initial]
  sums = [tf.Variable(tf.zeros_like(w)) for w in initial]
  total = tf.Variable(0.0)
  client_lr, server_lr = task['client_lr'], task['server_lr']

  @tf.function
  def start_client():
    for variable, weight in zip(trainable, server):
      variable.assign(weight)

  @tf.function
  def train_step(batch_x, batch_y):
    with tf.GradientTape() as tape:
      logits = model(batch_x, training=True)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=tf.cast(batch_y, tf.int64), logits=logits))
    for variable, gradient in zip(trainable,
                                  tape.gradient(loss, trainable)):
      variable.assign_sub(client_lr * gradient)

  @tf.function
  def end_client(examples):
    for acc, variable, weight in zip(sums, trainable, server):
      acc.assign_add(examples * (variable - weight))
    total.assign_add(examples)

  @tf.function
  def server_step():
    for acc, weight in zip(sums, server):
      weight.assign_sub(server_lr * -(acc / total))
      acc.assign(tf.zeros_like(acc))
    total.assign(0.0)

  def run_one(sampled):
    for client in sampled:
      rows = partition[client]
      client_x, client_y = x[rows], y[rows]
      start_client()
      for i in range(0, len(rows), batch):
        train_step(client_x[i:i + batch], client_y[i:i + batch])
      end_client(np.float32(len(rows)))
    server_step()

  row = _timed_rounds(task, run_one)
  save_weights(task['weights_out'], [w.numpy() for w in server])
  return row


def loop_row(task):
  """Ours, the local loop (see the module docstring)."""
  import beam_runner  # pylint: disable=g-import-not-at-top
  import canonical as tff  # pylint: disable=g-import-not-at-top
  form = tff.load(task['form'])
  source = beam_runner.TFRecordClientData(task['shards'])
  spec = form.client_data_spec
  state = [form.initialize()]

  def run_one(sampled):
    data = [source.read_elements(client_id(c), spec) for c in sampled]
    state[0] = tff.run_round(form, state[0], data)[0]

  row = _timed_rounds(task, run_one)
  save_weights(task['weights_out'], _trainable(state[0]))
  return row


def api_row(task):
  """Ours through TFF's API (see the module docstring)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  x, y = _train_data(task)
  partition = np.load(task['partition'])
  process = build_process(
      task['model'], _load_initial(task['initial_weights']),
      (tf.TensorSpec((None,) + x.shape[1:], tf.float32),
       tf.TensorSpec([None], tf.int32)), task['client_lr'], task['server_lr'])
  state = [process.initialize()]

  def datasets(sampled):
    return [tf.data.Dataset.from_tensor_slices(
        (x[partition[c]], y[partition[c]])).batch(task['batch_size'])
            for c in sampled]

  def run_one(sampled, data):
    del sampled
    state[0] = process.next(state[0], data).state

  row = _timed_rounds(task, run_one, before=datasets)
  save_weights(task['weights_out'], _trainable(state[0]))
  return row


def _trainable(state):
  import numpy as np  # pylint: disable=g-import-not-at-top
  return [np.asarray(w) for w in state.global_model_weights.trainable]


def _quiet(line):
  del line


def beam_row(task):
  """Ours on Beam, in process or on Dask (see the module docstring)."""
  import tempfile  # pylint: disable=g-import-not-at-top
  import beam_runner  # pylint: disable=g-import-not-at-top
  source = beam_runner.TFRecordClientData(task['shards'])
  warmup, samples = task['warmup'], task['samples']
  total, clients = len(samples), len(samples[0])
  place = runner_rows.Place(task['form'], task['shards'], tempfile.mkdtemp(
      prefix='peers-run-', dir=task['scratch']))
  out = place.new_run_dir()
  with runner_rows.engine_options(task, place) as (options, facts):
    warm = beam_runner.run(task['form'], source, warmup, clients, out,
                           options, seed=SEED, progress=_quiet)
    with runner_rows.Clock() as clock:
      result = beam_runner.run(task['form'], source, total, clients, out,
                               options, seed=SEED, progress=_quiet)
  rounds = total - warmup
  run_dir = beam_runner.RunDir(out)
  for number, sampled in enumerate(samples, 1):
    got = sorted(run_dir.clients(number))
    if got != sorted(client_id(c) for c in sampled):
      raise RuntimeError(f'Round {number}: the runner sampled {got[:5]}..., '
                         'not the clients the benchmark planned.')
  outcomes = result.outcomes[warmup:]
  save_weights(task['weights_out'], _trainable(result.state))
  return dict(round_seconds=clock.seconds / rounds,
              each_round_seconds=[o.get('seconds') for o in outcomes],
              warmup_seconds=[o.get('seconds') for o in warm.outcomes],
              rounds=rounds,
              timed=f'one run call of {rounds} rounds, wall time / rounds '
                    '(each_round_seconds: the runner\'s own per-round times)',
              engine=outcomes[-1].get('engine'),
              **clock.per_round(rounds), **facts)


ROWS = {'floor': floor_row, 'loop': loop_row, 'api': api_row,
        'beam': beam_row}


def child_main(task_json, result_path):
  task = json.loads(task_json)
  if task['kind'] == 'prepare':
    result = prepare(task)
  else:
    # Loaded before the row starts, as in every row.
    import beam_runner  # pylint: disable=g-import-not-at-top,unused-import
    result = ROWS[task['kind']](task)
    result['peak_rss_mb'] = runner_rows.rss_mb('self', 'VmHWM')
  with open(result_path, 'w') as f:
    json.dump(result, f)
