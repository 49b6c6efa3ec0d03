"""Results remembered by the identity of their arguments.

Every party of a round passes the same few objects over and over (the
roster, the round's ids): hashing their n entries at each of a client's
calls made a round quadratic in its clients.
"""

import functools
import threading


def by_identity(size=4):
  """Remembers the results of the last `size` distinct calls, keyed by which
  objects were passed (not by their values). Calls passing a list or a set,
  which may change, are not remembered; other arguments must not change once
  passed (they are the shared ones this package makes: for internal use,
  never on a caller's own objects)."""

  def decorator(function):
    recent = []  # [(arguments, result)], the latest used first.
    lock = threading.Lock()

    @functools.wraps(function)
    def remembered(*arguments):
      if any(isinstance(a, (list, set)) for a in arguments):
        return function(*arguments)
      with lock:
        for i, (known, result) in enumerate(recent):
          if len(known) == len(arguments) and all(
              a is b for a, b in zip(known, arguments)):
            recent.insert(0, recent.pop(i))
            return result
      result = function(*arguments)  # Not under the lock: may be slow.
      with lock:
        recent.insert(0, (arguments, result))
        del recent[size:]
      return result

    return remembered

  return decorator
