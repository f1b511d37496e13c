"""Reference tables -> cases, and error metrics against published measurements."""
