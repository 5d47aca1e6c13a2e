"""What a scene test declares: ``@scene_test``, ``SceneTestCase``, ``Case``, ``Out`` and ``InOut``.

    @scene_test(layer="rmsnorm")
    class TestRMSNorm(SceneTestCase):
        CASES = [Case("b1", batch=1, hidden=4096)]
        SWEEP = {"batch": st.integers(1, 64), "hidden": st.sampled_from([1024, 4096])}

        def generate_args(self, params):        # CPU tensors; outputs wrapped in Out / InOut
            ...
        def build(self, pk, t, params):         # t.<name>: the attached tensor of each argument
            pk.rmsnorm_layer(input=t.input, ..., block_dim=pk.block_dim)

The plugin makes one pytest item per case and arch (``TestRMSNorm::b1[sm90]``) and one Hypothesis
item per arch for SWEEP (``TestRMSNorm::sweep[sm90]``). This module imports no torch (only the
torch-free arch table of mpk_runtime, when a Case names archs), so loading the plugin stays cheap.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

_SCENE_ATTR = "__mpk_scene__"


class SceneError(TypeError):
    """The scene itself is wrong (what generate_args returns, ...); the message says what and where."""


class Out:
    """An output argument: poisoned before the run (NaN, or the integer furthest from 0), so elements the
    kernel never writes fail the comparison; compared with the golden afterwards.

    ``meta=True``: the argument is the kernel's meta tensor of the same name (``output_tokens``, which
    sampling writes, say): it is passed as that meta tensor's override, so prepare_next_batch sees
    what the layer wrote, and it is compared like any output."""

    def __init__(self, tensor: Any, *, meta: bool = False):
        check_bool(f"{type(self).__name__}(...)", "meta", meta)
        self.tensor = tensor
        self.meta = meta

    def __repr__(self) -> str:
        return f"Out({getattr(self.tensor, 'shape', '?')})"


class InOut(Out):
    """An argument the kernel reads and overwrites: keeps its generated value for the run and is
    passed to the reference as an input; compared with the golden afterwards."""

    def __repr__(self) -> str:
        return f"InOut({getattr(self.tensor, 'shape', '?')})"


class Expected:
    """What ``compute_golden`` may return for an output instead of a plain tensor: ``value`` where
    ``written`` is True, and, where it is False, nothing written at all (the element must still hold
    what it held before the run: the poison of an Out, the generated value of an InOut). E.g. rows of
    inactive tokens, or the slots of a KV cache no task should touch. ``written`` is a bool tensor of
    the output's shape, or of a prefix of it (broadcast over the remaining dims: one flag per row)."""

    def __init__(self, value: Any, written: Any):
        self.value, self.written = value, written

    def __repr__(self) -> str:
        return f"Expected({getattr(self.value, 'shape', '?')}, written={getattr(self.written, 'shape', '?')})"


