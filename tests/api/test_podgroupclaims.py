"""gpudra.api.podgroupclaims against upstream's own tables, transcribed as data:
k8s.io/dynamic-resource-allocation@v0.36.3 resourceclaim/resourceclaim_test.go TestBindTo (every case, error
texts included) and TestIsReservedForPod (every case)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.podgroupclaims import PodGroupClaimError, bind_to, is_reserved_for_pod

# ----- TestBindTo ------------------------------------------------------------------------------------------------
POD = {"metadata": {"namespace": "my-namespace", "name": "my-pod", "uid": "pod-uid"},
       "spec": {"schedulingGroup": {"podGroupName": "my-podgroup"}}}
POD_RESERVATION = {"resource": "pods", "name": "my-pod", "uid": "pod-uid"}
GROUP_RESERVATION = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "my-podgroup",
                     "uid": "podgroup-uid"}
BY_NAME = {"name": "my-claim", "resourceClaimName": "my-resource-claim"}
BY_TEMPLATE = {"name": "my-claim", "resourceClaimTemplateName": "my-resource-claim"}


def group(*claims: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"namespace": "my-namespace", "name": "my-podgroup", "uid": "podgroup-uid"},
            "spec": {"resourceClaims": list(claims)}}


BIND_TO = {
    "unsupported API in Pod": (None, {"name": "my-claim"}, "Pod my-namespace/my-pod claim my-claim: "
                                                            "none of the supported fields are set"),
    "Pod claim with ResourceClaimName": (None, BY_NAME, POD_RESERVATION),
    "Pod claim with ResourceClaimTemplateName": (None, BY_TEMPLATE, POD_RESERVATION),
    "Pod claim with ResourceClaimName matching PodGroup": (group(BY_NAME), BY_NAME, GROUP_RESERVATION),
    "Pod claim with ResourceClaimTemplateName matching PodGroup": (group(BY_TEMPLATE), BY_TEMPLATE,
                                                                   GROUP_RESERVATION),
    "Wrong PodGroup namespace for Pod": (
        {"metadata": {"namespace": "not-my-namespace", "name": "my-podgroup"}}, BY_NAME,
        "Pod my-namespace/my-pod belongs to PodGroup my-namespace/my-podgroup, not PodGroup "
        "not-my-namespace/my-podgroup"),
    "Wrong PodGroup name for Pod": (
        {"metadata": {"namespace": "my-namespace", "name": "not-my-podgroup"}}, BY_NAME,
        "Pod my-namespace/my-pod belongs to PodGroup my-namespace/my-podgroup, not PodGroup "
        "my-namespace/not-my-podgroup"),
    "No matching claim in PodGroup": (
        group({"name": "not-my-claim", "resourceClaimName": "my-resource-claim"},
              {"name": "nor-my-claim", "resourceClaimName": "my-resource-claim"}), BY_NAME, POD_RESERVATION),
    "Find matching claim in PodGroup": (
        group({"name": "not-my-claim", "resourceClaimName": "my-resource-claim"},
              {"name": "nor-my-claim", "resourceClaimName": "my-resource-claim"}, BY_NAME), BY_NAME,
        GROUP_RESERVATION),
    "Claim name mismatch": (group({"name": "not-my-claim", "resourceClaimName": "my-resource-claim"}), BY_NAME,
                            POD_RESERVATION),
    "Claim resourceClaimName mismatch": (group({"name": "my-claim", "resourceClaimName": "not-my-resource-claim"}),
                                         BY_NAME, POD_RESERVATION),
    "Claim resourceClaimTemplateName mismatch": (
        group({"name": "my-claim", "resourceClaimTemplateName": "not-my-resource-claim"}), BY_TEMPLATE,
        POD_RESERVATION),
}


@pytest.mark.parametrize("case", list(BIND_TO))
def test_bind_to_upstream_table(case: str) -> None:
    pod_group, pod_claim, expected = BIND_TO[case]
    if isinstance(expected, str):
        with pytest.raises(PodGroupClaimError) as raised:
            bind_to(POD, pod_group, pod_claim)
        assert str(raised.value) == expected
    else:
        assert bind_to(POD, pod_group, pod_claim) == expected


# ----- TestIsReservedForPod --------------------------------------------------------------------------------------
def pod(name: str, uid: str, group_name: str | None = None) -> dict[str, Any]:
    spec = {"schedulingGroup": {"podGroupName": group_name}} if group_name else {}
    return {"metadata": {"namespace": "kube-system", "name": name, "uid": uid}, "spec": spec}


# uids as the upstream test hands them out: podNotReserved 1, podGroupNotReserved 2, podReserved 3,
# podGroupReserved 4, podOtherReserved 5, podGroupOtherReserved 6
NOT_RESERVED, RESERVED = pod("podNotReserved", "1"), pod("podReserved", "3")


def claim(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "kube-system", "name": "c"}, "status": {"reservedFor": list(entries)}}


GROUP_ENTRY = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "podGroupReserved", "uid": "4"}
OTHER_GROUP_ENTRY = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "podGroupOtherReserved",
                     "uid": "6"}
NO_RESERVATION = {"metadata": {"namespace": "kube-system", "name": "claimNoReservation"}, "status": {}}
WITH_RESERVATION = claim({"uid": "3"})
WITH_GROUP = claim(GROUP_ENTRY)
MULTIPLE = claim({"uid": "3"}, {"uid": "5"})
MULTIPLE_GROUPS = claim(GROUP_ENTRY, OTHER_GROUP_ENTRY)
POD_AND_GROUP = claim({"uid": "3"}, {"uid": "4"})

IS_RESERVED_FOR_POD = {
    "not-reserved": (NOT_RESERVED, NO_RESERVATION, False, False),
    "reserved-for-pod": (RESERVED, WITH_RESERVATION, False, True),
    "reserved-for-other-pod": (NOT_RESERVED, WITH_RESERVATION, False, False),
    "multiple-reservations-including-pod": (RESERVED, MULTIPLE, False, True),
    "multiple-reservations-excluding-pod": (NOT_RESERVED, MULTIPLE, False, False),
    "reserved-for-podgroup": (pod("podNotReserved", "1", "podGroupReserved"), WITH_GROUP, True, True),
    "podgroup-disabled": (pod("podNotReserved", "1", "podGroupReserved"), WITH_GROUP, False, False),
    "reserved-for-pod-and-podgroup": (pod("podReserved", "3", "podGroupReserved"), POD_AND_GROUP, True, True),
    "reserved-for-other-podgroup": (pod("podNotReserved", "1", "podGroupNotReserved"), WITH_RESERVATION, True,
                                    False),
    "multiple-reservations-including-podgroup": (pod("podNotReserved", "1", "podGroupReserved"), MULTIPLE_GROUPS,
                                                 True, True),
    "multiple-reservations-excluding-podgroup": (pod("podNotReserved", "1", "podGroupNotReserved"),
                                                 MULTIPLE_GROUPS, True, False),
}


@pytest.mark.parametrize("case", list(IS_RESERVED_FOR_POD))
def test_is_reserved_for_pod_upstream_table(case: str) -> None:
    the_pod, the_claim, accept_group, expected = IS_RESERVED_FOR_POD[case]
    assert is_reserved_for_pod(the_pod, the_claim, accept_group) is expected
