"""The names of a form's pieces: the loader (`canonical.form`,
`saving.form_file`) and the TensorFlow-free reader check files by them."""

# The eight pieces of every round, in order.
PIECES = ('initialize', 'prepare', 'work', 'zero', 'accumulate', 'merge',
          'report', 'update')
# With client state, and with secure sums.
OPTIONAL_PIECES = ('client_state_init', 'secure_parameters')
