"""Fakes of external HTTP services, run as real servers on loopback in tests."""
