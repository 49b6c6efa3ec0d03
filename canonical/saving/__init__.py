"""Saving and loading canonical forms: self-contained files, checked on load."""

from canonical.saving.form_file import from_bytes
from canonical.saving.form_file import load
from canonical.saving.form_file import save
from canonical.saving.form_file import to_bytes
from canonical.saving.form_fingerprint import fingerprint
from canonical.saving.graph_piece import GraphPiece
from canonical.saving.op_allowlist import default_allowed_ops
