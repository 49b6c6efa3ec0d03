"""Composable lossy tensor encoders in pure TensorFlow, compatible with tensor_encoding.

`import encoders as te` gives `te.core`, `te.encoders` and `te.stages`, with the
names tensor_encoding users know.
"""



def __getattr__(name):
  """`te.core`, `te.encoders` and `te.stages`, imported on first use, so
  that `encoders.errors` (which every layer above imports) imports no
  TensorFlow."""
  if name == 'core':
    import encoders.core as core  # pylint: disable=g-import-not-at-top
    return core
  if name == 'encoders':
    import encoders.encoders as encoders  # pylint: disable=g-import-not-at-top
    return encoders
  if name == 'stages':
    import encoders.stages as stages  # pylint: disable=g-import-not-at-top
    return stages
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
