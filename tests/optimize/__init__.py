"""Tests of the optimize stage (a package, so that test module names need not be unique)."""
