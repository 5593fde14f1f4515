"""Running: submitting planned runs through the executors, following them to the end, checking a
site against its twin."""
