"""pytest nodes for scene tests: a collector per scene class, an item per case and arch, and a
Hypothesis item per arch for the class's SWEEP."""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import os
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from . import devices
from .frames import is_scene_code
from .scene import Case, Out, SceneError, SceneTestCase, kernel_params_of, scene_info
from .session import BACKEND_PROPERTY


class SceneClass(pytest.Collector):
    """A ``@scene_test`` class: validated at collection, then one item per case and arch."""

    def __init__(self, *, scene_cls: type[SceneTestCase], **kwargs: Any):
        super().__init__(**kwargs)
        self.cls = scene_cls
        self.layer = scene_info(scene_cls).layer
        for klass in scene_cls.__mro__:  # pytestmark holds Mark objects; base classes' count too, as for pytest's classes
            marks = klass.__dict__.get("pytestmark", [])
            self.own_markers.extend(marks if isinstance(marks, list) else [marks])

    @property
    def world_size(self) -> int:
        """Ranks of the scene: ``@scene_test(world_size=...)``, else the marker ``mpk_world_size(n)``, else 1."""
        marker = self.get_closest_marker("mpk_world_size")
        n = scene_info(self.cls).world_size
        if marker is None:
            return n
        where = f"{self.cls.__qualname__}: mpk_world_size"
        if len(marker.args) + len(marker.kwargs) != 1 or set(marker.kwargs) - {"n"}:
            given = ", ".join([*map(repr, marker.args), *(f"{k}={v!r}" for k, v in marker.kwargs.items())])
            raise self.CollectError(f"{where}({given}): give the number of ranks alone, e.g. mpk_world_size(4)")
        m = marker.args[0] if marker.args else marker.kwargs["n"]
        if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= 32:
            raise self.CollectError(f"{where}({m!r}) needs a number of ranks in [1, 32]")
        if n > 1 and m != n:
            raise self.CollectError(f"{where}({m}) and @scene_test(world_size={n}) disagree; say the number of ranks once")
        return m

    def collect(self) -> list[pytest.Item]:
        from .session import SESSION_KEY

        scene = self.cls()
        keys = self._validate(scene)
        mpk = self.config.stash[SESSION_KEY]
        items: list[pytest.Item] = []
        for arch in mpk.archs:
            for case in self.cls.CASES:
                items.append(
                    CaseItem.from_parent(
                        self, name=f"{case.name}[{arch}]", nodeid=_item_id(self, case.name, arch), case=case, arch=arch
                    )
                )
            if self.cls.SWEEP:
                items.append(
                    SweepItem.from_parent(self, name=f"sweep[{arch}]", nodeid=_item_id(self, "sweep", arch), arch=arch, keys=keys)
                )
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
        self._check_sweep()
        defaults = cls.DEFAULTS
        if not isinstance(defaults, dict):
            raise self.CollectError(f"{where}: DEFAULTS must be a dict of parameter name -> value, got {defaults!r}")
        declared = tuple(cls.PARAMS or cls.SWEEP.keys())
        unswept = [k for k in declared if cls.SWEEP and k not in cls.SWEEP and k not in defaults]
        if unswept:
            raise self.CollectError(
                f"{where}: SWEEP lacks strategies for {unswept} (the scene's parameters are {list(declared)})"
            )
        given = [k for c in cases for k in c.params]
        keys = tuple(dict.fromkeys([*declared, *defaults, *sorted(dict.fromkeys(given), key=lambda k: -given.count(k))]))
        if self.world_size > 1:  # the harness gives each rank these two: a case's own would be overwritten
            named = {k for c in cases for k in c.params} | set(defaults) | set(declared)
            reserved = sorted(named & {"rank", "world_size"})
            if reserved:
                raise self.CollectError(
                    f"{where}: {reserved} are set by the harness on a scene of {self.world_size} ranks (each rank gets "
                    f"its own rank, and world_size {self.world_size}); name the case parameter otherwise"
                )
        for c in cases:
            self._check_case_keys(c, keys, declared, defaults)
            if c.raises is not None and self.world_size > 1:
                raise self.CollectError(
                    f"{where}: Case {c.name!r} expects the kernel to fail (raises={c.raises!r}), which a scene on "
                    f"{self.world_size} ranks does not check: the case would pass whatever ran. Test that failure in a "
                    f"one-rank scene, or leave raises out"
                )
        if cases:
            self._check_outputs_and_golden(scene, self._sample(cases[0]))
            self._check_params_read(scene, cases, defaults)
            self._check_tolerances(scene, cases)
        return tuple(dict.fromkeys([*declared, *defaults])) or keys

    def _sample(self, case: Case) -> dict[str, Any]:
        """The params ``generate_args`` gets for ``case`` (on rank 0 of a multi-rank scene)."""
        params = {**self.cls.DEFAULTS, **case.params}
        return {**params, "rank": 0, "world_size": self.world_size} if self.world_size > 1 else params

    def _check_sweep(self) -> None:
        """Every value of SWEEP is a Hypothesis strategy: a list of values, say, is refused here, with
        the strategy to write, rather than by Hypothesis when the sweep runs."""
        if not self.cls.SWEEP:
            return
        from hypothesis.strategies import SearchStrategy

        for k, v in self.cls.SWEEP.items():
            if isinstance(v, SearchStrategy):
                continue
            if isinstance(v, (list, tuple, range)):
                fix = f"use st.sampled_from({list(v)!r})"
            elif callable(v):  # st.integers for st.integers(1, 64)
                fix = f"call it: st.{getattr(v, '__name__', 'integers')}(...)"
            else:
                fix = f"use st.just({v!r}) for one value"
            raise self.CollectError(f"{self.cls.__qualname__}: SWEEP[{k!r}] is {v!r}, not a Hypothesis strategy; {fix}")

    def _check_case_keys(self, case: Case, keys: tuple[str, ...], declared: tuple[str, ...], defaults: dict[str, Any]) -> None:
        """With PARAMS, a case gives exactly those (less the DEFAULTS). Without, a key that other cases
        leave out is optional, unless it looks like a misspelling of another key."""
        where = self.cls.__qualname__
        for k in case.params:
            if self.cls.PARAMS and k not in declared and k not in defaults:
                from mpk_runtime.harness import near_hint

                hint = near_hint(k, [*declared, *defaults], "the parameters are")
                raise self.CollectError(f"{where}: Case {case.name!r} has an unknown key {k!r}; {hint}")
            # A key that only some cases give must not look like another key; of two look-alikes, the
            # misspelling is the one fewer cases give (else the later one).
            near = difflib.get_close_matches(k, keys[: keys.index(k)], n=1, cutoff=0.8)
            optional = k not in declared and k not in defaults and not all(k in c.params for c in self.cls.CASES)
            if optional and near:
                raise self.CollectError(f"{where}: Case {case.name!r} has an unknown key {k!r}; did you mean {near[0]!r}?")
        missing = [k for k in declared if k not in case.params and k not in defaults]
        if missing:
            source = "PARAMS" if self.cls.PARAMS else "SWEEP"
            raise self.CollectError(
                f"{where}: Case {case.name!r} lacks {', '.join(map(repr, missing))}, which {source} names: every case "
                f"gives its keys, less those of DEFAULTS; give it, or a default (DEFAULTS = {{{missing[0]!r}: ...}})"
            )

    def _check_params_read(self, scene: SceneTestCase, cases: list[Case], defaults: dict[str, Any]) -> None:
        """A case that leaves a parameter out is refused if generate_args reads it as params[...]
        (params.get(...) is how a scene reads an optional one), once per distinct set of keys."""
        from .arg_names import generate_with_placeholders

        seen: set[frozenset[str]] = set()
        for case in cases:
            params = {**defaults, **case.params}
            if frozenset(params) in seen:
                continue
            seen.add(frozenset(params))
            try:
                generate_with_placeholders(scene.generate_args, params)
            except KeyError as e:
                name = e.args[0] if e.args else None
                others = {k for c in cases for k in c.params}
                if isinstance(name, str) and name not in params and name in others:
                    raise self.CollectError(
                        f"{self.cls.__qualname__}: Case {case.name!r} lacks {name!r}, which generate_args reads as "
                        f"params[{name!r}]; give it, read it with params.get({name!r}, default), or declare "
                        f"DEFAULTS = {{{name!r}: ...}}"
                    ) from None
            except Exception:  # noqa: BLE001 - checked when the case runs (see _check_outputs_and_golden)
                pass

    def _check_tolerances(self, scene: SceneTestCase, cases: Sequence[Case]) -> None:
        """The outputs that a case's ``tolerances`` name are outputs of the scene, for each case that
        gives tolerances and whose generate_args runs on placeholders (else when it runs)."""
        from .arg_names import generate_with_placeholders

        for case in cases:
            if not case.tolerances:
                continue
            try:
                args = generate_with_placeholders(scene.generate_args, self._sample(case))
            except Exception:  # noqa: BLE001 - checked when the case runs (goldens.compare_outputs)
                continue
            if isinstance(args, dict):
                try:
                    case.check_outputs(self.cls.__qualname__, [n for n, v in args.items() if isinstance(v, Out)])
                except SceneError as e:
                    raise self.CollectError(str(e)) from None

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
        try:
            generate_with_placeholders(functools.partial(kernel_params_of, scene), params)
        except SceneError as e:
            raise self.CollectError(str(e)) from None
        except Exception:  # noqa: BLE001 - as generate_args: checked when the case runs
            pass
        if getattr(scene, "compute_golden", None) is None and self.world_size > 1:
            raise self.CollectError(
                f"{where}: runs on {self.world_size} ranks, so it needs compute_golden(self, args, params), where "
                f"args.ranks[r] holds rank r's arguments"
            )
        if getattr(scene, "compute_golden", None) is None:
            try:
                harness.find_reference(self.layer, search=[Path(self.path).parent], layer=self.layer)
            except GraphError as e:
                raise self.CollectError(f"{where}: no golden: {e}; or define compute_golden(self, args, params)") from None

    @functools.cached_property  # inspect parses the module: once per class, not once per item
    def line(self) -> int:
        """The 0-based line where the scene class is defined (0 when its source cannot be found). Kept
        here, not in a cache of the module's: that held every class it saw, so a pytester run inside a
        session kept its whole session (the class's module holds its loader, which holds the config)."""
        try:
            return inspect.getsourcelines(self.cls)[1] - 1
        except (OSError, TypeError):
            return 0

    def reportinfo(self):
        return self.path, self.line, self.cls.__qualname__


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
            keep_artifacts=mpk.keep_artifacts or (mpk.profile and backend == devices.GPU),  # a profile is kept
            hang_timeout=mpk.hang_timeout,
            repro=mpk.repro(self),
            replay=mpk.replay,
            profile=mpk.profile,
            rank_timeout=mpk.rank_timeout,
            warp_jitter=mpk.warp_jitter,
            relaunch=mpk.relaunch,
        )

    def _run(self, params: dict[str, Any], case: Case | None) -> None:
        from mpk_runtime import EmulationError

        from .param_reads import ReadParams
        from .replay import refuse_emulation
        from .runner import run_case, seed_of
        from .session import SESSION_KEY

        mpk = self.config.stash[SESSION_KEY]
        _prebuild_cases(self, mpk)
        setup = self._setup(mpk)
        mpk.guard_gpu(self, setup.backend)
        world_size = self.scene_class.world_size
        if world_size == 1 and (BACKEND_PROPERTY, setup.backend) not in self.user_properties:  # it runs: counted
            self.user_properties.append((BACKEND_PROPERTY, setup.backend))
        try:
            if world_size > 1:
                from .rank_items import run_ranks

                run_ranks(self, params, case, setup, world_size)
                return
            if mpk.sanitizer is not None and setup.backend == devices.GPU:
                from . import sanitize

                sanitize.run(
                    mpk.sanitizer, mpk.sanitize, setup.repro, mpk.hang_timeout, setup.artifacts, self.config.invocation_params.dir
                )
                return
            run_case(
                self.scene_class.cls(),
                self.scene_class.layer,
                case,
                ReadParams(params),
                setup,
                seed_of(self.nodeid),
                [Path(self.path).parent],
            )
        except EmulationError as e:  # an edited --mpk-replay source: skipped where the plugin chose the emulator
            refuse_emulation(e, mpk.backend)
            raise
        finally:
            self._notes.update(dict.fromkeys(setup.notes))
            if setup.built_module:
                _prebuild_when_cold(self, mpk)
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
        if isinstance(excinfo.value, SceneError):  # what is wrong with the scene, said by the harness
            return f"SceneError: {excinfo.value}{notes}"
        if isinstance(excinfo.value, MpkError):  # our errors say what is wrong and how to fix it, and where
            return f"{type(excinfo.value).__name__}: {excinfo.value}{self._user_frame(excinfo)}{notes}"
        return super().repr_failure(excinfo, style)

    def _user_frame(self, excinfo) -> str:
        """The innermost frame of the scene's own code (its build(), say): a line ``at file:line, in
        name`` and its source, or nothing when the error was raised outside it."""
        for entry in reversed(excinfo.traceback):
            path = str(entry.path)
            if is_scene_code(path):
                try:
                    shown = os.path.relpath(path, self.config.invocation_params.dir)
                except ValueError:
                    shown = path
                source = textwrap.indent(textwrap.dedent(str(entry.statement)).strip(), "    ")
                return f"\n  at {shown}:{entry.lineno + 1}, in {entry.name}:\n{source}"
        return ""

    def _traceback_filter(self, excinfo):
        """A mistake in a scene shows the scene's frames, not pytest's, pluggy's or Hypothesis'."""
        internal = ("_pytest", "pluggy", "hypothesis", "pytest_mpk")
        tb = excinfo.traceback
        kept = tb.filter(lambda entry: not any(f"/{p}/" in str(entry.path) for p in internal))
        return kept or tb

    def reportinfo(self):
        # A line is needed: pytest reports skips (markers, the case skips below) at the item's location.
        return self.path, self.scene_class.line, self.nodeid.split("::", 1)[-1]


