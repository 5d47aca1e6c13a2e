"""The C ABI between abi.py and csrc/runtime/abi.h: a built module's reported layout matches the
Python mirror, and any drift is a BuildError naming the struct and field."""

from __future__ import annotations

import ctypes
import re

import pytest

from mpk_runtime import contract
from mpk_runtime.codegen import abi
from mpk_runtime.errors import BuildError
from mpk_runtime.run.launcher import Module
from mpk_runtime.tasks import registry


@pytest.fixture(scope="module")
def layout(noop_build) -> str:
    """The layout string the built module reports (mpk_abi_layout)."""
    lib = Module(noop_build.path).lib
    buf = ctypes.create_string_buffer(8192)
    lib.mpk_abi_layout(buf, len(buf))
    return buf.value.decode()


def test_task_descriptor_is_128_bytes():
    assert abi.TASK_DESC.size == 128
    offsets = abi.TASK_DESC_OFFSETS
    assert offsets["variant"] == 0 and offsets["wait_event"] == 8 and offsets["inputs"] == 128 - 10 * 8
    assert abi.expected_layout()["MpkTaskDesc"][0] == 128


def test_descriptor_packs_and_unpacks():
    values = tuple(range(1, len(abi.TASK_DESC.unpack(bytes(128))) + 1))  # small integers fit every field
    packed = abi.TASK_DESC.pack(*values)
    assert len(packed) == 128
    assert abi.TASK_DESC.unpack(packed) == values


def test_module_reports_the_abi_version_and_its_target(noop_build):
    m = Module(noop_build.path)
    assert m.lib.mpk_abi_version() == contract.ABI_VERSION
    assert (m.worker_threads, m.target_sm, m.dynamic_smem_bytes) == (128, 80, 0)
    noop = registry.get("noop").opcode
    assert m.task_type_name(noop) == "noop"
    assert all(m.task_type_name(s.opcode) is None for s in registry.all_specs() if s.name != "noop")  # not built in


def test_reported_layout_covers_every_struct(layout):
    parsed = abi.parse_layout(layout)
    assert set(parsed) == set(abi.expected_layout()) | {"Constants"}
    assert parsed["MpkTaskDesc"][0] == 128


def test_check_layout_accepts_the_modules_own_layout(layout):
    abi.check_layout(layout, "module.so")


def test_reported_offsets_equal_the_python_mirror(layout):
    want = abi.expected_layout()
    for name, (size, fields) in abi.parse_layout(layout).items():
        if name == "Constants":
            continue
        assert size == want[name][0], name
        for field, offset in fields.items():
            assert want[name][1][field] == offset, f"{name}.{field}"


def test_tampered_field_offset_names_the_field(layout):
    tampered = re.sub(r"(MpkTaskDesc=\d+.*?) wait_event:8\b", r"\1 wait_event:12", layout)
    assert tampered != layout
    with pytest.raises(
        BuildError,
        match=r"m\.so: MpkTaskDesc layout differs from mpk_runtime/codegen/abi\.py \(wait_event at 12 "
        r"!= 8\); csrc/runtime/abi\.h and mpk_runtime/codegen/abi\.py must change together",
    ):
        abi.check_layout(tampered, "m.so")


def test_every_shared_constant_is_reported_and_equal(layout):
    reported = abi.parse_layout(layout)["Constants"][1]
    assert reported == contract.CHECKED


def test_a_constant_that_drifted_is_a_build_error(layout):
    tampered = layout.replace(" MPK_MAX_INPUTS:7", " MPK_MAX_INPUTS:8")
    assert tampered != layout
    with pytest.raises(
        BuildError,
        match=r"m\.so: constants differ from mpk_runtime/contract\.py: MPK_MAX_INPUTS=8 "
        r"\(mpk_runtime/contract\.py: 7\); csrc/runtime/abi\.h and contract\.py must",
    ):
        abi.check_layout(tampered, "m.so")


def test_tampered_struct_size_is_reported(layout):
    size = abi.expected_layout()["MpkStatus"][0]
    tampered = layout.replace(f"MpkStatus={size} ", f"MpkStatus={size + 8} ")
    with pytest.raises(BuildError, match=rf"MpkStatus layout differs .*sizeof {size + 8} != {size}"):
        abi.check_layout(tampered, "m.so")


def test_unknown_struct_is_reported(layout):
    with pytest.raises(BuildError, match=r"reports an unknown struct MpkSurprise; rebuild it"):
        abi.check_layout(layout + ";MpkSurprise=8 a:0", "m.so")


def test_unknown_field_is_reported(layout):
    tampered = layout.replace("MpkWorkerStatus=16 ", "MpkWorkerStatus=16 ghost:4 ")
    assert tampered != layout
    with pytest.raises(BuildError, match=r"MpkWorkerStatus layout differs .*ghost at 4 != None"):
        abi.check_layout(tampered, "m.so")


def test_loading_a_non_module_is_a_build_error(tmp_path):
    bogus = tmp_path / "module.so"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(BuildError, match=rf"cannot load {bogus}"):
        Module(bogus)


def test_a_task_body_descriptor_has_no_wait_and_no_triggers():
    """pack_task without events (task bodies launched alone) keeps the slices and scalars of the
    runtime's descriptor and drops only the wait and the triggers."""
    from mpk_runtime.graph.compiled import EventInfo, LayerInfo, Scalar, SliceRef, TaskInfo

    task = TaskInfo(5, "t", 1, 2, (3, 0, 0), (SliceRef("a", (0,), (4,), 16),), (SliceRef("b", (0,), (4,), 0),), (), 0, 0, (1, 2))
    layer = LayerInfo(1, "l", "noop", 7, (8, 1, 1), {}, (), (Scalar(1e-6, False), Scalar(16, True)), 0, 8, ())
    pointers = {"a": 4096, "b": 8192}
    events = (EventInfo(0, 3, (), ()), EventInfo(1, 1, (), ()), EventInfo(2, 2, (), ()))
    extra: list[int] = []
    full = abi.TASK_DESC.unpack(abi.pack_task(task, layer, pointers, events, extra))
    alone = abi.TASK_DESC.unpack(abi.pack_task(task, layer, pointers))
    names = [n for n, f in abi.TASK_DESC_FIELDS for _ in range(int(f[:-1]) if f[:-1] else 1)]
    f, a = dict(zip(names, full)), dict(zip(names, alone))
    assert (f["num_triggers"], f["wait_event"], f["wait_count"], f["first_trigger"]) == (2, 0, 3, 1)
    assert f["flags"] == abi.FLAG_FIRST_TRIGGER_SINGLE and extra == [2]
    assert (a["num_triggers"], a["wait_event"], a["wait_count"], a["flags"]) == (0, contract.NO_EVENT, 0, 0)
    assert full[names.index("scalars") :] == alone[names.index("scalars") :]  # scalars and slice pointers
    assert a["task_id"] == 5 and a["variant"] == 2 and a["task_type"] == 7
