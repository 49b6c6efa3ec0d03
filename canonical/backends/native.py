"""TFF's `tff.backends.native` and `tff.backends.test` execution contexts:
here every one runs a computation as its compiled form where it has one
(`canonical.executors.compiled`), by the reference executor otherwise, with
TFF's `default_num_clients` (how many clients a computation with no CLIENTS
argument runs on)."""

import functools

from canonical.core import context
from canonical import errors
from canonical.executors import compiled


def set_sync_local_cpp_execution_context(default_num_clients=0,
                                         max_concurrent_computation_calls=-1,
                                         stream_structs=False):
  """Federated computations called from Python run compiled (or by the
  reference executor), on `default_num_clients` clients where no argument
  says."""
  del max_concurrent_computation_calls, stream_structs  # One process here.
  context.set_executor(_executor(default_num_clients))


set_sync_test_cpp_execution_context = set_sync_local_cpp_execution_context
set_localhost_cpp_execution_context = set_sync_local_cpp_execution_context


def _executor(default_num_clients):
  """What runs a computation called from Python in these contexts."""
  if isinstance(default_num_clients, bool) or not isinstance(
      default_num_clients, int) or default_num_clients < 0:
    raise errors.InvalidValueError(
        'default_num_clients must be a non-negative int, got '
        f'{default_num_clients!r}.')
  return functools.partial(compiled.run,
                           default_num_clients=default_num_clients)


def create_sync_local_cpp_execution_context(
    default_num_clients=0, max_concurrent_computation_calls=-1,
    stream_structs=False):
  """A context running computations as `set_sync_local_cpp_execution_context`
  does (`tff.framework.set_default_context` installs it)."""
  del max_concurrent_computation_calls, stream_structs  # One process here.
  from canonical import framework  # pylint: disable=g-import-not-at-top
  return framework.ExecutionContext(_executor(default_num_clients))


def create_async_local_cpp_execution_context(
    default_num_clients=0, max_concurrent_computation_calls=-1,
    stream_structs=False):
  """The context of a federated program's platform lines (which wrap it in
  `tff.program.NativeFederatedContext`): computations run as
  `set_sync_local_cpp_execution_context` runs them; `invoke` is a
  coroutine."""
  del max_concurrent_computation_calls, stream_structs  # One process here.
  from canonical import framework  # pylint: disable=g-import-not-at-top
  return framework.AsyncExecutionContext(_executor(default_num_clients))


def set_async_local_cpp_execution_context(default_num_clients=0,
                                          max_concurrent_computation_calls=-1,
                                          stream_structs=False):
  """Installs `create_async_local_cpp_execution_context`'s context: a
  computation called from Python then returns an awaitable, as in TFF."""
  from canonical import framework  # pylint: disable=g-import-not-at-top
  framework.set_default_context(create_async_local_cpp_execution_context(
      default_num_clients, max_concurrent_computation_calls, stream_structs))
