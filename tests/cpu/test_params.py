"""PersistentKernel's init parameters: the documented defaults, and one ConfigError per bad value,
each naming the value and the fix."""

from __future__ import annotations

import pytest

import mpk_runtime as mpk
from mpk_runtime.errors import ConfigError, MpkError
from mpk_runtime.frontend import params

DEFAULTS = {
    "mode": "offline",
    "world_size": 1,
    "mpi_rank": 0,
    "num_workers": 1,
    "num_local_schedulers": 4,
    "max_num_batched_tokens": 1,
    "max_num_batched_requests": 1,
    "max_num_pages": 1,
    "page_size": 1,
    "max_seq_length": 1,
    "meta_tensors": {},
    "profiler_tensor": None,
    "eos_token_id": -1,
}


def parse(**overrides) -> params.KernelParams:
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(overrides)
    return params.parse(p)


def test_defaults_are_the_documented_ones():
    d = mpk.PersistentKernel.get_default_init_parameters()
    assert set(d) == {*DEFAULTS, "trace_name"}
    for key, value in DEFAULTS.items():
        assert d[key] == value, key
        assert type(d[key]) is type(value), key  # 1, not True or 1.0
    assert "test_mode" not in d  # users set test mode explicitly


def test_defaults_parse_to_a_safe_offline_kernel():
    p = parse()
    assert (p.mode, p.test_mode, p.compile_only, p.target_cc) == ("offline", False, False, None)
    assert p.trace_name == "mpk_rank0"  # trace_name unset: named after the rank
    assert p.placement == "locality"
    assert p.watchdog_timeout > 0


def test_defaults_are_a_fresh_dict_every_time():
    a = mpk.PersistentKernel.get_default_init_parameters()
    a["num_workers"] = 99
    a["meta_tensors"]["tokens"] = "changed"
    b = mpk.PersistentKernel.get_default_init_parameters()
    assert b["num_workers"] == 1
    assert b["meta_tensors"] == {}
    assert a is not b and a["meta_tensors"] is not b["meta_tensors"]


def test_trace_name_follows_the_rank():
    assert parse(world_size=4, mpi_rank=3).trace_name == "mpk_rank3"
    assert parse(trace_name="run7").trace_name == "run7"


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match=r"unknown PersistentKernel parameter 'num_wokers'; did you mean 'num_workers'\?"):
        parse(num_wokers=8)


def test_unknown_key_without_a_close_one_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"'zzz'.*known parameters: .*max_seq_length"):
        parse(zzz=1)


def test_bad_mode_names_the_supported_one():
    with pytest.raises(ConfigError, match=r"mode='online' is not supported; use mode='offline'"):
        parse(mode="online")


INT_PARAMS = [
    "world_size",
    "num_workers",
    "max_num_batched_tokens",
    "max_num_batched_requests",
    "max_num_pages",
    "page_size",
    "max_seq_length",
    "num_local_schedulers",
]


@pytest.mark.parametrize("name", INT_PARAMS)
@pytest.mark.parametrize("value", [0, -3, 2.0, "4", None])
def test_non_positive_or_non_int_counts_are_rejected(name, value):
    with pytest.raises(ConfigError, match=rf"{name}={value!r} must be an integer in \[1, "):
        parse(**{name: value})


@pytest.mark.parametrize("name", INT_PARAMS)
def test_bools_are_not_ints(name):
    with pytest.raises(ConfigError, match=rf"{name}=True must be an integer"):
        parse(**{name: True})


def test_num_local_schedulers_is_capped():
    assert parse(num_local_schedulers=params.MAX_SCHEDULERS).num_local_schedulers == params.MAX_SCHEDULERS
    with pytest.raises(ConfigError, match=rf"num_local_schedulers=33 must be an integer in \[1, {params.MAX_SCHEDULERS}\]"):
        parse(num_local_schedulers=params.MAX_SCHEDULERS + 1)


@pytest.mark.parametrize("rank", [-1, 2, True, 1.0])
def test_mpi_rank_must_be_a_rank_of_the_world(rank):
    with pytest.raises(ConfigError, match=rf"mpi_rank={rank!r} must be in \[0, world_size=2\)"):
        parse(world_size=2, mpi_rank=rank)


@pytest.mark.parametrize("eos", [True, 2.0, "2"])
def test_eos_token_id_must_be_an_int(eos):
    with pytest.raises(ConfigError, match=r"eos_token_id=.* must be an integer \(-1: no end-of-sequence token\)"):
        parse(eos_token_id=eos)


@pytest.mark.parametrize("eos", [2**63, 2**64 + 5, -(2**63) - 1])
def test_eos_token_id_must_fit_the_devices_int64(eos):
    """ctypes would keep the low 64 bits: 2**64 + 5 would reach the device as 5."""
    with pytest.raises(ConfigError, match=rf"eos_token_id={eos} must be an integer .* in \[-2\*\*63, 2\*\*63 - 1\]"):
        parse(eos_token_id=eos)


