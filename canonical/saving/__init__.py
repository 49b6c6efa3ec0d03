"""Saving and loading canonical forms: self-contained files, checked on load.

The names below are imported on first use, so that describing a form file
(`inspection`, `python -m canonical inspect`) imports no TensorFlow.
"""

from typing import TYPE_CHECKING

from canonical import _lazy

if TYPE_CHECKING:  # Imported on first use (`_lazy.declared`).
  from canonical.saving.form_file import from_bytes
  from canonical.saving.form_file import load
  from canonical.saving.form_file import save
  from canonical.saving.form_file import to_bytes
  from canonical.saving.form_fingerprint import fingerprint
  from canonical.saving.graph_piece import GraphPiece
  from canonical.saving.op_allowlist import default_allowed_ops

__getattr__, __dir__ = _lazy.declared(globals())
