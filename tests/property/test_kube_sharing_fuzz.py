"""The GPU Operator's labels and resources with junk values: the node reader never raises (a value it cannot
read is one line in `unknown`, and what it would have told stays unknown), and a pod's resources give a
`gpu_profile`, None, or one clear SharingReadError line, never another exception."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from greengpu.backends.gpu_sharing import DeclaredSharing, sharing_disagreements
from greengpu.backends.kube_sharing import SharingReadError, pod_gpu_profile, sharing_from_node

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
KEYS = ["nvidia.com/mig.strategy", "nvidia.com/mig.config", "nvidia.com/mig.config.state", "nvidia.com/gpu.product",
        "nvidia.com/gpu.count", "nvidia.com/gpu.sharing-strategy", "nvidia.com/gpu.replicas", "nvidia.com/gpu",
        "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-",
        "nvidia.com/mig-x"]
JUNK = st.one_of(st.sampled_from(["", "0", "7", "-1", "1.5", "nan", "1e300", "9" * 400, "mixed", "single", "none",
                                  "time-slicing", "all-disabled", "failed", "A100-SXM4-40GB-MIG-1g.5gb",
                                  "A100-MIG-INVALID", "٣", "1 ", "\x00", "pending"]),
                 st.text(max_size=20), st.integers(-10, 10**12), st.none(), st.floats())
MAPS = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=12), JUNK, max_size=8)
settings_ = settings(max_examples=300, deadline=None, derandomize=IN_CI, database=None)


@settings_
@given(MAPS, MAPS)
def test_junk_labels_are_unknown_never_a_traceback(labels: dict[str, object], capacity: dict[str, object]) -> None:
    reading = sharing_from_node("n", labels, capacity)
    assert all(isinstance(line, str) and "\n" not in line for line in reading.unknown)
    assert all(isinstance(n, int) and n > 0 for n in reading.mig_devices.values())
    for line in sharing_disagreements({"n": DeclaredSharing(mig_gpus=1, timeslice_gpus=1, timeslice_replicas=2)},
                                      [reading]):
        assert line.startswith("n: ") and "\n" not in line


@settings_
@given(MAPS)
def test_pod_resources_give_a_profile_or_one_clear_line(resources: dict[str, object]) -> None:
    try:
        profile = pod_gpu_profile(resources)
    except SharingReadError as error:
        assert "\n" not in str(error) and str(error).startswith("resource")
    else:
        assert profile is None or profile == "timeslice" or "g." in profile