@dataclass
class Case:
    """One named point of a scene's parameter space.

    ``archs`` limits the archs it runs on: a tuple or list of arch names, ``archs=("sm90",)`` for one (a
    bare string is refused, not split or taken as one arch); ``rtol`` / ``atol`` override the dtype
    defaults for every floating-point output (integer and bool outputs stay exact) and
    ``tolerances={"output": (rtol, atol)}`` for one output of any dtype (each key an output of the
    scene); ``manual=True`` cases run only when picked with ``--mpk-case Class::name``;
    ``raises="regex"``: the kernel must fail with a KernelError whose message matches (a task's error
    on invalid meta data, say)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    archs: tuple[str, ...] | None = None
    rtol: float | None = None
    atol: float | None = None
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    manual: bool = False
    raises: str | None = None

    def __init__(
        self,
        name: str,
        *,
        archs: tuple[str, ...] | list[str] | None = None,
        rtol: float | None = None,
        atol: float | None = None,
        tolerances: dict[str, tuple[float, float]] | None = None,
        manual: bool = False,
        raises: str | None = None,
        **params: Any,
    ):
        if not isinstance(name, str) or not name or any(c in name for c in "[]:/ "):
            raise ValueError(f"Case name {name!r} must be a non-empty string without spaces, '[', ']', ':' or '/'")
        from mpk_runtime.harness import ARCH_NAMES  # the one arch table (torch-free)

        if archs is not None and not isinstance(archs, (tuple, list)):
            example = f"({archs!r},)" if isinstance(archs, str) else "('sm90', 'sm100')"
            raise TypeError(f"Case {name!r}: archs={archs!r} must be a tuple of arch names, e.g. archs={example}")
        if archs is not None and not archs:
            raise ValueError(
                f"Case {name!r}: archs={archs!r} names no arch, so the case would never run; leave archs out to run on every arch"
            )
        bad = [a for a in (archs or ()) if a not in ARCH_NAMES]
        if bad:
            raise ValueError(f"Case {name!r}: archs {bad} are not targets; use some of {', '.join(ARCH_NAMES)}")
        check_bool(f"Case {name!r}", "manual", manual)
        if isinstance(params.get("params"), dict):
            given = ", ".join(f"{k}={v!r}" for k, v in params["params"].items())
            raise TypeError(
                f"Case {name!r}: params={params['params']!r} would be one parameter named 'params'; give the "
                f"parameters as keywords: Case({name!r}, {given})"
            )
        self.name, self.params, self.manual = name, params, manual
        if raises is not None:
            try:
                re.compile(raises)
            except (re.error, TypeError) as e:
                raise ValueError(f"Case {name!r}: raises={raises!r} must be a regular expression ({e})") from None
        self.raises = raises
        self.archs = tuple(archs) if archs is not None else None
        check_tolerance(f"Case {name!r}", rtol, atol)
        if not isinstance(tolerances or {}, dict):
            raise ValueError(f"Case {name!r}: tolerances must be a dict of output name -> (rtol, atol), got {tolerances!r}")
        for output, pair in (tolerances or {}).items():
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise ValueError(f"Case {name!r}: tolerances[{output!r}]={pair!r} must be a pair (rtol, atol)")
            check_tolerance(f"Case {name!r}, output {output!r}", *pair)
        self.rtol, self.atol, self.tolerances = rtol, atol, dict(tolerances or {})

    def tolerance_for(self, output: str, floating: bool = True) -> tuple[float | None, float | None]:
        """The output's own tolerances, else the case's for a floating-point output: a case-wide rtol
        meant for the float outputs would let an integer output (routing counts, token ids) be off."""
        if output in self.tolerances:
            return self.tolerances[output]
        return (self.rtol, self.atol) if floating else (None, None)

    def check_outputs(self, scene: str, outputs: list[str]) -> None:
        """SceneError unless every key of ``tolerances`` is one of the ``outputs`` of ``scene``: a
        misspelt name would otherwise leave its output at the defaults, unnoticed."""
        unknown = [o for o in self.tolerances if o not in outputs]
        if unknown:
            raise SceneError(
                f"{scene}: Case {self.name!r} has tolerances for {', '.join(map(repr, unknown))}, which "
                f"{'is not an output' if len(unknown) == 1 else 'are not outputs'}; the outputs are {', '.join(outputs)}"
            )


class PerRank:
    """What a multi-rank scene's ``compute_golden`` returns when the ranks' outputs differ: one golden
    per rank (``values[r]`` for rank r), each in any form a one-rank golden may take."""

    def __init__(self, values: Any):
        self.values = list(values)

    def __repr__(self) -> str:
        return f"PerRank({len(self.values)} ranks)"


def first_batch_meta(kernel_params: dict[str, Any]) -> Any:
    """The meta tensors of the first iteration (CPU tensors, by attribute: ``m.qo_indptr_buffer``) for
    the init parameters a scene's ``kernel_params`` returns: computed before the run by the model of
    prepare_next_batch, which the device follows. (``args.meta`` in ``compute_golden`` holds them after
    the run: the same batch, with ``step`` advanced and the sampled token appended to ``tokens``.) With them
    ``generate_args`` can fill the KV cache pages of requests whose history already exists
    (``meta_tensors={"step": ...}``) at the slots the runtime will assign."""
    import types

    from mpk_runtime.harness import first_batch_meta as model

    return types.SimpleNamespace(**model(_in_test_mode(kernel_params)))


def model_batches(kernel_params: dict[str, Any]) -> Any:
    """Like ``first_batch_meta``, for every iteration of the launch (offline mode: many): an
    iterator of the meta tensors as each iteration sees them, for goldens that replay the batches."""
    import types

    from mpk_runtime.harness import model_batches as model

    return (types.SimpleNamespace(**m) for m in model(_in_test_mode(kernel_params)))


def _in_test_mode(kernel_params: Any) -> Any:
    """Scenes run in test mode; what is no dict the runtime refuses with its own message."""
    return {"test_mode": True, **kernel_params} if isinstance(kernel_params, dict) else kernel_params


def check_bool(where: str, label: str, value: Any) -> None:
    """TypeError unless ``value`` is True or False: a truthy string ("no") or number would pass."""
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {label}={value!r} must be True or False")


def check_tolerance(where: str, rtol: Any, atol: Any) -> None:
    """ValueError unless rtol and atol are each None (the dtype's default) or a finite number >= 0:
    an infinite or negative tolerance would pass any output, or none."""
    for label, value in (("rtol", rtol), ("atol", atol)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is not None and not (number and math.isfinite(value) and value >= 0):
            raise ValueError(f"{where}: {label}={value!r} must be a finite number >= 0 (or None for the dtype's default)")


@dataclass(frozen=True)
class SceneInfo:
    layer: str
    world_size: int = 1


def scene_test(layer: str, world_size: int = 1):
    """Class decorator: a SceneTestCase subclass whose cases the plugin turns into pytest items.
    ``layer`` names the layer, which is where the default golden comes from. ``world_size`` > 1: the
    scene runs on that many ranks (one GPU each), see SceneTestCase."""
    if not isinstance(layer, str) or not layer.isidentifier():
        raise ValueError(f"scene_test(layer={layer!r}): layer must name a layer, e.g. 'rmsnorm'")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or not 1 <= world_size <= 32:
        raise ValueError(f"scene_test(world_size={world_size!r}): the number of ranks, an integer in [1, 32]")

    def mark(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, SceneTestCase)):
            raise TypeError(f"@scene_test decorates SceneTestCase subclasses, not {cls!r}")
        setattr(cls, _SCENE_ATTR, SceneInfo(layer, world_size))
        return cls

    return mark


def scene_info(obj: Any) -> SceneInfo | None:
    return obj.__dict__.get(_SCENE_ATTR) if isinstance(obj, type) else None


class SceneTestCase:
    """Base class of scene tests. Override ``generate_args`` and ``build``; optionally
    ``kernel_params``, ``compute_golden`` and ``compare``.

    A multi-rank scene (``@scene_test(..., world_size=N)`` or the marker ``mpk_world_size(N)``) runs
    on N ranks: ``generate_args`` and ``build`` run once per rank with ``params["rank"]`` and
    ``params["world_size"]``, with the same seed on every rank (so generate full tensors and take
    the rank's part: replicated inputs then agree). It must define ``compute_golden(args, params)``:
    ``args.ranks[r].<name>`` holds rank r's arguments (``args.ranks[r].meta`` its meta tensors),
    ``args.world_size`` the rank count; it returns one golden for every rank, or ``PerRank([...])``.
    Every rank's outputs are compared, and a failure says which rank differed."""

    CASES: list[Case] = []
    SWEEP: dict[str, Any] = {}
    PARAMS: tuple[str, ...] | None = None  # the parameter names every case gives; default: SWEEP's keys
    DEFAULTS: dict[str, Any] = {}  # parameters a case (or SWEEP) may leave out: filled in before generate_args

    def generate_args(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every argument by name: CPU tensors (inputs) and Out / InOut wrapped tensors."""
        raise NotImplementedError

    def build(self, pk: Any, t: Any, params: dict[str, Any]) -> None:
        """Add the layer(s) under test to ``pk``; ``t.<name>`` is the attached tensor of each argument."""
        raise NotImplementedError

    def kernel_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Extra PersistentKernel init parameters for these params (e.g. max_num_batched_tokens); its
        ``meta_tensors`` are torch tensors (a list is refused, as everywhere a tensor is expected)."""
        return {}

    @classmethod
    def run_module(cls, module_name: str) -> None:
        """``if __name__ == "__main__": SceneTestCase.run_module(__name__)`` makes
        ``python test_x.py --arch sm90 --mpk-case TestX::b1`` run the file's scenes with pytest's flags."""
        import pytest

        module = sys.modules[module_name]
        sys.exit(pytest.main([module.__file__, "-p", "mpk", *_imported_before_pytest(), *sys.argv[1:]]))


# pytest rewrites the asserts of every module of a plugin's distribution, and warns for those imported
# before it started. A scene file run as a script has imported Hypothesis (its SWEEP's strategies) and
# this package by then; no test reads their asserts, so those warnings alone are left out.
_PLUGINS_IMPORTED_BY_SCENES = {"hypothesis", "pytest-mpk"}


def _imported_before_pytest() -> list[str]:
    """``-W`` options that ignore pytest's "already imported" warning for the modules of those
    distributions that are imported; other modules imported early are still warned about."""
    import importlib.metadata

    names = [
        name
        for name, dists in importlib.metadata.packages_distributions().items()
        if name in sys.modules and _PLUGINS_IMPORTED_BY_SCENES.intersection(dists)
    ]
    return [
        f"-Wignore:Module already imported so cannot be rewritten; {n}:pytest.PytestAssertRewriteWarning" for n in sorted(names)
    ]


def kernel_params_of(scene: SceneTestCase, params: dict[str, Any]) -> dict[str, Any]:
    """``scene.kernel_params(params)``; SceneError unless it is a dict."""
    from .param_reads import copy_of

    extra = scene.kernel_params(copy_of(params))
    if not isinstance(extra, dict):
        from mpk_runtime.harness import shown

        what = "None (is its return statement missing?)" if extra is None else shown(extra)
        raise SceneError(
            f"{type(scene).__name__}.kernel_params returned {what}; return a dict of PersistentKernel init "
            f"parameters, {{}} for none"
        )
    return extra
