"""Hypothesis runs the property tests without its 200 ms per-example deadline: CI runs two pytest workers on
two shared cores, where one slow example is the machine's load, not a fault of the code under test."""

from hypothesis import settings

settings.register_profile("trainguard", deadline=None)
settings.load_profile("trainguard")
