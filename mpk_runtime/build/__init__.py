"""Build: generated source in, a loadable module out, and compile output directories.

Enters: the source text of a translation unit (codegen) and an arch. Leaves: a built module in the
content-addressed cache (cache.py; its files and their faults in cache_fs.py, the per-key lock in
lock.py; nvcc.py), and, for ``compile(output_dir=...)``, a directory with the source, the compiled
graph and the signature that a later replay reads back and checks (artifacts.py,
signature_reader.py, replay.py).
"""
