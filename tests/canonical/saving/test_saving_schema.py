"""The schema: .proto files only in proto/, and the generated module is current."""

import importlib.util
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '../../..'))
GENERATED = os.path.join(ROOT, 'canonical', 'saving', 'canonical_form_pb2.py')


def _gen_proto():
  spec = importlib.util.spec_from_file_location(
      'gen_proto', os.path.join(ROOT, 'scripts', 'gen_proto.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_proto_folder_holds_only_schema_files():
  # `proto` is proto-plus's import name: never make the folder a package.
  files = os.listdir(os.path.join(ROOT, 'proto'))
  assert files and all(f.endswith('.proto') for f in files), files


def test_generated_module_and_schema_are_current(tmp_path):
  gen_proto = _gen_proto()
  fresh = gen_proto.generate(str(tmp_path))
  for made, committed in (
      (fresh, GENERATED),
      (os.path.join(tmp_path, gen_proto.SCHEMA),
       os.path.join(os.path.dirname(GENERATED), gen_proto.SCHEMA))):
    with open(made, 'rb') as f, open(committed, 'rb') as g:
      assert f.read() == g.read(), (
          f'{os.path.relpath(committed, ROOT)} is stale: run scripts/gen_proto')
