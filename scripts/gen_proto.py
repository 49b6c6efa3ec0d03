"""Generates canonical/saving/canonical_form_pb2.py (and its schema as a
descriptor set, form_schema.binpb) from proto/canonical_form.proto, and
canonical/core/tff_type_pb2.py (TFF 0.87's type messages) from
proto/tff_type.proto.

TensorFlow's wheel ships no .proto sources, so the schemas ours imports
(graph.proto, struct.proto and theirs) go to protoc as a descriptor set built
from the installed tensorflow `_pb2` modules.
tests/canonical/saving/test_saving_schema.py runs `generate` into a temporary
folder and fails when the committed module differs.
"""

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, 'proto')
PROTO_FILE = 'canonical_form.proto'
OUTPUT_DIR = os.path.join(ROOT, 'canonical', 'saving')
MODULE = 'canonical_form_pb2.py'
# The same schema as a FileDescriptorSet (with TensorFlow's messages it
# embeds), for the reader that parses form files without TensorFlow.
SCHEMA = 'form_schema.binpb'


def _tensorflow_descriptor_set():
  """A FileDescriptorSet of the TF schemas our .proto imports, deps first."""
  from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.core.framework import graph_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.core.protobuf import struct_pb2  # pylint: disable=g-import-not-at-top
  files, seen = descriptor_pb2.FileDescriptorSet(), set()

  def add(file_descriptor):
    if file_descriptor.name in seen:
      return
    seen.add(file_descriptor.name)
    for dependency in file_descriptor.dependencies:
      add(dependency)
    file_descriptor.CopyToProto(files.file.add())

  add(graph_pb2.DESCRIPTOR)
  add(struct_pb2.DESCRIPTOR)
  return files


def generate(output_dir=OUTPUT_DIR):
  """Writes the generated module (and `SCHEMA`) into `output_dir`; returns
  the module's path."""
  with tempfile.TemporaryDirectory() as tmp:
    descriptor_set = os.path.join(tmp, 'tensorflow.pb')
    with open(descriptor_set, 'wb') as f:
      f.write(_tensorflow_descriptor_set().SerializeToString())
    # protoc runs in its own process: its bundled protobuf library and
    # TensorFlow's do not share one process safely.
    run = subprocess.run([
        sys.executable, '-m', 'grpc_tools.protoc', f'--proto_path={PROTO_DIR}',
        f'--descriptor_set_in={descriptor_set}',
        f'--python_out={output_dir}',
        f'--descriptor_set_out={os.path.join(output_dir, SCHEMA)}',
        '--include_imports', os.path.join(PROTO_DIR, PROTO_FILE)],
                         capture_output=True, text=True, check=False)
  if run.returncode != 0:
    raise RuntimeError(f'protoc failed on {PROTO_FILE} (exit '
                       f'{run.returncode}): {run.stderr.strip()}')
  return os.path.join(output_dir, MODULE)


TYPES_PROTO_FILE = 'tff_type.proto'
TYPES_OUTPUT_DIR = os.path.join(ROOT, 'canonical', 'core')
TYPES_MODULE = 'tff_type_pb2.py'


def generate_types(output_dir=TYPES_OUTPUT_DIR):
  """Writes the type messages' module into `output_dir`; returns its path
  (tests/canonical/core/test_tff_087_types.py checks the committed one
  is fresh)."""
  run = subprocess.run([
      sys.executable, '-m', 'grpc_tools.protoc', f'--proto_path={PROTO_DIR}',
      f'--python_out={output_dir}', os.path.join(PROTO_DIR, TYPES_PROTO_FILE)],
                       capture_output=True, text=True, check=False)
  if run.returncode != 0:
    raise RuntimeError(f'protoc failed on {TYPES_PROTO_FILE} (exit '
                       f'{run.returncode}): {run.stderr.strip()}')
  return os.path.join(output_dir, TYPES_MODULE)


if __name__ == '__main__':
  path = generate(sys.argv[1] if len(sys.argv) > 1 else OUTPUT_DIR)
  print(f'wrote {os.path.relpath(path, ROOT)}')
  path = generate_types(sys.argv[2] if len(sys.argv) > 2 else
                        TYPES_OUTPUT_DIR)
  print(f'wrote {os.path.relpath(path, ROOT)}')
