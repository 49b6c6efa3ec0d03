"""TFF 0.87's `tff.framework`, its execution-context part: where a
computation called from Python runs, as a federated program's platform
lines set it up.

    context = tff.backends.native.create_async_local_cpp_execution_context()
    context = tff.program.NativeFederatedContext(context)
    tff.framework.set_default_context(context)

Here one executor runs every federated computation called from Python
(`canonical.core.context`, the reference executor unless something else was
installed). An execution context (`ExecutionContext`, or the async
`AsyncExecutionContext` that `tff.backends.native` makes) wraps such an
executor; `set_default_context` makes a context the one calls go through, so
a `tff.program.NativeFederatedContext` gets every call and returns value
references, as in TFF. `get_context_stack().current` is the context in
effect.

A context's `invoke(comp, arg)` takes TFF's one argument: None for no
parameter, the value for one, and for several a tuple (or a mapping by
parameter name); a call from Python passes its arguments as `Arguments`.
"""

import abc
import collections.abc
import inspect

from canonical import errors


class SyncContext(abc.ABC):
  """A context whose `invoke` returns the result."""

  @abc.abstractmethod
  def invoke(self, comp, arg):
    """Runs `comp` on `arg` (see the module docstring)."""


class AsyncContext(abc.ABC):
  """A context whose `invoke` is a coroutine: a computation called from
  Python returns an awaitable of its result."""

  @abc.abstractmethod
  async def invoke(self, comp, arg):
    """Runs `comp` on `arg` (see the module docstring)."""


class Arguments(tuple):
  """The several arguments of one call from Python, passed as one `arg`."""


def pack(args) -> object:
  """A call's positional arguments as one `arg` for `invoke`."""
  if not args:
    return None
  if len(args) == 1:
    return args[0]
  return Arguments(args)


def _parameter_names(comp) -> list:
  """The names of `comp`'s parameters, as its Python function names them."""
  types = getattr(comp, 'parameter_types', None)
  if types is None:
    types = getattr(comp, 'parameter_specs', None)
  if types is None:
    raise errors.InvalidTypeError(
        f'A context invokes computations (tff.Computation); got '
        f'{type(comp).__name__}.')
  try:
    if hasattr(comp, 'trace'):  # A federated computation's traced graph.
      names = [p.name for p in comp.trace().parameters]
    else:
      names = list(inspect.signature(comp.python_function).parameters)
  except (AttributeError, TypeError, ValueError):
    names = []
  names = names[:len(types)]
  return names + list(range(len(names), len(types)))


def unpack(comp, arg) -> tuple:
  """`arg` (see `pack`, or TFF's one argument) as `comp`'s positional
  arguments."""
  if isinstance(arg, Arguments):
    return tuple(arg)
  names = _parameter_names(comp)
  if not names:
    if arg is not None:
      raise errors.InvalidValueError(
          f'{comp.describe_for_error()} takes no argument, got one.')
    return ()
  if len(names) == 1:
    return (arg,)
  if isinstance(arg, collections.abc.Mapping) and set(arg) == set(names):
    return tuple(arg[name] for name in names)
  if isinstance(arg, (list, tuple)) and len(arg) == len(names):
    return tuple(arg)
  raise errors.InvalidValueError(
      f'{comp.describe_for_error()} takes {len(names)} arguments; give them '
      f'as a tuple of {len(names)} (or a mapping by name), got '
      f'{type(arg).__name__}.')


def run_on(executor, comp, args):
  """`comp(*args)` by `executor` (federated computations) or by itself (a
  tf_computation runs eagerly)."""
  from canonical.core import computations  # pylint: disable=g-import-not-at-top
  if isinstance(comp, computations.FederatedComputation):
    if executor is None:
      raise errors.FederatedError(
          f'{comp.describe_for_error()} was called, but no executor is '
          'installed to run it.')
    return executor(comp, *args)
  return comp(*args)


class ExecutionContext(SyncContext):
  """Runs computations by `executor(computation, *args)` (the language's
  executor protocol) and returns their values."""

  def __init__(self, executor):
    if not callable(executor):
      raise errors.InvalidTypeError(
          f'ExecutionContext: executor must be callable (computation, '
          f'*args), got {type(executor).__name__}.')
    self.executor = executor

  def invoke(self, comp, arg):
    return run_on(self.executor, comp, unpack(comp, arg))


class AsyncExecutionContext(AsyncContext):
  """As `ExecutionContext`, with `invoke` a coroutine (TFF's async
  contexts). The computation runs on the caller's thread when awaited."""

  def __init__(self, executor):
    if not callable(executor):
      raise errors.InvalidTypeError(
          f'AsyncExecutionContext: executor must be callable (computation, '
          f'*args), got {type(executor).__name__}.')
    self.executor = executor

  async def invoke(self, comp, arg):
    return run_on(self.executor, comp, unpack(comp, arg))


class _ThroughContext:
  """The language's executor that hands every call to `context`."""

  def __init__(self, context):
    self.context = context

  def __call__(self, computation, *args):
    return self.context.invoke(computation, pack(args))


def _check_context(context, where):
  if not isinstance(context, (SyncContext, AsyncContext)):
    raise errors.InvalidTypeError(
        f'{where}: expected a context (tff.framework.SyncContext or '
        'AsyncContext, such as tff.program.NativeFederatedContext or what '
        'tff.backends.native.create_async_local_cpp_execution_context '
        f'returns), got {type(context).__name__}.')


def _executor():
  from canonical.core import context  # pylint: disable=g-import-not-at-top
  return getattr(context, '_executor', None)


class ContextStack:
  """TFF's context stack: the context now in effect, and how to change it."""

  @property
  def current(self):
    """The context in effect: the one installed, or an `ExecutionContext`
    over the installed executor."""
    executor = _executor()
    if isinstance(executor, _ThroughContext):
      return executor.context
    return ExecutionContext(executor) if executor is not None else None

  def set_default_context(self, ctx) -> None:
    """Makes `ctx` the context every call of a computation from Python
    goes through."""
    _check_context(ctx, 'set_default_context')
    from canonical.core import context  # pylint: disable=g-import-not-at-top
    if isinstance(ctx, ExecutionContext):
      context.set_executor(ctx.executor)
    else:
      context.set_executor(_ThroughContext(ctx))


_STACK = ContextStack()


def get_context_stack() -> ContextStack:
  """The process's context stack."""
  return _STACK


def set_default_context(ctx) -> None:
  """Makes `ctx` the context every call of a computation from Python goes
  through (TFF's `tff.framework.set_default_context`)."""
  _STACK.set_default_context(ctx)
