"""Small leaves every layer may use: errors, randomness, threads, files, provenance, metrics."""
