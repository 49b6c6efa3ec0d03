"""Keeps our output, from a command line or a script, to what its user can
act on.

Third-party libraries print lines that say nothing to our user; each is
silenced here, at its source and by its exact text, so every other line of
theirs, and all of ours, still shows. `import canonical` (and so `import
beam_runner`) silences them as the command lines do (`on_import`), unless
FEDCANON_VERBOSE=1 asks for every line; a user's own TF_CPP_MIN_LOG_LEVEL
wins. A command line also calls `environment()` first and `third_party()`
once its flags are parsed; a Dask worker started with
`preload=['canonical.quiet']` does the same (`dask_setup`).

What is silenced, and why it says nothing:
- TensorFlow's C++ INFO and WARNING lines (TF_CPP_MIN_LOG_LEVEL=2, unless
  the user set it): CPU instruction notes, TFRecordDataset's buffer size.
- Lines TensorFlow's C++ libraries write to stderr while they load, before
  any setting is read: absl's "All log messages before absl::InitializeLog()"
  notice, oneDNN's "custom operations are on", the CUDA stub's "Could not
  find cuda drivers" and cuInit's failure (the CPU build, on CPUs). Whenever
  TensorFlow is imported, stderr is taken aside until it has loaded and
  listed its devices, and every other line of it is passed on.
- dp_accounting's "_compute_log_a_frac failed to converge": its RDP
  accountant leaves out that order and still gives a valid epsilon.
- Beam's "apitools not found": BigQuery clients, which nothing here uses;
  and its "Discarding unparseable args": the command lines refuse those
  flags, naming them, in their `error:` line.
- Dask's nanny "Worker process still alive ..., killing" when a local
  cluster we started closes: killing it is how it closes.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile

from canonical import _lazy

_TENSORFLOW_LOAD_NOISE = re.compile(
    r'WARNING: All log messages before absl::InitializeLog\(\) is called are '
    r'written to STDERR$'
    r'|I\d{4} [\d:. ]+\d+ port\.cc:\d+\] oneDNN custom operations are on'
    r'|I\d{4} [\d:. ]+\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers'
    r'|E\d{4} [\d:. ]+\d+ cuda_platform\.cc:\d+\] failed call to cuInit')

# (logger, the start of the messages dropped from it)
_LOG_NOISE = (
    ('absl', '_compute_log_a_frac failed to converge'),
    ('root', 'apitools not found, and bigquery client libraries'),
    ('apache_beam.options.pipeline_options', 'Discarding unparseable args'),
    ('distributed.nanny', 'Worker process still alive after'),
)


VERBOSE_VARIABLE = 'FEDCANON_VERBOSE'


def on_import():
  """What `import canonical` does: `third_party()`, unless the environment
  says FEDCANON_VERBOSE=1 (or any value but 0)."""
  if os.environ.get(VERBOSE_VARIABLE, '0') in ('', '0'):
    third_party()


def environment():
  """Settings read when TensorFlow loads; the user's own win."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def third_party():
  """Silences the third-party lines above (once per process)."""
  environment()
  for name, prefix in _LOG_NOISE:
    logger = logging.getLogger(None if name == 'root' else name)
    if not any(isinstance(f, _DropMessages) and f.prefix == prefix
               for f in logger.filters):
      logger.addFilter(_DropMessages(prefix))
  _lazy.around_import('tensorflow', _load_tensorflow_quietly)


def dask_setup(worker):
  """Dask's preload hook: a worker started with `preload=['canonical.quiet']`
  keeps quiet as the command lines do."""
  del worker
  third_party()


class _DropMessages(logging.Filter):
  """Drops a logger's records whose message starts with `prefix`."""

  def __init__(self, prefix):
    super().__init__()
    self.prefix = prefix

  def filter(self, record):
    return not str(record.msg).startswith(self.prefix)


def _load_tensorflow_quietly(load, module):
  """TensorFlow loaded with its load-time lines taken out of stderr."""
  with _without_load_noise():
    load(module)
    module.config.list_physical_devices()  # cuInit's line comes here.


@contextlib.contextmanager
def _without_load_noise():
  """Takes stderr (the file descriptor, which C++ writes to) aside, then
  passes on every line of it but TensorFlow's load-time noise."""
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    with tempfile.TemporaryFile() as captured:
      os.dup2(captured.fileno(), 2)
      try:
        yield
      finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        captured.seek(0)
        lines = captured.read().decode(errors='replace').splitlines(True)
        sys.stderr.write(''.join(
            line for line in lines if not _TENSORFLOW_LOAD_NOISE.match(line)))
        sys.stderr.flush()
  finally:
    os.close(saved)
