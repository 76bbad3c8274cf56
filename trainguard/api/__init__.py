"""HTTP advisor API and operator console."""
