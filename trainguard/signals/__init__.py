"""`trainguard signals check`: does the operator's telemetry give the detectors what they need?"""
