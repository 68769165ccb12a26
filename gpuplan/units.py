"""Unit constants for converting at the edges (datasheets, tables, user input). SI inside."""

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB, TiB = 2.0**10, 2.0**20, 2.0**30, 2.0**40
TFLOPS = 1e12  # FLOP/s
GHZ = 1e9
US, MS = 1e-6, 1e-3
HOUR = 3600.0
