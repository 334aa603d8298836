"""Atoll's placement policies: profiles (validated, hot-reloadable) and the decision per Workload.

Pure: no Kubernetes I/O, no clock; ``admission`` supplies the snapshot, the time and the wait state.
"""

from policies._annotations import (
    GROUP_NAME,
    REQUIRED_TOPOLOGY,
    SLICE_REQUIRED_TOPOLOGY,
    SLICE_SIZE,
    TOPOLOGY_SPREADING,
    TopologyHints,
    annotation_notes,
    group_problems,
    is_spreading_json,
    read_topology_annotations,
)
from policies._decision import Decision, Outcome, PodSetSpec, ProfileLevelError, WaitState, annotation_problems, decide, podset_spec
from policies._loading import PROFILES_KEY, ProfilesError, load_profiles, load_profiles_file, profiles_from_configmap
from policies._profiles import (
    DEFAULT_FABRIC_LINK,
    DEFAULT_LINKS,
    FlavorSettings,
    FragmentationSettings,
    LevelOverrides,
    LinkSettings,
    Profile,
    ProfilesDocument,
    RetrySettings,
    SpreadSettings,
    WorkloadClass,
)

__all__ = [
    "DEFAULT_FABRIC_LINK",
    "DEFAULT_LINKS",
    "GROUP_NAME",
    "PROFILES_KEY",
    "REQUIRED_TOPOLOGY",
    "SLICE_REQUIRED_TOPOLOGY",
    "SLICE_SIZE",
    "TOPOLOGY_SPREADING",
    "Decision",
    "FlavorSettings",
    "FragmentationSettings",
    "LevelOverrides",
    "LinkSettings",
    "Outcome",
    "PodSetSpec",
    "Profile",
    "ProfileLevelError",
    "ProfilesDocument",
    "ProfilesError",
    "RetrySettings",
    "SpreadSettings",
    "TopologyHints",
    "WaitState",
    "WorkloadClass",
    "annotation_notes",
    "annotation_problems",
    "decide",
    "group_problems",
    "is_spreading_json",
    "load_profiles",
    "load_profiles_file",
    "podset_spec",
    "profiles_from_configmap",
    "read_topology_annotations",
]
