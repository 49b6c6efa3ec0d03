"""A round as a Beam pipeline (`round`), and the steps it is made of
(`steps`)."""
