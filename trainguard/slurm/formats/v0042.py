"""data_parser/v0.0.42 (Slurm 24.11 (its newest), 25.05, 25.11).

For the fields TrainGuard reads it has the shared data_parser shape (see data_parser.py); its
`standard_output`/`standard_error` are already expanded by Slurm and are used as printed.
"""

from __future__ import annotations

from trainguard.slurm.formats.data_parser import DataParserFormat

FORMAT = "data_parser/v0.0.42"
ADAPTER = DataParserFormat(FORMAT)
