"""TFF 0.87 names that do not yet match TFF here (issue 36 in progress).

Each entry names what differs today. `tests/canonical/test_tff_087_api.py`
fails for a name listed here that has come to match (delete its line) and
for one not listed that does not match. The list only shrinks; issue 36
is resolved when it is empty.
"""

NOT_YET = {
}

# Names issue 36 leaves to issue 38 (privacy), with what they lack.
NEXT_ISSUE = {
}
