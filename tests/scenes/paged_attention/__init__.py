"""Scene tests of paged attention (a package, so that the scenes can share common.py)."""
