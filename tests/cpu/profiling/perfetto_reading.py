"""Reading a Perfetto trace back, with the perfetto package's own protos, as the profiling tests
check it: track names, their parents, the events, and slices paired the way a viewer pairs them."""

from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def read_trace(path):
    """(track names by uuid, parent uuid by uuid, events as dicts in packet order)."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    names, parents, events = {}, {}, []
    for p in trace.packet:
        assert p.trusted_packet_sequence_id == 1
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            names[d.uuid] = d.name
            parents[d.uuid] = d.parent_uuid if d.HasField("parent_uuid") else None
        else:
            e = p.track_event
            notes = {a.name: (a.string_value if a.HasField("string_value") else a.uint_value) for a in e.debug_annotations}
            events.append(
                {
                    "ts": p.timestamp,
                    "type": pb.TrackEvent.Type.Name(e.type),
                    "track": names[e.track_uuid],
                    "name": e.name,
                    "categories": list(e.categories),
                    "notes": notes,
                }
            )
    return names, parents, events


def slices(events):
    """Pair SLICE_BEGIN / SLICE_END per track the way a trace viewer does (a stack per track)."""
    open_, out = {}, []
    for e in events:
        if e["type"] == "TYPE_SLICE_BEGIN":
            open_.setdefault(e["track"], []).append(e)
        elif e["type"] == "TYPE_SLICE_END":
            b = open_[e["track"]].pop()
            out.append({**b, "dur": e["ts"] - b["ts"]})
    assert not any(open_.values()), "a slice was never closed"
    return out
