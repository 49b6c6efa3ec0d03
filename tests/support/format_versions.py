"""The check every format version bump makes: a form that needs version
`version` is saved as it, a file claiming the version before cannot carry
what it needs, and a loader from before refuses the file."""

import pytest

import canonical as cf
from canonical.saving import envelope
from canonical.saving import form_file


def assert_needs_format_version(form, version, refusal, monkeypatch):
  """`refusal`: what the error names for the form's content in a file of
  version `version - 1`."""
  data = form_file.to_bytes(form)
  assert envelope.unwrap(data, 'f')[1] == version
  proto = form_file.to_proto(form)
  proto.format_version = version - 1
  with pytest.raises(cf.FormError, match=refusal):
    form_file.from_bytes(
        envelope.wrap(proto.SerializeToString(), version - 1), 'f')
  monkeypatch.setattr(envelope, 'FORMAT_VERSION', version - 1)
  with pytest.raises(cf.FormError,
                     match=f'format version {version} is newer'):
    form_file.from_bytes(data, 'f')
