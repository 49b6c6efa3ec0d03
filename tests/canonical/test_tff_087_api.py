"""TFF 0.87's public API, name by name, against the record made from a real
TFF 0.87 (tests/data/tff_087_api.json; scripts/record_tff_api.py writes
it): each name exists here, is the same kind of thing, and takes every form
of argument TFF's takes (its parameters first, in TFF's order, with TFF's
defaults). docs/tff-0.87.md names every one of them."""

import pathlib
import re

import pytest

import tff_api_gaps
import tff_api_record

RECORD = tff_api_record.load()
DOCS = (pathlib.Path(__file__).parents[2] / 'docs' / 'tff-0.87.md'
        ).read_text()
GAPS = {**tff_api_gaps.NOT_YET, **tff_api_gaps.NEXT_ISSUE}


def test_the_record_is_tff_087_whole():
  assert tff_api_record.RECORD.exists()
  for module in ('learning', 'aggregators', 'templates', 'simulation',
                 'program', 'types', 'structure', 'analytics',
                 'backends.mapreduce'):
    assert f'tff.{module}' in RECORD
  assert len(RECORD) > 300
  assert not set(GAPS) - set(RECORD), 'gaps name names TFF 0.87 lacks'


@pytest.mark.parametrize('name', sorted(RECORD))
def test_name_is_tffs(name):
  problems = tff_api_record.problems(name, RECORD[name])
  if name in GAPS:
    assert problems, (f'{name} now matches TFF 0.87: delete its entry from '
                      'tests/support/tff_api_gaps.py')
  else:
    assert not problems, f'{name}: ' + '; '.join(problems)


def _sections(text):
  """`(modules, body)` per heading of the docs: the `tff.*` names its
  heading gives in backticks, and its text up to the next heading."""
  parts = re.split(r'^(#+ .*)$', text, flags=re.M)
  return [(set(re.findall(r'`(tff\.[\w.]+)`', heading)), body)
          for heading, body in zip(parts[1::2], parts[2::2])]


SECTIONS = _sections(DOCS)


def _documented(name):
  """Named in full anywhere, or by its last part in a section whose heading
  gives its module, or on a line that gives its module."""
  if re.search(rf'`{re.escape(name)}\b', DOCS):
    return True
  module, short = name.rsplit('.', 1)
  by_short = re.compile(rf'`(\w+\.)?{re.escape(short)}\b')
  return any(module in modules and by_short.search(body)
             for modules, body in SECTIONS) or any(
                 f'`{module}`' in line and by_short.search(line)
                 for line in DOCS.splitlines())


def test_docs_name_every_name():
  missing = [name for name in RECORD if not _documented(name)]
  assert not missing, (f'docs/tff-0.87.md names none of {len(missing)}: '
                       + ', '.join(missing))


def test_the_checks_can_fail():
  """A missing name, a renamed parameter, a changed default and a
  keyword-only parameter where TFF takes it by position are all caught."""
  assert tff_api_record.problems('tff.learning.no_such_name',
                                 {'kind': 'function', 'parameters': []})
  theirs = [['model_fn', 'POSITIONAL_OR_KEYWORD', None],
            ['rounds', 'POSITIONAL_OR_KEYWORD', '5']]
  assert not tff_api_record.parameter_problems(
      theirs, theirs + [['extra', 'KEYWORD_ONLY', 'None']])
  for ours in ([['model', 'POSITIONAL_OR_KEYWORD', None], theirs[1]],
               [theirs[0], ['rounds', 'POSITIONAL_OR_KEYWORD', '6']],
               [theirs[0], ['rounds', 'KEYWORD_ONLY', '5']],
               theirs + [['extra', 'POSITIONAL_OR_KEYWORD', None]],
               theirs[:1]):
    assert tff_api_record.parameter_problems(theirs, ours), ours
