"""`check_in_federated_context`: what TFF's program logic calls first, to
stop early where federated computations cannot run.

Here a federated computation called from Python runs on the executor that
`import canonical` installs (`canonical.core.context`), so the check passes
unless that executor was removed.
"""

from canonical import errors


def check_in_federated_context() -> None:
  """Raises FederatedError if calling a federated computation from Python
  would fail for want of an executor."""
  from canonical.core import context  # pylint: disable=g-import-not-at-top
  if getattr(context, '_executor', None) is None:
    raise errors.FederatedError(
        'Not in a federated context: no executor runs federated '
        'computations called from Python (import canonical installs the '
        'reference executor).')
