"""Data sets: built-in CSVs, files, synthetic and grouped data."""