@pytest.mark.parametrize("eos", [2**63 - 1, -(2**63), -1, 0])
def test_eos_token_id_takes_every_int64(eos):
    assert parse(eos_token_id=eos).eos_token_id == eos


@pytest.mark.parametrize("name", ["test_mode", "compile_only", "emulate_check", "warp_jitter"])
@pytest.mark.parametrize("value", [1, "yes", None])
def test_flags_must_be_bools(name, value):
    with pytest.raises(ConfigError, match=rf"{name}={value!r} must be True or False"):
        parse(**{name: value})


@pytest.mark.parametrize("value", [1, "yes", "references", None])
def test_emulate_is_a_bool_or_reference(value):
    with pytest.raises(ConfigError, match=rf'emulate={value!r} must be True \(the CUDA task bodies on the CPU\), "reference"'):
        parse(emulate=value, target_cc=90)


@pytest.mark.parametrize("value", [True, "reference"])
def test_emulate_choices(value):
    assert parse(emulate=value, target_cc=90).emulate == value


@pytest.mark.parametrize("emulate", [False, "reference"])
def test_emulate_check_needs_the_cuda_bodies(emulate):
    with pytest.raises(
        ConfigError,
        match=rf"emulate_check=True checks the CUDA task bodies on the CPU; it needs emulate=True, not emulate={emulate!r}",
    ):
        parse(emulate=emulate, emulate_check=True, target_cc=90)


@pytest.mark.parametrize("cc", [70, 89, 120, "sm90", True])
def test_target_cc_must_be_a_build_target(cc):
    with pytest.raises(ConfigError, match=rf"target_cc={cc!r} must be one of \(80, 90, 100\)"):
        parse(target_cc=cc)


def test_target_cc_float_is_rejected():
    with pytest.raises(ConfigError, match=r"target_cc=80.0"):
        parse(target_cc=80.0)


@pytest.mark.parametrize("cc", [80, 90, 100])
def test_target_cc_accepts_the_three_targets(cc):
    assert parse(target_cc=cc, compile_only=True).target_cc == cc


@pytest.mark.parametrize("flag", ["compile_only", "emulate"])
def test_running_without_a_gpu_needs_target_cc(flag):
    with pytest.raises(ConfigError, match=rf"{flag}=True needs an explicit target_cc \(80, 90 or 100\): there is no GPU"):
        parse(**{flag: True})


def test_compile_only_and_emulate_exclude_each_other():
    with pytest.raises(
        ConfigError,
        match=r"compile_only=True builds without running and emulate=True runs on the CPU; "
        r"choose one",
    ):
        parse(compile_only=True, emulate=True, target_cc=80)


@pytest.mark.parametrize("timeout", [0, -1, 3601, float("nan"), float("inf"), True, "5"])
def test_watchdog_timeout_must_be_bounded_seconds(timeout):
    with pytest.raises(ConfigError, match=r"watchdog_timeout=.* must be a number of seconds in \(0, 3600\]"):
        parse(watchdog_timeout=timeout)


def test_watchdog_timeout_int_becomes_float():
    assert parse(watchdog_timeout=2).watchdog_timeout == 2.0


@pytest.mark.parametrize("placement", ["random", "", None])
def test_placement_names_the_policies(placement):
    with pytest.raises(ConfigError, match=rf"placement={placement!r} must be one of locality, round_robin"):
        parse(placement=placement)


@pytest.mark.parametrize("value", [[], None, "tokens"])
def test_meta_tensors_must_be_a_dict(value):
    with pytest.raises(ConfigError, match=rf"meta_tensors must be a dict of name -> tensor, got {type(value).__name__}"):
        parse(meta_tensors=value)


def test_trace_name_must_be_a_non_empty_string():
    with pytest.raises(ConfigError, match=r"trace_name='' must be a non-empty string"):
        parse(trace_name="")


def test_meta_tensors_dict_is_copied():
    """The kernel keeps its own dict, so a caller reusing theirs cannot change a built kernel."""
    mine: dict = {}
    p = parse(meta_tensors=mine)
    mine["tokens"] = None
    assert p.meta_tensors == {}


@pytest.mark.parametrize("bad", [{"mode": "x"}, {"num_workers": 0}, {"placement": "x"}, {"zzz": 1}])
def test_config_errors_are_mpk_errors_and_value_errors(bad):
    with pytest.raises(ConfigError) as info:
        parse(**bad)
    assert isinstance(info.value, MpkError) and isinstance(info.value, ValueError)
    with pytest.raises(ValueError):  # callers may catch the builtin
        parse(**bad)


def test_persistent_kernel_validates_before_anything_else():
    """A bad parameter is reported even where no GPU exists (the check comes first)."""
    with pytest.raises(ConfigError, match="num_workers=0"):
        mpk.PersistentKernel(**{**mpk.PersistentKernel.get_default_init_parameters(), "num_workers": 0})
