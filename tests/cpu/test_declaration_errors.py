"""Declaring tensors and wiring layers: what the runtime refuses, and why. A layer may not read a
tensor it overwrites unless its task says it can run in place; a tensor the runtime cannot make or
keep is refused by the call that declares it, and leaves nothing behind."""

from __future__ import annotations

import os

import pytest
import torch
from cpu_helpers import graph_of, rmsnorm_tensors

from mpk_runtime import resources
from mpk_runtime.errors import ConfigError, DTypeError, GraphError, MemoryBudgetError, StateError
from mpk_runtime.tasks.partition import split
from mpk_runtime.tasks.registry import register_task
from mpk_runtime.tasks.spec import TaskSpec


def linear_tensors(pk, batch: int = 16, features: int = 64):
    x = pk.attach_input(torch.zeros(batch, features, dtype=torch.bfloat16), name="x")
    w = pk.attach_input(torch.zeros(features, features, dtype=torch.bfloat16), name="w")
    return x, w


def test_a_linear_cannot_overwrite_its_input(make_pk):
    pk = make_pk()
    x, w = linear_tensors(pk)
    with pytest.raises(
        GraphError,
        match=r"linear_0: linear writes DTensor\('x'.*\) as 'output' while its tasks read it as 'input', so they "
        r"would read values already overwritten; pass a new tensor as output \(pk\.new_tensor\(\.\.\.\)\)\. "
        r"linear cannot run in place",
    ):
        pk.linear_layer(input=x, weight=w, output=x, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    assert graph_of(pk).layers == []


def test_one_task_cannot_overwrite_its_input_either(make_pk):
    pk = make_pk()
    x, w = linear_tensors(pk)
    with pytest.raises(GraphError, match=r"linear cannot run in place"):
        pk.linear_layer(input=x, weight=w, output=x, grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def test_a_residual_added_in_place_is_allowed_and_other_pairs_named(make_pk):
    pk = make_pk()
    x, w = linear_tensors(pk)
    r = pk.attach_input(torch.zeros(16, 64, dtype=torch.bfloat16), name="r")
    pk.linear_with_residual_layer(input=x, weight=w, residual=r, output=r, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    with pytest.raises(
        GraphError,
        match=r"writes DTensor\('x'.*\) as 'output' while its tasks read it as 'input'.*"
        r"In place linear_with_residual allows only output = residual",
    ):
        pk.linear_with_residual_layer(input=x, weight=w, residual=r, output=x, grid_dim=(4, 1, 1), block_dim=pk.block_dim)


def test_rmsnorm_in_place_is_allowed(make_pk):
    pk = make_pk()
    x, w, _ = rmsnorm_tensors(pk, batch=16, hidden=64)
    pk.rmsnorm_layer(input=x, weight=w, output=x, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    assert len(graph_of(pk).tasks) == 4


def test_a_spec_whose_in_place_pairs_differ_in_partition_is_refused():
    class BadInPlace(TaskSpec):
        name = "bad_in_place_probe"
        inputs = {"input": split(x=0)}
        outputs = {"output": split(x=1)}
        in_place = {"output": "input"}
        headers = {"sm80": "common/noop.cuh"}
        function = "mpk::tasks::noop"

    with pytest.raises(GraphError, match=r"in_place 'output' -> 'input' must pair an output with an input of the same partition"):
        register_task(BadInPlace)


def test_a_tensor_without_elements(make_pk):
    with pytest.raises(GraphError, match=r"tensor 'x' has shape \(0, 256\), no elements.*give every dim a size of at least 1"):
        make_pk().attach_input(torch.zeros(0, 256), name="x")


def test_a_refused_attachment_leaves_no_trace(make_pk):
    pk = make_pk()
    data = torch.zeros(8, dtype=torch.float64)
    with pytest.raises(DTypeError, match=r"dtype torch\.float64 is not supported"):
        pk.attach_input(data, name="x")
    # neither its memory nor its name is taken
    pk.attach_input(data.view(torch.int64), name="x")
    assert list(graph_of(pk).tensors) == ["x"]


@pytest.mark.parametrize("method", ["new_tensor", "new_comm_tensor"])
def test_a_dtype_given_as_a_string(make_pk, method):
    with pytest.raises(DTypeError, match=r"dtype='bfloat16' is not a torch\.dtype; pass one such as torch\.bfloat16"):
        getattr(make_pk(), method)((4, 4), "bfloat16", "t")


def test_a_communication_tensor_over_the_memory_budget(make_pk, monkeypatch):
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "1M")
    pk = make_pk(90, compile_only=False, emulate=True)
    with pytest.raises(
        MemoryBudgetError,
        match=r"new_comm_tensor: new_comm_tensor 'c' \(bf16 \[1024, 1024\]\) needs 2 MiB of host memory, more than the "
        r"1 MiB set by MPK_MEMORY_LIMIT; use smaller dims",
    ):
        pk.new_comm_tensor((1024, 1024), torch.bfloat16, "c")


def test_shuffle_needs_a_list(make_pk):
    pk = make_pk()
    a = pk.attach_input(torch.zeros(16, 8), name="a")
    with pytest.raises(GraphError, match=r"shuffle_tensors\(\): inputs=DTensor\('a'.*\) must be a non-empty list of tensors"):
        pk.shuffle_tensors(a, 0, 2, "s")


@pytest.mark.parametrize(("declare", "kind"), [("new_tensor", "intermediate"), ("new_comm_tensor", "comm")])
def test_shuffle_of_a_tensor_a_layer_writes_at_run_time(make_pk, declare, kind):
    pk = make_pk()
    a = getattr(pk, declare)((16, 8), torch.float32, "a")
    b = pk.attach_input(torch.zeros(16, 8), name="b")
    with pytest.raises(
        GraphError,
        match=rf"shuffle_tensors\(\): inputs\[0\] DTensor\('a'.*\) is a runtime-owned {kind} tensor.*"
        r"Shuffle attached tensors \(pk\.attach_input\)",
    ):
        pk.shuffle_tensors([a, b], 0, 2, "s")


@pytest.mark.parametrize("key", ["inputs", "outputs"])
def test_noop_needs_lists(make_pk, key):
    pk = make_pk()
    a = pk.attach_input(torch.zeros(8, dtype=torch.int32), name="a")
    b = pk.attach_input(torch.zeros(8, dtype=torch.int32), name="b")
    args = {"inputs": [a], "outputs": [b], key: a if key == "inputs" else b}
    with pytest.raises(GraphError, match=rf"noop_layer\(\): {key}=DTensor\(.*\) must be a list of tensors"):
        pk.noop_layer(**args, grid_dim=(2, 1, 1), block_dim=pk.block_dim)


def test_a_misspelt_layer_argument_gets_the_nearest_name(make_pk):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    with pytest.raises(TypeError, match=r"rmsnorm_layer\(\): got an unexpected keyword argument 'epsilon'; did you mean 'eps'\?"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, epsilon=1e-5, grid_dim=(4, 1, 1), block_dim=pk.block_dim)


@pytest.fixture
def compiled(make_pk, noop_build):
    """A compile-only noop kernel for sm80 (its build is the session's noop_build, from the cache)."""
    pk = make_pk()
    a = pk.attach_input(torch.zeros(2, dtype=torch.int32), name="a")
    b = pk.attach_input(torch.zeros(2, dtype=torch.int32), name="b")
    pk.noop_layer([a], [b], grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    return pk


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("attach_input", (torch.zeros(4), "late")),
        ("new_tensor", ((4,), torch.float32, "late")),
        ("new_comm_tensor", ((4,), torch.float32, "late")),
        ("shuffle_tensors", ([], 0, 1, "late")),
    ],
)
def test_no_tensor_is_declared_after_compile(compiled, method, args):
    with pytest.raises(StateError, match=rf"{method}\(\): the kernel is already compiled, so no layer can use a new tensor"):
        getattr(compiled, method)(*args)
    assert "late" not in graph_of(compiled).tensors


def test_observe_iterations_before_compile(make_pk):
    with pytest.raises(StateError, match=r"observe_iterations\(\): call compile\(\) first"):
        make_pk(90, compile_only=False, emulate=True).observe_iterations(lambda i, r: None)


def test_observe_iterations_of_a_kernel_that_is_not_emulated(compiled):
    with pytest.raises(StateError, match=r"needs an emulated kernel \(emulate=True\); this one is compile-only"):
        compiled.observe_iterations(lambda i, r: None)


def test_observe_iterations_needs_a_callable(make_pk):
    """A string had been taken, and failed with a TypeError inside the emulator at the first iteration."""
    pk = make_pk(80, compile_only=False, emulate="reference")
    a = pk.attach_input(torch.zeros(2, dtype=torch.int32), name="a")
    b = pk.attach_input(torch.zeros(2, dtype=torch.int32), name="b")
    pk.noop_layer([a], [b], grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    with pytest.raises(ConfigError, match=r"observe_iterations\(\): callback='notcallable' must be callable as callback\("):
        pk.observe_iterations("notcallable")


@pytest.mark.parametrize("timeout", ["5", -1, True, float("inf"), float("nan")])
def test_synchronize_timeout_must_be_seconds(make_pk, timeout):
    with pytest.raises(ConfigError, match=r"synchronize\(\): timeout=.* must be a number of seconds >= 0, or None"):
        make_pk().synchronize(timeout=timeout)


def test_synchronize_with_nothing_running_returns(compiled):
    compiled.synchronize(timeout=0.5)
    compiled.finalize()
    compiled.synchronize()


class _Scalars(TaskSpec):  # not registered: its scalar_values alone
    name = "scalar_probe"
    scalars = {"k": 3, "f": 0.5}


def test_a_scalar_travels_as_its_defaults_type():
    """An int default makes an int32 scalar (TaskDesc::scalar_i), a float one a float32 (scalar_f).
    Every scalar had been sent as float bits, so a body reading k with scalar_i got 1077936128 for 3."""
    got = _Scalars().scalar_values({"k": 3, "f": 2}, {})
    assert got == [3, 2.0] and [type(v) for v in got] == [int, float]


@pytest.mark.parametrize(
    "values, message",
    [
        ({"k": 2.5, "f": 0.5}, r"scalar_probe: k=2.5 must be an integer in \[-2\*\*31, 2\*\*31\): .* as its default 3 says"),
        ({"k": True, "f": 0.5}, r"scalar_probe: k=True must be an integer"),
        ({"k": 2**31, "f": 0.5}, r"scalar_probe: k=2147483648 must be an integer"),
        ({"k": 3, "f": "two"}, r"scalar_probe: f='two' must be a finite number within float32 range: .*scalar_f"),
        ({"k": 3, "f": None}, r"scalar_probe: f=None must be a finite number"),
        ({"k": 3, "f": 1e300}, r"scalar_probe: f=1e\+300 must be a finite number within float32 range"),
        ({"k": 3, "f": float("nan")}, r"scalar_probe: f=nan must be a finite number"),
    ],
)
def test_a_scalar_that_its_type_cannot_carry_is_named(values, message):
    with pytest.raises(ConfigError, match=message):
        _Scalars().scalar_values(values, {})


def test_a_scalar_from_a_specs_own_scalar_values_is_checked(make_pk, monkeypatch):
    from mpk_runtime.tasks import registry

    spec = type(registry.get("rmsnorm"))
    monkeypatch.setattr(spec, "scalar_values", lambda self, values, s: ["fast"])
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(
        GraphError, match=r"rmsnorm_0: rmsnorm.scalar_values gave 'fast' \(str\) as scalar 0; a descriptor scalar is"
    ):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def _spec(**fields) -> type[TaskSpec]:
    """A declaration that register_task would accept, with ``fields`` changed (never registered by
    the tests below: each is refused)."""
    body = dict(
        name="probe_task",
        inputs={"input": split(x=0)},
        outputs={"output": split(x=0)},
        headers={arch: "common/noop.cuh" for arch in ("sm80", "sm90", "sm100")},
        function="mpk::tasks::probe_task",
    )
    body.update(fields)
    return type("ProbeTask", (TaskSpec,), {k: v for k, v in body.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(function=_DROP), r"function must name the C\+\+ template the dispatcher calls, .* got None"),
        (dict(function="my task"), r"function must name the C\+\+ template .*got 'my task'"),
        (dict(inputs={"input": 0}), r"inputs\['input'\] is 0, not a partition; use split\(x=0\), selected\(\.\.\.\) or whole"),
        (dict(outputs={"input": split(x=0)}), r"\['input'\] named twice among the inputs, outputs, scalars and options"),
        (dict(scalars={"grid_dim": 1.0}), r"\['grid_dim'\] named twice .*or as one of self, grid_dim, block_dim"),
        (dict(inputs={"class": split(x=0)}), r"\['class'\] cannot name a keyword argument of pk.probe_task_layer"),
        (dict(token_dims={"inp": 0}), r"token_dims names \['inp'\], which are not arguments \(input, output\)"),
        (dict(phases="load"), r"phases must be a tuple of names, one per Runtime::mark, got 'load'"),
        (dict(smem_function=64), r"smem_function must be None or the name of a constexpr C\+\+ function, got 64"),
        (dict(headers={"sm90": "/tmp/mine.cuh"}), r"header '/tmp/mine.cuh' for sm90 must be a path relative to .*relpath"),
        (dict(headers={"sm90": "mine.cuh"}), r"header 'mine.cuh' for sm90 not found under .* \(headers are paths relative"),
    ],
    ids=["no function", "function not a C++ name", "a partition that is not one", "an input and an output of one name",
         "a scalar named grid_dim", "a keyword", "token_dims of no argument", "phases as a string", "smem_function a number",
         "an absolute header", "a missing header"],
)  # fmt: skip
def test_a_declaration_the_runtime_could_not_use_is_refused_at_registration(fields, message):
    from mpk_runtime.tasks import registry

    with pytest.raises(GraphError, match=rf"^task spec ProbeTask: {message}"):
        register_task(_spec(**fields))
    assert "probe_task" not in registry.names()


@pytest.mark.parametrize(
    "targs, message",
    [
        (None, r"rmsnorm.template_args returned None; return a list of C\+\+ template arguments"),
        ("__nv_bfloat16, 2, 64", r"rmsnorm.template_args returned '__nv_bfloat16, 2, 64'; return a list"),
        (["__nv_bfloat16", True, 64], r"rmsnorm.template_args gave True \(bool\) as argument 1; write 'true'"),
        ([torch.bfloat16, 2, 64], r"rmsnorm.template_args gave torch.bfloat16 \(dtype\) as argument 0; give an int or the C\+\+"),
    ],
)  # fmt: skip
def test_template_arguments_the_source_cannot_spell_are_named(make_pk, monkeypatch, targs, message):
    from mpk_runtime.tasks import registry

    monkeypatch.setattr(type(registry.get("rmsnorm")), "template_args", lambda self, s, values: targs)
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(GraphError, match=rf"^rmsnorm_0: {message}"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(1, 1, 1), block_dim=pk.block_dim)


@pytest.mark.parametrize("cost", [float("nan"), -1.0, float("inf"), "300", None, True])
def test_a_cost_the_schedule_cannot_add_up_is_named(make_pk, monkeypatch, cost):
    """cost_ns balances the worker queues: a NaN or a negative had placed the tasks on no measure at
    all, a string failed inside the scheduler."""
    from mpk_runtime.tasks import registry

    monkeypatch.setattr(type(registry.get("rmsnorm")), "cost_ns", lambda self, s: cost)
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(GraphError, match=r"^rmsnorm_0: rmsnorm.cost_ns gave .*; return the estimated run time of one task in ns"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def test_a_spec_without_template_args_says_so(make_pk, monkeypatch):
    from mpk_runtime.tasks import registry

    monkeypatch.setattr(type(registry.get("rmsnorm")), "template_args", TaskSpec.template_args)
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(GraphError, match=r"^rmsnorm_0: rmsnorm does not define template_args\(self, slices, values\)"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def _spec_module(tmp_path, monkeypatch, cls: str, name: str, partition: str):
    """A module in ``tmp_path`` declaring spec ``cls`` (task ``name``: input to output, both cut by
    ``partition``), imported as any module is."""
    import importlib.util
    import sys

    function = partition.split("(")[0]
    (tmp_path / f"{name}_spec.py").write_text(
        f"from mpk_runtime.tasks.registry import TaskSpec, {function}\n\n"
        f"class {cls}(TaskSpec):\n    name = {name!r}\n    inputs = {{'input': {partition}}}\n"
        f"    outputs = {{'output': {partition}}}\n"
    )
    loader = importlib.util.spec_from_file_location(f"{name}_spec_for_this_test", tmp_path / f"{name}_spec.py")
    module = importlib.util.module_from_spec(loader)
    monkeypatch.setitem(sys.modules, f"{name}_spec_for_this_test", module)
    loader.loader.exec_module(module)
    return module


def test_a_spec_declared_outside_the_repository_finds_its_reference_beside_it(tmp_path, monkeypatch):
    """The slice reference (--mpk-backend emulate-ref) of a task declared in a kernel engineer's own
    directory: the pytorch_reference.py beside the declaring module, as the scene's golden finds it
    (only reference/<name>/ in the repository had been searched)."""
    (tmp_path / "pytorch_reference.py").write_text("def outside_probe(input):\n    return input * 3\n")
    module = _spec_module(tmp_path, monkeypatch, "OutsideProbe", "outside_probe", "split(x=0)")
    spec = module.OutsideProbe()
    assert spec.declared_in() == tmp_path
    out = torch.zeros(4)
    spec.emulate({"input": torch.arange(4.0)}, {"output": out}, {}, None)
    assert out.tolist() == [0.0, 3.0, 6.0, 9.0]


def test_a_reference_that_needs_the_meta_tensors_asks_for_an_emulate_override(tmp_path, monkeypatch):
    """A task that picks its rows at run time has a reference taking the batch (qo_indptr, ...), which
    the slices alone cannot give: the emulate-ref backend says to override emulate, not TypeError."""
    (tmp_path / "pytorch_reference.py").write_text("def ragged_probe(input, qo_indptr):\n    return input\n")
    module = _spec_module(tmp_path, monkeypatch, "RaggedProbe", "ragged_probe", "selected(x=0)")
    with pytest.raises(ConfigError) as e:
        module.RaggedProbe().emulate({"input": torch.zeros(4)}, {"output": torch.zeros(4)}, {}, None)
    assert str(e.value) == (
        "ragged_probe: the emulate-ref backend computes a task by calling ragged_probe() of its reference on the task's "
        "slices (input), which does not fit its signature: missing a required argument: 'qo_indptr'. input, output are "
        "chosen at run time (selected), so override TaskSpec.emulate(inputs, outputs, values, ctx) in the spec: ctx.meta "
        "holds the iteration's meta tensors and ctx.grid_idx the task (mpk_runtime/tasks/paged_attention.py does)"
    )


def test_a_registration_hook_that_fails_leaves_nothing_registered(monkeypatch):
    """What registering a task makes (the layer method, ...) failing: the spec is taken out again, so
    that once fixed it can be registered in the same session (it had stayed, "already registered")."""
    from mpk_runtime.tasks import registry

    def broken(spec):
        raise ValueError("no layer method for you")

    monkeypatch.setattr(registry, "_ON_REGISTER", [*registry._ON_REGISTER, broken])
    opcodes = {n: registry.get(n).opcode for n in registry.names()}
    with pytest.raises(GraphError, match=r"^task spec ProbeTask: ValueError: no layer method for you"):
        register_task(_spec())
    assert "probe_task" not in registry.names()
    assert {n: registry.get(n).opcode for n in registry.names()} == opcodes  # numbered as before


def test_one_file_imported_twice_registers_its_task_once(tmp_path, monkeypatch):
    """A scene file that declares its own task and is run as ``python test_x.py`` is imported twice
    (as __main__, and as the test module): the second registration of the same class from the same
    file replaces the first instead of failing as a name clash. Another class of that name still
    clashes."""
    import importlib.util
    import sys

    from mpk_runtime.tasks import registry

    header = os.path.relpath(resources.CSRC_TASKS / "common" / "noop.cuh", resources.CSRC_TASKS)
    (tmp_path / "twice.py").write_text(
        "from mpk_runtime.tasks.registry import TaskSpec, register_task, split\n\n"
        "@register_task\nclass TwiceProbe(TaskSpec):\n    name = 'twice_probe'\n    inputs = {'input': split(x=0)}\n"
        f"    outputs = {{'output': split(x=0)}}\n    headers = {{'sm90': {header!r}}}\n    function = 'probe::twice'\n"
    )
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the session's registry as it was, after
    for module in ("__main__twice", "twice_as_test"):
        loader = importlib.util.spec_from_file_location(module, tmp_path / "twice.py")
        m = importlib.util.module_from_spec(loader)
        monkeypatch.setitem(sys.modules, module, m)
        loader.loader.exec_module(m)
    assert type(registry.get("twice_probe")) is m.TwiceProbe
    with pytest.raises(GraphError, match=r"a task named 'twice_probe' is already registered"):
        register_task(type("TwiceProbe", (TaskSpec,), dict(vars(m.TwiceProbe), __qualname__="Other")))


def test_an_output_no_grid_axis_cuts_is_refused(make_pk, monkeypatch):
    """A spec whose output is whole() while its input is split by grid x: every task would write the
    same elements (the first slice's rows, the rest never), and nothing had said so, emulated with the
    check either."""
    from mpk_runtime.errors import GridError
    from mpk_runtime.tasks import registry
    from mpk_runtime.tasks.partition import whole

    monkeypatch.setattr(type(registry.get("rmsnorm")), "outputs", {"output": whole()})
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(
        GridError,
        match=r"^rmsnorm_0: grid_dim x=2, but rmsnorm writes all of \['output'\] in every task along x, so those tasks "
        r"would write the same elements; split the output along x in the spec, or use x=1",
    ):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
