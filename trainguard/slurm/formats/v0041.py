"""data_parser/v0.0.41 (Slurm 24.05, 24.11, 25.05).

For the fields TrainGuard reads it has the shared data_parser shape (see data_parser.py); its
`standard_output`/`standard_error` are already expanded by Slurm and are used as printed.
"""

from __future__ import annotations

from trainguard.slurm.formats.data_parser import DataParserFormat

FORMAT = "data_parser/v0.0.41"
ADAPTER = DataParserFormat(FORMAT)
