"""Runs tensor_encoding's own unit tests against `encoders`, only their imports changed.

The upstream test files (see ../shared/peers/tensor_encoding_tests/README.md) are
copied to a temporary directory, their import prefix
`tensorflow_model_optimization.python.core.internal.tensor_encoding` becomes
`encoders` with every module path kept as it is (`...stages.research.kashin` ->
`encoders.stages.research.kashin`), `import mock` becomes `from unittest import
mock`, and the files run in two pytest processes: those that switch eager
execution off at import time, and the others. Prints a table per file and
`P passed, F failed of N`; `--json` writes every test's outcome.

  python scripts/te_conformance.py [--upstream DIR] [--json PATH] [--jobs 2]

The upstream directory comes from --upstream, else $TENSOR_ENCODING_TESTS, else
shared/peers/tensor_encoding_tests next to this checkout or a folder above it.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV_VAR = 'TENSOR_ENCODING_TESTS'
UPSTREAM_PACKAGE = 'tensorflow_model_optimization.python.core.internal.tensor_encoding'
# Each process's time limit: a hung process counts its files as failed, the
# other process still runs.
GROUP_TIMEOUT_SECONDS = 900


def default_upstream():
  """The upstream test directory, or None when neither place has it."""
  candidates = [os.environ.get(ENV_VAR)] if os.environ.get(ENV_VAR) else []
  # ../shared next to this checkout, or next to any folder above it.
  candidates += [parent / 'shared' / 'peers' / 'tensor_encoding_tests'
                 for parent in REPO.parents]
  for candidate in candidates:
    if (pathlib.Path(candidate) / 'tensor_encoding').is_dir():
      return pathlib.Path(candidate)
  return None


def rewrite_imports(source):
  """Only the import lines change: the package prefix, and `mock` from unittest."""
  source = re.sub(r'^(\s*)from ' + re.escape(UPSTREAM_PACKAGE) + r'(\.|\s)',
                  r'\1from encoders\2', source, flags=re.MULTILINE)
  source = re.sub(r'^(\s*)import ' + re.escape(UPSTREAM_PACKAGE) + r'\.',
                  r'\1import encoders.', source, flags=re.MULTILINE)
  return re.sub(r'^(\s*)import mock\s*$', r'\1from unittest import mock',
                source, flags=re.MULTILINE)


def test_files(upstream):
  return sorted((upstream / 'tensor_encoding').rglob('*_test.py'))


def _eager_groups(files):
  """The files that switch eager execution off at import time, and the rest:
  each group can share one process (a process per file costs more than the
  tests themselves: TensorFlow loads in each)."""
  graph = [path for path in files
           if 'disable_eager_execution' in path.read_text()]
  return [group for group in (graph, [p for p in files if p not in graph])
          if group]


def _run_group(paths, upstream, workdir):
  """Runs the rewritten files in one pytest process; returns {file: outcomes}
  and the process's output."""
  names = {}  # Module name in the report -> the file's upstream path.
  for path in paths:
    relative = str(path.relative_to(upstream / 'tensor_encoding'))
    target = workdir / relative.replace(os.sep, '__')
    target.write_text(rewrite_imports(path.read_text()))
    names[target.stem] = relative
  report = workdir / f'{sorted(names)[0]}.xml'
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=str(REPO))
  command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
             '--rootdir', str(workdir), '-c', os.devnull,
             f'--junitxml={report}'] + [f'{module}.py' for module in names]
  try:
    finished = subprocess.run(command, cwd=workdir, env=env, capture_output=True,
                              text=True, timeout=GROUP_TIMEOUT_SECONDS)
    output = finished.stdout + finished.stderr
  except subprocess.TimeoutExpired as timeout:
    output = f'timed out after {GROUP_TIMEOUT_SECONDS} s\n{timeout.stdout or ""}'
  outcomes = _outcomes(report, names) if report.exists() else {}
  for relative in names.values():
    if not outcomes.get(relative):
      outcomes[relative] = {f'{relative}::<collection>': 'error'}
  return outcomes, output


