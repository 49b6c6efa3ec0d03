"""A number of bits as a form's summary and `inspect` print it (no
TensorFlow: `python -m canonical inspect` answers without it)."""


def human_bits(bits):
  """'1234 bits (1.23 kbit)'; 'varies' for None (a shape not fixed)."""
  if bits is None:
    return 'varies'
  for unit, size in (('Gbit', 1e9), ('Mbit', 1e6), ('kbit', 1e3)):
    if bits >= size:
      return f'{bits} bits ({bits / size:.2f} {unit})'
  return f'{bits} bits'
