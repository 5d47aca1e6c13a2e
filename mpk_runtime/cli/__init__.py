"""Command-line tools: ``mpk-profile`` (query a profile CSV) and ``mpk-graph`` (inspect a task graph).

Both print JSON on stdout, errors included (``{"error": ...}``, exit status 2), so scripts and
agents can parse every outcome the same way.
"""
