"""Teacher-student methods: PATE, DP-PATE and FREDY."""
