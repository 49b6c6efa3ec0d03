"""`run_sync`: an await from code that is not a coroutine.

Every manager's method is a coroutine, as in TFF 0.87, so program logic
written with `await` runs unchanged. A script, a test or a training loop
without an event loop calls them through `run_sync`:

    manager = tff.program.FileProgramStateManager('/tmp/state')
    tff.program.run_sync(manager.save(state, 1))
    state, version = tff.program.run_sync(manager.load_latest(state))

Inside a running event loop (a notebook cell), where `asyncio.run` is
refused, it runs the awaitable on a fresh loop in another thread; in a
notebook, writing `await manager.save(state, 1)` does the same directly.
"""

import asyncio
import concurrent.futures


async def _await(awaitable):
  return await awaitable


def run_sync(awaitable):
  """Runs `awaitable` (a coroutine, task or future) to its end and returns
  its result, or raises its error."""
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(_await(awaitable))
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    return pool.submit(asyncio.run, _await(awaitable)).result()