def _prebuild_cases(item: _SceneItem, mpk) -> None:
    """Once a session, before its first scene item runs: the module of every selected case, several
    nvcc processes at a time. Under pytest-xdist _prebuild_when_cold does it, once a worker finds the
    cache cold."""
    from .prebuild import prebuild

    if mpk.cases_prebuilt or hasattr(item.config, "workerinput") or mpk.build_jobs() < 2 or mpk.replay:
        return
    mpk.cases_prebuilt = True
    built = prebuild(_work(mpk, _selected_cases(item)), mpk.build_jobs())
    if built:
        item._notes[f"{built} modules of the session's cases built together before they ran"] = None


def _selected_cases(item: _SceneItem) -> list[CaseItem]:
    return [i for i in item.session.items if isinstance(i, CaseItem) and i.get_closest_marker("skip") is None]


def _work(mpk, cases: list[CaseItem]) -> list[tuple[SceneTestCase, dict[str, Any], Any]]:
    """What prebuild() takes for ``cases``: each one's scene, params and setup (a case whose setup
    fails is left to its own run, which reports it)."""
    work = []
    for i in cases:
        try:
            work.append((i.scene_class.cls(), i.params, i._setup(mpk)))
        except Exception:  # noqa: BLE001 - the case's own run reports it
            continue
    return work


