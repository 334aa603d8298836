"""Atoll's placement policies: profiles (validated, hot-reloadable) and the decision per Workload.

Pure: no Kubernetes I/O, no clock; ``admission`` supplies the snapshot, the time and the wait state.
"""

from policies._decision import Decision, Outcome, PodSetSpec, ProfileLevelError, WaitState, decide
from policies._loading import PROFILES_KEY, ProfilesError, load_profiles, load_profiles_file, profiles_from_configmap
from policies._profiles import (
    DEFAULT_FABRIC_LINK,
    DEFAULT_LINKS,
    FlavorSettings,
    LinkSettings,
    FragmentationSettings,
    Profile,
    ProfilesDocument,
    RetrySettings,
    SpreadSettings,
    WorkloadClass,
)

__all__ = [
    "DEFAULT_FABRIC_LINK",
    "DEFAULT_LINKS",
    "PROFILES_KEY",
    "Decision",
    "FlavorSettings",
    "FragmentationSettings",
    "LinkSettings",
    "Outcome",
    "PodSetSpec",
    "Profile",
    "ProfileLevelError",
    "ProfilesDocument",
    "ProfilesError",
    "RetrySettings",
    "SpreadSettings",
    "WaitState",
    "WorkloadClass",
    "decide",
    "load_profiles",
    "load_profiles_file",
    "profiles_from_configmap",
]
