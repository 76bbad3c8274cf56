"""data_parser/v0.0.40 (Slurm 23.11, 24.05).

For the fields TrainGuard reads it has the shared data_parser shape (see data_parser.py) and no
expanded output paths: paths are expanded here like scontrol does.
"""

from __future__ import annotations

from trainguard.slurm.formats.data_parser import DataParserFormat

FORMAT = "data_parser/v0.0.40"
ADAPTER = DataParserFormat(FORMAT)
