"""data_parser/v0.0.43 (Slurm 25.05, 25.11). Not installable on this machine (Debian ships 24.11).

Covered from the published OpenAPI schema (SchedMD/slurm testsuite/python/data/openapi_specs/
openapi_spec_v43.json, src/plugins/data_parser/v0.0.43/parsers.c) and the OpenAPI release notes: the job
and node fields read here keep v0.0.42's shape, except output paths: `standard_output`/`standard_error`
are the raw patterns again and Slurm's expansion moved to `stdout_expanded`/`stderr_expanded`
(preferred; the raw pattern is expanded here like scontrol does when they are absent).
"""

from __future__ import annotations

from trainguard.slurm.formats.data_parser import DataParserFormat

FORMAT = "data_parser/v0.0.43"
ADAPTER = DataParserFormat(FORMAT, expanded_fields=True)
