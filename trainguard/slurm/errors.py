"""Typed errors of the Slurm output parsers (all ValueErrors: untrusted input never raises anything else)."""

from __future__ import annotations


class SlurmParseError(ValueError):
    """Slurm output did not have the expected shape."""


class SlurmFormatError(SlurmParseError):
    """A Slurm document whose format (version, shape) TrainGuard cannot understand.

    Never means "no jobs": callers must treat it as "Slurm's answer is unreadable" and keep what they
    knew, not as "every job left the queue".
    """


class AmbiguousOutputError(SlurmParseError):
    """`scontrol -o` output whose user text (name, comment, paths) imitates `Key=value` fields.

    Callers should fall back to the JSON form, where every value is delimited.
    """


class SlurmReportedError(SlurmParseError):
    """JSON output whose `errors` list is not empty (e.g. slurmctld unreachable); retry later."""
