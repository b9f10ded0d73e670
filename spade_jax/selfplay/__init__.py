"""selfplay."""
