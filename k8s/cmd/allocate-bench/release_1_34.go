//go:build !k8s_1_36

// Kubernetes 1.34's allocator API (k8s.io/dynamic-resource-allocation v0.34.4 structured/internal/types.go Features,
// cel/compile.go Features): binding conditions and device status are two features, list-type attributes do not
// exist, and no error says it is local to the node. The default build (go.mod), so a plain `go build` works.

package main

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

func setFeature(f *structured.Features, name string, on bool) bool {
	if name == "DeviceBindingAndStatus" { // gpudra's one name for DRADeviceBindingConditions + DRAResourceClaimDeviceStatus
		f.DeviceBinding, f.DeviceStatus = on, on
		return true
	}
	return setCommonFeature(f, name, on)
}

func celFeatures(f structured.Features) cel.Features {
	return cel.Features{EnableConsumableCapacity: f.ConsumableCapacity}
}

// nodeLocal: 1.34's Allocate has no ErrFailedAllocationOnNode; every error aborts scheduling the pod.
func nodeLocal(error) bool {
	return false
}

// enableAllocators: 1.34 has no EnableAllocators; NewAllocator always picks the first variant that fits.
func enableAllocators(names []string) error {
	if len(names) > 0 {
		return fmt.Errorf("allocators %v: this release's allocator cannot be limited to a variant", names)
	}
	return nil
}
