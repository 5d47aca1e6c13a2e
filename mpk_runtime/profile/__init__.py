"""Profile: what a profiled launch recorded, turned into something to look at.

Enters: the profiler buffer a launch filled (csrc/runtime/profiler.cuh's layout) and the compiled
graph. Leaves: task spans (decode.py), a Perfetto trace and a CSV (trace.py), statistics over the
CSV (stats.py, what ``mpk-profile`` answers) and a swimlane picture (swimlane.py).
"""