def _prebuild_when_cold(item: _SceneItem, mpk) -> None:
    """Under pytest-xdist, where no session prebuild runs: the first case of a worker that had to
    build its module found the cache cold, so modules of the session's cases are built now, the
    worker's share of the cores (build_jobs) at a time, cubins several to an nvcc run: this worker's
    share of the cases (every n-th) first, then the others' cubins that nobody has built or is
    building (the build locks say). Another worker's GPU modules are left to it: each would cost
    this worker the case's graph (with 16 workers, nearly every case's graph in every worker). With
    one worker per GPU (``-n auto`` on a host of 2 GPUs) each GPU case built its own module before,
    one nvcc process a worker: a cold main command on 2 H200s had run about 60% of its cases after
    300 s; built this way, it ended in 186 s. A warm run never gets here."""
    from .prebuild import prebuild

    worker = getattr(item.config, "workerinput", None)
    if worker is None or mpk.replay or mpk.cases_prebuilt:
        return
    mpk.cases_prebuilt = True
    index, count = int(worker["workerid"].removeprefix("gw")), int(worker["workercount"])
    cases = _selected_cases(item)
    others = [w for w in _work(mpk, [c for n, c in enumerate(cases) if n % count != index]) if w[2].backend != devices.GPU]
    built = prebuild(_work(mpk, cases[index::count]) + others, mpk.build_jobs())
    if built:
        item._notes[f"{built} modules of the session's cases built together after the cache was found cold"] = None


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

    @property
    def params(self) -> dict[str, Any]:
        """The case's params, with the class's DEFAULTS for what it leaves out."""
        return {**self.scene_class.cls.DEFAULTS, **self.case.params}

    def _runtest(self) -> None:
        self._run(self.params, self.case)


