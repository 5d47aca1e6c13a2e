"""Two runtime decisions that need no GPU to check: test mode is a launch-time flag (one built
module serves both modes), and the co-residency check explains a grid that cannot all be resident."""

from __future__ import annotations

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime.errors import CoResidencyError
from mpk_runtime.run.device_graph import LaunchConfig
from mpk_runtime.run.lifecycle import check_co_residency


def rmsnorm_kernel(**overrides) -> mpk.PersistentKernel:
    params = mpk.PersistentKernel.get_default_init_parameters()
    params.update(compile_only=True, target_cc=90, num_workers=4)
    params.update(overrides)
    pk = mpk.PersistentKernel(**params)
    x = pk.attach_input(torch.empty(4, 256), "x")
    w = pk.attach_input(torch.empty(256), "w")
    y = pk.attach_input(torch.empty(4, 256), "y")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    return pk


def test_test_mode_does_not_change_the_built_module():
    """The same graph in test mode and in offline mode loads the same cache entry: switching modes
    never recompiles (the mode travels in the launch parameters)."""
    tested, offline = rmsnorm_kernel(test_mode=True), rmsnorm_kernel(test_mode=False)
    tested.compile()
    offline.compile()
    assert tested.build_result.entry == offline.build_result.entry
    assert offline.build_result.cached


class FakeModule:
    """A module whose kernel fits `per_sm` CTAs on each of `sms` SMs."""

    dynamic_smem_bytes = 4096

    def __init__(self, per_sm: int, sms: int):
        self.per_sm, self.sms = per_sm, sms

    def occupancy(self, device: int) -> tuple[int, int]:
        return self.per_sm, self.sms


def test_co_residency_error_names_the_numbers_and_the_fix():
    launch = LaunchConfig(num_workers=140, num_schedulers=4, watchdog_timeout=5.0)
    with pytest.raises(
        CoResidencyError,
        match=r"num_workers=140 worker CTAs \+ 1 scheduler CTA\(s\) = 141 CTAs must all "
        r"be resident, but only 1 fit per SM x 132 SMs = 132 .* use num_workers <= "
        r"131 \(mpk_runtime.get_configurations_from_gpu gives a fitting pair\)",
    ):
        check_co_residency(FakeModule(per_sm=1, sms=132), 0, launch, 256)
    check_co_residency(FakeModule(per_sm=2, sms=132), 0, launch, 256)  # 141 <= 264: fits
