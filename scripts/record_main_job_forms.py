"""Saves the main job's forms for a set of flag combinations, as its code
builds them now, to tests/data/main_job_forms_tff/NAME.pb (the forms from
before the main job ran TFF's FedAvg stay in tests/data/main_job_forms/).

tests/pipelines/test_main_job_forms.py runs each saved form and the form
today's code builds from the same flags, round by round on one machine, and
asks for the same results: a refactor of the aggregation stack that changed
what a user's run computes fails there, on whatever CPU the suite runs
(recorded numbers would hold only on the CPU kind that made them).

    .venv/bin/python scripts/record_main_job_forms.py [NAME ...]
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'tests', 'support'))

import main_job_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

import canonical  # pylint: disable=g-import-not-at-top,wrong-import-position


def main(names):
  os.makedirs(main_job_flags.AFTER, exist_ok=True)
  for name in names or main_job_flags.FLAGS:
    form = canonical.compile(main_job_flags.process(name))
    path = canonical.save(form, main_job_flags.form_path(name))
    print(f'{name}: {path} ({os.path.getsize(path):,} bytes)')


if __name__ == '__main__':
  main(sys.argv[1:])