class SweepItem(_SceneItem):
    """The class's SWEEP as one Hypothesis test. By default a quick sweep: a few derandomized
    examples, the same in every run, whose modules are built together (nvcc in parallel) before the
    examples run, so a run builds them once and a later run finds them all in the cache. With
    ``--mpk-sweep-examples N``, or a Hypothesis profile picked on the command line, the long sweep:
    the examples Hypothesis draws, new shapes (and builds) each run."""

    def __init__(self, *, keys: tuple[str, ...], **kwargs: Any):
        super().__init__(**kwargs)
        self.keys = keys

    def _runtest(self) -> None:
        from hypothesis import given, settings
        from hypothesis import strategies as st

        from .session import SESSION_KEY

        mpk = self.config.stash[SESSION_KEY]
        sweep = self.scene_class.cls.SWEEP  # with a strategy for each of self.keys: SceneClass checked
        defaults = self.scene_class.cls.DEFAULTS
        drawn: list[dict[str, Any]] = []
        collecting = [mpk.quick_sweeps]

        @settings(**mpk.sweep_settings())
        @given(params=st.fixed_dictionaries(sweep))
        def sweep_case(params: dict[str, Any]) -> None:
            if collecting[0]:
                drawn.append(params)
            else:
                self._run({**defaults, **params}, None)

        # Each sweep its own key in Hypothesis' example database (as its pytest plugin does for
        # parametrized tests), so saved failures replay in the sweep that found them; and, being
        # derandomized by that digest, the quick sweep draws the same examples in every run. The key
        # leaves out the rootdir (it moves with where pytest starts), so a run from another directory
        # (an installed package's users, CI outside the checkout) draws the same examples too.
        key = f"{self.path.parent.name}/{self.path.name}::{self.scene_class.cls.__qualname__}::{self.name}"
        sweep_case.hypothesis.inner_test._hypothesis_internal_add_digest = key.encode()
        if collecting[0]:
            sweep_case()  # draws the examples only: derandomized, the run below draws the same ones
            collecting[0] = False
            self._prebuild(mpk, drawn)
        sweep_case()

    def _prebuild(self, mpk, drawn: list[dict[str, Any]]) -> None:
        from .prebuild import prebuild

        setup = self._setup(mpk)
        if setup.replay is not None:
            return
        scene, defaults = self.scene_class.cls(), self.scene_class.cls.DEFAULTS
        built = prebuild(((scene, {**defaults, **d}, setup) for d in drawn), mpk.build_jobs())
        if built:
            self._notes[f"{built} modules of the sweep built together before its examples ran"] = None


