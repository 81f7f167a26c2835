"""Tests of the convert stage (a package, so that test module names need not be unique)."""
