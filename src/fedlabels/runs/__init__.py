"""A run: its configuration, plan, round loop, participation, checkpoint and progress."""
