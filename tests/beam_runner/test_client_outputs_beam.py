"""Per-client outputs on the Beam runner: what `next` returns last, at
CLIENTS, comes back per round and client, as the local loop returns it.

The outputs equal `canonical.run_round`'s for the same sampled clients (with
client state too: returning clients keep their state and give outputs), are
committed with their round (a resume keeps and rewrites none of a committed
round's), are read lazily from part files, and a damaged file is named when
read. A secure round keeps the outputs of the clients left in its sums.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import beam_runner
from beam_runner import __main__ as cli
from beam_runner import engines
from beam_runner.secure import protocol_steps
from beam_runner.worker_io import client_outputs as client_outputs_lib
from beam_runner.worker_io import tfrecords
import canonical as cf
from canonical import form as form_lib
from example_processes import client_outputs_process
from example_processes import client_outputs_with_state_process
from example_processes import random_floats
from example_processes import secure_sum_with_outputs_process
from tensor_asserts import assert_same

QUIET = lambda line: None
F = tf.TensorSpec([], tf.float32)
F2 = tf.TensorSpec([2], tf.float32)


@pytest.fixture(scope='module')
def plain_form():
  return cf.compile(client_outputs_process())


@pytest.fixture(scope='module')
def state_form():
  return cf.compile(client_outputs_with_state_process())


def _local_outputs(form, data, rounds, clients_per_round, seed=0):
  """The local loop over the runner's sampled clients: per round
  ({client: outputs}, {client: its state after the round})."""
  state, kept, per_round = form.initialize(), {}, []
  for number in range(1, rounds + 1):
    ids = beam_runner.sample_clients(sorted(data), clients_per_round, seed,
                                     number)
    values = [data[i] for i in ids]
    if form.has_client_state:
      state, _, states, outputs = cf.run_round(form, state, values,
                                               [kept.get(i) for i in ids])
      kept.update(zip(ids, states))
    else:
      state, _, outputs = cf.run_round(form, state, values)
    per_round.append((dict(zip(ids, outputs)), dict(kept)))
  return per_round


def _assert_outputs_equal(result, expected, exact=True):
  assert sorted(result.client_outputs) == list(range(1, len(expected) + 1))
  for number, (outputs, _) in enumerate(expected, start=1):
    got = result.client_outputs[number]
    assert list(got) == list(outputs), f'round {number}'  # Sampled order.
    for client, value in outputs.items():
      assert_same(got[client], value, exact, f'round {number}, {client}')
      tf.nest.assert_same_structure(got[client], value)


def test_outputs_equal_the_local_loop_without_client_state(
    plain_form, monkeypatch, tmp_path):
  # Parts of about two records: a batch of three clients writes two files.
  monkeypatch.setattr(client_outputs_lib, 'PART_BYTES', 100)
  data = random_floats(1, 7)
  result = beam_runner.run(plain_form, data, 3, 6, tmp_path / 'run',
                           progress=QUIET, clients_per_element=3)
  expected = _local_outputs(plain_form, data, 3, 6)
  _assert_outputs_equal(result, expected)
  one = result.client_outputs[1]
  assert len(one) == 6 and set(one) <= set(data)
  first = next(iter(one))
  assert set(one[first]) == {'loss', 'size'}
  assert int(one[first]['size']) == 2
  names = [os.path.basename(f) for f in one.files]
  assert sorted(names) == sorted(os.listdir(one.directory))
  assert len(names) == 4  # 2 batches of 3 clients, 2 parts each.
  assert 'missing' not in one and 1 in result.client_outputs
  with pytest.raises(KeyError):
    result.client_outputs[4]  # pylint: disable=pointless-statement
  # The same outputs read from the directory later, without the form.
  again = beam_runner.read_client_outputs(tmp_path / 'run')
  assert list(again) == [1, 2, 3]
  for number in again:
    assert list(again[number]) == list(result.client_outputs[number])
    for client, value in again[number].items():
      assert set(value) == {'loss', 'size'}
      assert value['size'].dtype == tf.int32
      assert_same(value, result.client_outputs[number][client], exact=True)


def test_returning_clients_keep_their_state_and_give_outputs(state_form,
                                                              tmp_path):
  data = random_floats(2, 5)
  result = beam_runner.run(state_form, data, 4, 3, tmp_path / 'run',
                           progress=QUIET, clients_per_element=2)
  expected = _local_outputs(state_form, data, 4, 3)
  _assert_outputs_equal(result, expected)
  joined = [int(v['joined']) for r in result.client_outputs.values()
            for v in r.values()]
  assert max(joined) >= 3  # Clients came back with their state, and said so.
  run = beam_runner.RunDir(tmp_path / 'run')
  kept = expected[-1][1]
  paths = run.client_state_paths()
  assert sorted(paths) == sorted(kept)
  for client, value in kept.items():
    assert_same(beam_runner.tensor_io.read_tensors(
        paths[client], state_form.client_state_spec), value, exact=True)


def test_assert_rounds_match_compares_outputs_with_the_reference(
    state_form):
  data = random_floats(3, 5)
  beam_runner.testing.assert_rounds_match(
      client_outputs_with_state_process(), data, rounds=2,
      clients_per_round=3, rtol=0, atol=0, form=state_form)

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def off_by_one(state, data):
    sizes = cf.federated_map(cf.tf_computation(F2)(
        lambda d: tf.size(d) + 1), data)
    losses = cf.federated_map(cf.tf_computation(F2, F)(
        lambda d, c: tf.reduce_sum(tf.square(d - c))),
                              (data, cf.federated_broadcast(state)))
    means = cf.federated_map(cf.tf_computation(F2)(tf.reduce_mean), data)
    return (cf.federated_mean(means), cf.federated_mean(losses),
            {'loss': losses, 'size': sizes})

  other = cf.compile(cf.IterativeProcess(
      cf.tf_computation(lambda: tf.constant(0.0)), off_by_one))
  with pytest.raises(AssertionError, match='round 1: outputs of client '
                     "'c.*tensor size differs from the reference"):
    beam_runner.testing.assert_rounds_match(
        client_outputs_process(), data, rounds=1, form=other,
        check_local=False)


def _files(directory):
  """{path: (bytes, mtime in ns)} of every file under `directory` but the
  client states (a newer state of its client replaces one)."""
  found = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      if '/client_states/' in path:
        continue
      with open(path, 'rb') as f:
        found[path] = (f.read(), os.stat(path).st_mtime_ns)
  return found


def test_a_resume_keeps_committed_outputs_and_rewrites_none(state_form,
                                                            tmp_path):
  data = random_floats(4, 5)
  whole = beam_runner.run(state_form, data, 4, 3, tmp_path / 'whole',
                          progress=QUIET)
  out = tmp_path / 'resumed'
  beam_runner.run(state_form, data, 2, 3, out, progress=QUIET)
  run = beam_runner.RunDir(out)
  committed = {}
  for number in (1, 2):
    committed.update(_files(run.attempt(number).directory))
  assert sum('/client_outputs/' in path for path in committed) == 2
  assert sum(path.endswith('client_outputs.json') for path in committed) == 2

  def fail_round_3(state):
    raise RuntimeError('the driver was stopped')

  with pytest.raises(beam_runner.RoundError, match='Round 3 failed'):
    beam_runner.run(state_form, data, 3, 3, out, progress=QUIET,
                    evaluate=fail_round_3)
  # And a round 3 killed mid-way: half its outputs written, never committed.
  dead = run.new_attempt(3)
  dead_part = os.path.join(dead.directory, client_outputs_lib.DIRECTORY,
                           'c0-00000.tfrecord')
  os.makedirs(os.path.dirname(dead_part))
  with open(dead_part, 'wb') as f:
    f.write(b'half a part')
  resumed = beam_runner.run(state_form, data, 4, 3, out, progress=QUIET)
  assert resumed.rounds == 4
  for number in (1, 2):  # Not one byte or time of a committed round moved.
    assert _files(beam_runner.RunDir(out).attempt(number).directory) == {
        p: v for p, v in committed.items()
        if p.startswith(run.attempt(number).directory)}
  assert not os.path.exists(dead.directory)
  for number in range(1, 5):
    assert_same(dict(resumed.client_outputs[number]),
                dict(whole.client_outputs[number]), exact=True,
                what=f'round {number}')
    assert list(resumed.client_outputs[number]) == list(
        whole.client_outputs[number])


def _rewrite_records(path, keep):
  with open(path, 'rb') as f:
    records = tfrecords.records_of(f.read())
  with open(path, 'wb') as f:
    f.write(tfrecords.file_bytes(keep(records)))


def test_a_damaged_outputs_file_is_named_on_read(plain_form, tmp_path):
  data = random_floats(5, 4)
  beam_runner.run(plain_form, data, 2, 4, tmp_path / 'run', progress=QUIET,
                  clients_per_element=2)

  def read(number=1):
    outputs = beam_runner.read_client_outputs(tmp_path / 'run')
    return dict(outputs[number])

  good = read()
  part = beam_runner.read_client_outputs(tmp_path / 'run')[1].files[0]
  with open(part, 'rb') as f:
    original = f.read()
  damages = [
      # A flipped bit inside a record: TFRecord's CRC.
      (lambda: _flip(part, len(original) - 8), 'a record is corrupt'),
      # Cut at a record boundary: the index's count.
      (lambda: _rewrite_records(part, lambda r: r[:-1]),
       'it holds 1 records, its round\'s index 2'),
      # Another client's record in its place.
      (lambda: _rewrite_records(part, lambda r: r[:1] * 2),
       'no outputs of client'),
      (lambda: os.remove(part), 'missing'),
  ]
  for damage, problem in damages:
    damage()
    with pytest.raises(beam_runner.RunDirError) as error:
      read()
    message = str(error.value)
    assert message.startswith(f'{part} is damaged: ') and problem in message
    assert 'per-client outputs of round 1' in message
    with open(part, 'wb') as f:
      f.write(original)
  assert_same(read(), good, exact=True)
  index = beam_runner.RunDir(tmp_path / 'run').attempt(
      2).client_outputs_path
  with open(index, 'rb') as f:
    text = f.read()
  with open(index, 'wb') as f:
    f.write(text.replace(b'"records": 2', b'"records": 3', 1))
  with pytest.raises(beam_runner.RunDirError,
                     match=f'{index} is damaged: its SHA-256 differs'):
    read(2)
  # Rounds never read outputs: the run resumes all the same.
  assert beam_runner.run(plain_form, data, 3, 4, tmp_path / 'run',
                         progress=QUIET).rounds == 3


def _flip(path, position):
  with open(path, 'r+b') as f:
    f.seek(position)
    byte = f.read(1)[0]
    f.seek(position)
    f.write(bytes([byte ^ 0x10]))


def test_a_secure_round_keeps_the_outputs_of_clients_in_its_sums(
    monkeypatch, tmp_path):
  """Two clients fail to mask after their work wrote their outputs: they
  are in no sum, and none of their outputs is returned."""
  original = protocol_steps.secagg.masked_input
  gone = {'c1', 'c4'}

  def masked_input(state, value, received):
    if state.keys.client_id in gone:
      raise ConnectionError(f'{state.keys.client_id} is offline')
    return original(state, value, received)

  monkeypatch.setattr(protocol_steps.secagg, 'masked_input', masked_input)
  rng = np.random.default_rng(0)
  data = {f'c{i}': rng.integers(0, 8, [3]).astype(np.int32) for i in range(6)}
  form = cf.compile(secure_sum_with_outputs_process())
  result = beam_runner.run(form, data, 1, 6, tmp_path / 'run', seed=1,
                           progress=QUIET, clients_per_element=2)
  assert result.outcomes[0]['clients_ok'] == 4
  outputs = result.client_outputs[1]
  sampled = beam_runner.RunDir(tmp_path / 'run').clients(1)
  assert list(outputs) == [c for c in sampled if c not in gone]
  for client, value in outputs.items():
    assert float(value) == float(np.sum(data[client]))
  # Without dropouts, exactly the local loop's (secure sums included).
  monkeypatch.setattr(protocol_steps.secagg, 'masked_input', original)
  beam_runner.testing.assert_rounds_match(
      secure_sum_with_outputs_process(), data, rounds=2, clients_per_round=4,
      rtol=0, atol=0, form=form)


def test_bad_input_is_refused_before_the_run_starts(plain_form, tmp_path):
  p = form_lib.Piece
  pieces = dict(
      initialize=p('initialize', lambda: tf.constant(0.0), ()),
      prepare=p('prepare', lambda s: (s,), (F,)),
      work=p('work', lambda d, c: ((d + c[0],),
                                   tf.data.Dataset.from_tensors(d)),
             (F, (F,))),
      zero=p('zero', lambda: (tf.constant(0.0),), ()),
      accumulate=p('accumulate', lambda a, u: (a[0] + u[0],), ((F,), (F,))),
      merge=p('merge', lambda a, b: (a[0] + b[0],), ((F,), (F,))),
      report=p('report', lambda a: a, ((F,),)),
      update=p('update', lambda s, r: (s + r[0], r[0]), (F, (F,))))
  form = cf.CanonicalForm(name='dataset_outputs', **pieces)
  assert form.has_client_outputs
  with pytest.raises(cf.FormError, match="'dataset_outputs'.*keeps only "
                     'tensors as outputs'):
    beam_runner.run(form, {'a': np.float32(1.0)}, 1, 1, tmp_path / 'bad')
  assert not (tmp_path / 'bad').exists()
  data = random_floats(6, 3)
  result = beam_runner.run(cf.compile(_no_outputs_process()), data, 1, 2,
                           tmp_path / 'none', progress=QUIET)
  assert result.client_outputs is None
  with pytest.raises(beam_runner.RunDirError,
                     match='has no per-client outputs: its form returns none'):
    beam_runner.read_client_outputs(tmp_path / 'none')
  with pytest.raises(beam_runner.RunDirError, match='holds no run'):
    beam_runner.read_client_outputs(tmp_path / 'nothing')
  beam_runner.run(plain_form, data, 1, 2, tmp_path / 'run', progress=QUIET)
  outputs = beam_runner.read_client_outputs(tmp_path / 'run')
  assert list(outputs) == [1] and 1 in outputs and 0 not in outputs
  with pytest.raises(KeyError):
    outputs[0]  # pylint: disable=pointless-statement


def _no_outputs_process():

  @cf.federated_computation(cf.server(F), cf.clients(F2))
  def next_fn(state, data):
    return state, cf.federated_mean(data)

  return cf.IterativeProcess(cf.tf_computation(lambda: tf.constant(0.0)),
                             next_fn)


def test_the_command_line_says_where_the_outputs_are(plain_form, tmp_path,
                                                     capsys):
  form_path = cf.save(plain_form, str(tmp_path / 'form.pb'))
  beam_runner.write_client_data(tmp_path / 'shards', random_floats(7, 4))
  status = cli.main(['run', '--form', form_path, '--clients',
                     str(tmp_path / 'shards'), '--rounds', '2',
                     '--clients-per-round', '3', '--output',
                     str(tmp_path / 'out')])
  printed = capsys.readouterr().out
  assert status == 0
  last = beam_runner.read_client_outputs(tmp_path / 'out')[2]
  assert (f"round 2's in {last.directory} (3 clients); read them with "
          f"beam_runner.read_client_outputs('{tmp_path / 'out'}')") in printed


@pytest.mark.slow
def test_on_dask_with_client_state_the_outputs_equal_in_process(state_form,
                                                                tmp_path):
  data = random_floats(8, 6)
  beam_runner.write_client_data(tmp_path / 'shards', data)
  expected = beam_runner.run(state_form, data, 3, 4, tmp_path / 'local',
                             progress=QUIET)
  cluster = engines.start_local_cluster(2, lifetime='10 minutes')
  try:
    result = beam_runner.run(
        state_form, str(tmp_path / 'shards'), 3, 4, tmp_path / 'dask',
        pipeline_options={'runner': 'DaskRunner',
                          'dask_client_address': cluster.scheduler_address},
        progress=QUIET, clients_per_element=2)
  finally:
    cluster.close()
  assert result.outcomes[0]['engine'].startswith('DaskRunner')
  assert len(result.outcomes[0]['clients_per_worker']) == 2
  for number in (1, 2, 3):
    assert list(result.client_outputs[number]) == list(
        expected.client_outputs[number])
    assert_same(dict(result.client_outputs[number]),
                dict(expected.client_outputs[number]), exact=True,
                what=f'round {number}')


def test_outputs_on_s3_equal_local_disk(s3, state_form, tmp_path):
  data = random_floats(9, 4)
  bucket = s3.bucket_url
  result = beam_runner.run(state_form, data, 2, 3, f'{bucket}/run',
                           pipeline_options=s3.options(), progress=QUIET)
  local = beam_runner.run(state_form, data, 2, 3, tmp_path / 'local',
                          progress=QUIET)
  for number in (1, 2):
    assert result.client_outputs[number].directory.startswith(
        f'{bucket}/run/rounds/')
    assert list(result.client_outputs[number]) == list(
        local.client_outputs[number])
    assert_same(dict(result.client_outputs[number]),
                dict(local.client_outputs[number]), exact=True)
  again = beam_runner.read_client_outputs(f'{bucket}/run',
                                          pipeline_options=s3.options())
  assert_same(dict(again[2]), dict(local.client_outputs[2]), exact=True)
