"""Results remembered by the identity of their argument.

Every party of a round passes the same few objects over and over (the
roster, the round's ids): hashing their n entries at each of a client's
calls made a round quadratic in its clients.
"""

import functools
import threading


def by_identity(size=4):
  """Remembers a one-argument function's results for its last `size`
  distinct arguments, keyed by which object was passed (not by its value).
  Lists and sets, which may change, are not remembered; other arguments
  must not change once passed (they are the shared ones this package makes:
  for internal use, never on a caller's own objects)."""

  def decorator(function):
    recent = []  # [(argument, result)], the latest used first.
    lock = threading.Lock()

    @functools.wraps(function)
    def remembered(value):
      if isinstance(value, (list, set)):
        return function(value)
      with lock:
        for i, (argument, result) in enumerate(recent):
          if argument is value:
            recent.insert(0, recent.pop(i))
            return result
      result = function(value)  # Not under the lock: may be slow.
      with lock:
        recent.insert(0, (value, result))
        del recent[size:]
      return result

    return remembered

  return decorator