def _item_id(parent: pytest.Collector, base: str, arch: str) -> Any:
    """The node id of ``base[arch]`` under ``parent``, shaped as pytest shapes a parametrized test's.

    pytest 9.2 compares structured ids (path, names, params); the ids it reads back from its cache
    (``--lf``, ``--ff``, ``--sw``) are parsed with the bracket as params, so an item must carry its
    arch as params, not as part of its name, to be recognised. Older pytest compares the strings,
    which are the same either way."""
    if hasattr(parent, "id"):  # pytest >= 9.2
        return parent.id.child(base).with_params(arch)
    return f"{parent.nodeid}::{base}[{arch}]"


def _safe(nodeid: str) -> str:
    """The artifacts directory's name of an item: its node id, readable (a path's / as +, ::, [ and ]
    as _), with a digest of the whole id where the name would lose more (other characters, or past
    150): two items must never share a directory, each run deleting the other's files."""
    nodeid = nodeid.replace(os.sep, "/")
    name = re.sub(r"[^A-Za-z0-9_.+-]+", "_", nodeid.replace("/", "+")).strip("_")
    if len(name) > 150 or re.fullmatch(r"[A-Za-z0-9_.+/:\[\]-]*", nodeid) is None:
        name = f"{name[:140]}-{hashlib.sha256(nodeid.encode()).hexdigest()[:8]}"
    return name