def _outcomes(report, names):
  """{file: {test id: passed|failed|error|skipped}} from a JUnit XML report;
  `names` maps each module's name to its file."""
  outcomes = {}
  for case in ElementTree.parse(report).iter('testcase'):
    module, _, class_name = case.get('classname', '').rpartition('.')
    file_name = names.get(module.rsplit('.', 1)[-1])
    if file_name is None:
      continue
    kinds = {child.tag for child in case}
    if 'error' in kinds:
      outcome = 'error'
    elif 'failure' in kinds:
      outcome = 'failed'
    elif 'skipped' in kinds:
      outcome = 'skipped'
    else:
      outcome = 'passed'
    test_id = f'{file_name}::{class_name}::{case.get("name")}'
    outcomes.setdefault(file_name, {})[test_id] = outcome
  return outcomes


def run(upstream, jobs=2, only=None, verbose=False):
  """Runs every upstream test file; returns {file: {test id: outcome}}."""
  files = [path for path in test_files(upstream)
           if not only or any(part in str(path) for part in only)]
  results = {}
  with tempfile.TemporaryDirectory(prefix='te_conformance_') as directory:
    workdir = pathlib.Path(directory)
    # The upstream tests read files next to them only through imports.
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
      futures = [pool.submit(_run_group, group, upstream, workdir)
                 for group in _eager_groups(files)]
      for future in concurrent.futures.as_completed(futures):
        outcomes, output = future.result()
        results.update(outcomes)
        if verbose and any(o in ('failed', 'error') for file_outcomes in
                           outcomes.values() for o in file_outcomes.values()):
          print(output[-20000:])
  return dict(sorted(results.items()))


def summary(results):
  counts = {'passed': 0, 'failed': 0, 'error': 0, 'skipped': 0}
  for outcomes in results.values():
    for outcome in outcomes.values():
      counts[outcome] += 1
  counts['total'] = sum(counts.values())
  return counts


def print_table(results):
  """Skipped tests (tf.test.TestCase's own `test_session`, skipped upstream
  too) are shown apart and not counted: N is the tests that ran."""
  print(f'{"file":40s} {"passed":>7s} {"failed":>7s} {"skipped":>8s}')
  for name, outcomes in results.items():
    values = list(outcomes.values())
    print(f'{name:40s} {values.count("passed"):7d} '
          f'{values.count("failed") + values.count("error"):7d} '
          f'{values.count("skipped"):8d}')
  counts = summary(results)
  ran = counts['total'] - counts['skipped']
  print(f'{counts["passed"]} passed, {ran - counts["passed"]} failed of {ran}'
        f' ({100.0 * counts["passed"] / max(ran, 1):.1f}%); '
        f'{counts["skipped"]} skipped')


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--upstream', type=pathlib.Path, default=None,
                      help=f'upstream test directory (default: ${ENV_VAR}, then '
                           '../shared/peers/tensor_encoding_tests)')
  parser.add_argument('--json', type=pathlib.Path, help='write every outcome here')
  parser.add_argument('--jobs', type=int, default=2)
  parser.add_argument('--only', nargs='*', help='run files whose path contains one of these')
  parser.add_argument('--verbose', action='store_true', help="print failing files' output")
  args = parser.parse_args(argv)
  upstream = args.upstream or default_upstream()
  if upstream is None or not (upstream / 'tensor_encoding').is_dir():
    print(f'tensor_encoding tests not found: pass --upstream or set ${ENV_VAR}',
          file=sys.stderr)
    return 2
  results = run(upstream, jobs=args.jobs, only=args.only, verbose=args.verbose)
  print_table(results)
  if args.json:
    args.json.write_text(json.dumps({'summary': summary(results), 'tests': results},
                                    indent=1, sort_keys=True) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
