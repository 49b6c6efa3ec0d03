"""Saving and loading canonical forms: self-contained files, checked on load.

The names below are imported on first use, so that describing a form file
(`inspection`, `python -m canonical inspect`) imports no TensorFlow.
"""

from canonical import _lazy

__getattr__, __dir__ = _lazy.module_getattr(globals(), {
    'canonical.saving.form_file': ('from_bytes', 'load', 'save', 'to_bytes'),
    'canonical.saving.form_fingerprint': ('fingerprint',),
    'canonical.saving.graph_piece': ('GraphPiece',),
    'canonical.saving.op_allowlist': ('default_allowed_ops',),
})
