"""pytest nodes for scene tests: a collector per scene class, an item per case and arch, and a
Hypothesis item per arch for the class's SWEEP."""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import re
from pathlib import Path
from typing import Any

import pytest

from . import devices
from .scene import Case, Out, SceneTestCase, scene_info
from .session import BACKEND_PROPERTY


class SceneClass(pytest.Collector):
    """A ``@scene_test`` class: validated at collection, then one item per case and arch."""

    def __init__(self, *, scene_cls: type, **kwargs: Any):
        super().__init__(**kwargs)
        self.cls = scene_cls
        self.layer = scene_info(scene_cls).layer
        for klass in scene_cls.__mro__:  # pytestmark holds Mark objects; base classes' count too, as for pytest's classes
            marks = klass.__dict__.get("pytestmark", [])
            self.own_markers.extend(marks if isinstance(marks, list) else [marks])

    def collect(self) -> list[pytest.Item]:
        from .session import SESSION_KEY

        scene = self.cls()
        keys = self._validate(scene)
        mpk = self.config.stash[SESSION_KEY]
        items: list[pytest.Item] = []
        for arch in mpk.archs:
            for case in self.cls.CASES:
                items.append(CaseItem.from_parent(self, name=f"{case.name}[{arch}]", case=case, arch=arch))
            if self.cls.SWEEP:
                items.append(SweepItem.from_parent(self, name=f"sweep[{arch}]", arch=arch, keys=keys))
        return items

    def _validate(self, scene: SceneTestCase) -> tuple[str, ...]:
        cls, where = self.cls, self.cls.__qualname__
        for method, sig in (("generate_args", "generate_args(self, params)"), ("build", "build(self, pk, t, params)")):
            if getattr(cls, method) is getattr(SceneTestCase, method):
                raise self.CollectError(f"{where}: define {sig}")
        cases = cls.CASES
        if not isinstance(cases, (list, tuple)) or not all(isinstance(c, Case) for c in cases):
            raise self.CollectError(f"{where}: CASES must be a list of Case(...), got {cases!r}")
        if not cases and not cls.SWEEP:
            raise self.CollectError(f"{where}: no CASES and no SWEEP: nothing to test")
        names = [c.name for c in cases]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise self.CollectError(f"{where}: case names must be unique; repeated: {', '.join(dupes)}")
        if not isinstance(cls.SWEEP, dict):
            raise self.CollectError(f"{where}: SWEEP must be a dict of parameter name -> Hypothesis strategy")
        keys = tuple(cls.PARAMS or (cls.SWEEP.keys() if cls.SWEEP else (cases[0].params.keys() if cases else ())))
        unswept = [k for k in keys if cls.SWEEP and k not in cls.SWEEP]
        if unswept:
            raise self.CollectError(f"{where}: SWEEP lacks strategies for {unswept} (the scene's parameters are {list(keys)})")
        for c in cases:
            unknown = [k for k in c.params if k not in keys]
            for k in unknown:
                near = difflib.get_close_matches(k, keys, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; the parameters are {', '.join(keys)}"
                raise self.CollectError(f"{where}: Case {c.name!r} has an unknown key {k!r}{hint}")
            missing = [k for k in keys if k not in c.params]
            if missing:
                raise self.CollectError(f"{where}: Case {c.name!r} lacks {', '.join(map(repr, missing))}")
        sample = cases[0].params if cases else None
        if sample is not None:
            self._check_outputs_and_golden(scene, sample)
        return keys

    def _check_outputs_and_golden(self, scene: SceneTestCase, params: dict[str, Any]) -> None:
        """Run generate_args with placeholder tensors (no memory, no time) to catch a scene without
        outputs, and look the default golden up, at collection rather than at run time."""
        from mpk_runtime import GraphError, harness

        from .arg_names import generate_with_placeholders

        where = self.cls.__qualname__
        try:
            args = generate_with_placeholders(scene.generate_args, params)
        except KeyError as e:
            if isinstance(e.args[0], str) and e.args[0] not in params:
                near = difflib.get_close_matches(e.args[0], params, n=1)
                hint = f" (the case has {near[0]!r})" if near else ""
                raise self.CollectError(
                    f"{where}: generate_args reads params[{e.args[0]!r}], which the cases do not "
                    f"give{hint}; they give {', '.join(params)}"
                ) from None
            args = None
        except Exception:  # noqa: BLE001 - a scene that needs real shapes or values is checked when it runs
            args = None
        if isinstance(args, dict) and not any(isinstance(v, Out) for v in args.values()):
            raise self.CollectError(
                f"{where}: generate_args returns no Out or InOut tensor, so nothing would be compared; wrap each "
                f"output, e.g. 'output': Out(torch.empty(...))"
            )
        if getattr(scene, "compute_golden", None) is None:
            try:
                harness.find_reference(self.layer, search=[Path(self.path).parent], layer=self.layer)
            except GraphError as e:
                raise self.CollectError(f"{where}: no golden: {e}; or define compute_golden(self, args, params)") from None

    def reportinfo(self):
        return self.path, _line_of(self.cls), self.cls.__qualname__


class _SceneItem(pytest.Item):
    def __init__(self, *, arch: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.arch = arch
        self.scene_class: SceneClass = self.parent  # type: ignore[assignment]

    @property
    def selector(self) -> str:
        """``Class::name``, what --mpk-case takes (without the arch)."""
        return f"{self.scene_class.cls.__qualname__}::{self.name.split('[')[0]}"

    def _setup(self, mpk) -> Any:
        from .runner import Setup

        backend = devices.backend_for(self.arch, mpk.backend, mpk.local_arch(), mpk.emulate_check)
        return Setup(
            arch=self.arch,
            backend=backend,
            artifacts=mpk.artifacts_dir / _safe(self.nodeid),
            keep_artifacts=mpk.keep_artifacts or mpk.profile,
            hang_timeout=mpk.hang_timeout,
            repro=mpk.repro(self),
            replay=mpk.replay,
            profile=mpk.profile,
        )

    def _run(self, params: dict[str, Any], case: Case | None) -> None:
        from .runner import run_case, seed_of
        from .session import SESSION_KEY

        mpk = self.config.stash[SESSION_KEY]
        setup = self._setup(mpk)
        mpk.guard_gpu(self, setup.backend)
        if (BACKEND_PROPERTY, setup.backend) not in self.user_properties:  # it runs: the summary counts it
            self.user_properties.append((BACKEND_PROPERTY, setup.backend))
        try:
            run_case(
                self.scene_class.cls(),
                self.scene_class.layer,
                case,
                params,
                setup,
                seed_of(self.nodeid),
                [Path(self.path).parent],
            )
        finally:
            self._notes.update(dict.fromkeys(setup.notes))
            lost = mpk.after_gpu_case(self, setup.backend)
            if lost:
                self._notes[lost] = None

    def runtest(self) -> None:
        self._notes: dict[str, None] = {}  # what the runs say (builds, replays, profiles), once each
        try:
            self._runtest()
        finally:
            if self._notes:
                self.add_report_section("call", "mpk", "\n".join(self._notes))

    def _runtest(self) -> None:
        raise NotImplementedError

    def repr_failure(self, excinfo, style=None):
        from mpk_runtime import MpkError

        from .runner import SceneFailure

        notes = "".join(f"\n{n}" for n in getattr(excinfo.value, "__notes__", ()))  # e.g. Hypothesis' example
        if isinstance(excinfo.value, SceneFailure):
            return str(excinfo.value) + notes
        if isinstance(excinfo.value, MpkError):  # our errors say what is wrong and how to fix it
            return f"{type(excinfo.value).__name__}: {excinfo.value}{notes}"
        return super().repr_failure(excinfo, style)

    def _traceback_filter(self, excinfo):
        """A mistake in a scene shows the scene's frames, not pytest's, pluggy's or Hypothesis'."""
        internal = ("_pytest", "pluggy", "hypothesis", "pytest_mpk")
        tb = excinfo.traceback
        kept = tb.filter(lambda entry: not any(f"/{p}/" in str(entry.path) for p in internal))
        return kept or tb

    def reportinfo(self):
        # A line is needed: pytest reports skips (markers, the case skips below) at the item's location.
        return self.path, _line_of(self.scene_class.cls), self.nodeid.split("::", 1)[-1]


class CaseItem(_SceneItem):
    def __init__(self, *, case: Case, **kwargs: Any):
        super().__init__(**kwargs)
        from .session import SESSION_KEY

        self.case = case
        # Skip markers rather than pytest.skip() in runtest: reported at the scene, not in this file.
        if case.archs is not None and self.arch not in case.archs:
            self.add_marker(pytest.mark.skip(reason=f"case {case.name!r} runs on {', '.join(case.archs)}, not {self.arch}"))
        elif case.manual and self.selector not in self.config.stash[SESSION_KEY].selected_cases:
            self.add_marker(pytest.mark.skip(reason=f"manual case: run it with --mpk-case {self.selector}"))

    def _runtest(self) -> None:
        self._run(dict(self.case.params), self.case)


class SweepItem(_SceneItem):
    def __init__(self, *, keys: tuple[str, ...], **kwargs: Any):
        super().__init__(**kwargs)
        self.keys = keys

    def _runtest(self) -> None:
        from hypothesis import given, settings
        from hypothesis import strategies as st

        sweep = self.scene_class.cls.SWEEP  # with a strategy for each of self.keys: SceneClass checked

        @settings(deadline=None)  # every example compiles a kernel: seconds, not milliseconds
        @given(params=st.fixed_dictionaries(sweep))
        def sweep_case(params: dict[str, Any]) -> None:
            self._run(params, None)

        # Each sweep its own key in Hypothesis' example database (as its pytest plugin does for
        # parametrized tests), so saved failures replay in the sweep that found them.
        sweep_case.hypothesis.inner_test._hypothesis_internal_add_digest = self.nodeid.encode()
        sweep_case()


@functools.cache  # inspect parses the module: once per class, not once per item
def _line_of(cls: type) -> int:
    """The 0-based line where ``cls`` is defined (0 when its source cannot be found)."""
    try:
        return inspect.getsourcelines(cls)[1] - 1
    except (OSError, TypeError):
        return 0


def _safe(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.replace(os.sep, "/")).strip("_")[:150]
