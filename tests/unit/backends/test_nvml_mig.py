"""The NVML MIG reads (greengpu.backends.nvml_mig) against the fake NVML's MIG (fake_nvml_mig): mode on and
off, pending until a reset, instances listed with their profiles and placements, NotSupported on a model
without MIG, and a failing read reported unreadable, never raised."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from greengpu.backends.fake_nvml import FakeNvml, make_gpus
from greengpu.backends.gpu_sharing import DeclaredSharing, sharing_disagreements
from greengpu.backends.nvml import NvmlBackend


def _placement(start: int, size: int) -> object:
    return ctypes.byref(pynvml.c_nvmlGpuInstancePlacement_t(start, size))


def _setup(spec: str = "2xA100-40,1xV100") -> tuple[FakeNvml, NvmlBackend]:
    fake = FakeNvml(make_gpus(spec))
    backend = NvmlBackend(lib=fake)
    backend.open()
    return fake, backend


def _enable(fake: FakeNvml, index: int) -> object:
    handle = fake.nvmlDeviceGetHandleByIndex(index)
    assert fake.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_ERROR_RESET_REQUIRED
    fake.reset_gpu(index)
    return handle


def test_mig_off_on_a_capable_gpu_and_no_mig_on_a_v100() -> None:
    _, backend = _setup()
    a100, v100 = backend.read_sharing(0), backend.read_sharing(2)
    assert (a100.mig_capable, a100.mig_enabled, a100.pending_mig, a100.instances) == (True, False, False, ())
    assert (v100.mig_capable, v100.mig_enabled, v100.unreadable) == (False, False, None)


def test_a_mode_change_is_pending_until_the_gpu_is_reset() -> None:
    fake, backend = _setup()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
    seen = backend.read_sharing(0)
    assert (seen.mig_enabled, seen.pending_mig) == (False, True)
    fake.reset_gpu(0)
    seen = backend.read_sharing(0)
    assert (seen.mig_enabled, seen.pending_mig) == (True, True)


def test_instances_are_listed_with_profiles_and_placements() -> None:
    fake, backend = _setup()
    handle = _enable(fake, 0)
    fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 9, _placement(4, 4))  # 3g.20gb (profile id 9)
    fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 14, _placement(0, 2))  # 2g.10gb
    fake.nvmlDeviceCreateGpuInstance(handle, 19)  # 1g.5gb, first free place: 2
    seen = backend.read_sharing(0)
    assert [(i.profile, i.start, i.size) for i in seen.instances] == [
        ("2g.10gb", 0, 2), ("1g.5gb", 2, 1), ("3g.20gb", 4, 4)]
    node = backend.read_node_sharing("n1")
    assert node.mig_gpus == 1 and dict(node.mig_devices) == {"1g.5gb": 1, "2g.10gb": 1, "3g.20gb": 1}


def test_the_fake_keeps_nvml_constraints() -> None:
    fake, _ = _setup()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # instances only in MIG mode
        fake.nvmlDeviceCreateGpuInstance(handle, 19)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # no MIG on a V100
        fake.nvmlDeviceGetMigMode(fake.nvmlDeviceGetHandleByIndex(2))
    _enable(fake, 0)
    fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 9, _placement(4, 4))
    with pytest.raises(pynvml.NVMLError_InsufficientResources):  # over the 3g.20gb
        fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 14, _placement(4, 2))
    with pytest.raises(pynvml.NVMLError_InsufficientResources):  # 2g.10gb may not start at slice 1
        fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 14, _placement(1, 2))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # the enum value is not the profile id
        fake.nvmlDeviceCreateGpuInstance(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE + 100)
    with pytest.raises(pynvml.NVMLError_InUse):  # MIG off while instances exist
        fake.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE)
    fake.root = False
    with pytest.raises(pynvml.NVMLError_NoPermission):
        fake.nvmlDeviceCreateGpuInstance(handle, 19)


def test_hopper_takes_a_new_mode_at_once_when_idle() -> None:
    fake, backend = _setup("1xH100")
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_SUCCESS
    assert backend.read_sharing(0).mig_enabled
    fake.nvmlDeviceCreateGpuInstance(handle, 19)
    assert [i.profile for i in backend.read_sharing(0).instances] == ["1g.10gb"]


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN,
                                  pynvml.NVML_ERROR_NO_PERMISSION])
def test_a_failing_read_is_unreadable_never_raised(code: int) -> None:
    fake, backend = _setup()
    _enable(fake, 1)
    fake.fail_mig_reads(1, code)
    seen = backend.read_sharing(1)
    assert seen.unreadable is not None and type(pynvml.NVMLError(code)).__name__ in seen.unreadable
    node = backend.read_node_sharing("n1")
    assert node.mig_gpus is None  # unknown, not a count of the readable GPUs
    lines = sharing_disagreements({"n1": DeclaredSharing(mig_gpus=0)}, [node])
    assert len(lines) == 1 and "GPU 1: MIG state unreadable" in lines[0]


def test_nvml_reading_against_the_inventory() -> None:
    fake, backend = _setup("4xA100-40")
    for index in (0, 2):
        handle = _enable(fake, index)
        fake.nvmlDeviceCreateGpuInstance(handle, 9)  # 3g.20gb
    node = backend.read_node_sharing("lab1")
    declared = DeclaredSharing(mig_gpus=2, profiles=frozenset({"1g.5gb", "2g.10gb"}))
    [line] = sharing_disagreements({"lab1": declared}, [node])
    assert line.startswith("lab1: ")
    assert "GPU 1 is not in MIG mode, the inventory declares GPUs 0-1 in MIG mode" in line
    assert "GPU 2 is in MIG mode" in line
    assert "MIG devices 2 x 3g.20gb not among the inventory's profiles (1g.5gb, 2g.10gb)" in line
    assert sharing_disagreements({"lab1": DeclaredSharing(mig_gpus=1, profiles=frozenset({"3g.20gb"}))},
                                 [backend.read_node_sharing("other")]) == []


def test_a_driver_without_the_v2_profile_call_still_names_the_profiles() -> None:
    fake, backend = _setup()
    handle = _enable(fake, 0)
    for profile_id in (19, 14, 9):  # 1g.5gb, 2g.10gb, 3g.20gb
        fake.nvmlDeviceCreateGpuInstance(handle, profile_id)
    fake.mig_profile_info_v2 = False
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    assert sorted(i.profile for i in backend.read_sharing(0).instances) == ["1g.5gb", "2g.10gb", "3g.20gb"]


def test_the_fake_refuses_handles_and_references_it_did_not_give_out() -> None:
    # NVML answers InvalidArgument for a handle or an out-parameter it cannot use; so does the fake, for
    # anything other than the handles it made and the ctypes references pynvml passes.
    fake, _ = _setup()
    handle = _enable(fake, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetMigMode(object())
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpuInstanceDestroy(12345)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpuInstanceGetInfo(None)
    array = (pynvml.c_nvmlGpuInstance_t * 7)()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetGpuInstances(handle, 19, array, ctypes.byref(ctypes.c_int(0)))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 9, ctypes.byref(ctypes.c_uint(4)))
    count = ctypes.c_uint(0)
    fake.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 9, _placement(4, 4))
    fake.nvmlDeviceGetGpuInstances(handle, 9, array, ctypes.pointer(count))  # pointer() works as byref() does
    assert count.value == 1
