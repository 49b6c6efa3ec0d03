"""moto's S3 server, with conditional writes as atomic as S3's.

moto checks a PutObject's If-None-Match (or If-Match) and then stores the
object in two steps, on a threaded server: two racing create-only writes
can both succeed (a full test run saw it), where S3 lets exactly one through
and our commits rely on that. One lock around PutObject closes the gap;
reads stay concurrent. Run as moto's own server: same arguments.
"""

import sys
import threading

from moto import server
from moto.s3 import responses


def _one_at_a_time(put_object):
  lock = threading.Lock()

  def locked(self):
    with lock:
      return put_object(self)

  return locked


responses.S3Response.put_object = _one_at_a_time(
    responses.S3Response.put_object)

if __name__ == '__main__':
  server.main(sys.argv[1:])
