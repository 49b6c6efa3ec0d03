"""Ready-to-run programs on real data: data preparation, training, command lines."""
