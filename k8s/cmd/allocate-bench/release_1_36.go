//go:build k8s_1_36

// Kubernetes 1.36's allocator API (k8s.io/dynamic-resource-allocation v0.36.2 structured/internal/types.go Features,
// cel/compile.go Features, structured/allocator.go ErrFailedAllocationOnNode), built with releases/v1.36.mod and
// the tag k8s_1_36.

package main

import (
	"errors"

	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

func setFeature(f *structured.Features, name string, on bool) bool {
	switch name {
	case "DeviceBindingAndStatus":
		f.DeviceBindingAndStatus = on
	case "ListTypeAttributes":
		f.ListTypeAttributes = on
	default:
		return setCommonFeature(f, name, on)
	}
	return true
}

// celFeatures: the scheduler's cache (k8s.io/kubernetes v1.36.0 dynamicresources.go New: cel.NewCache(10, ...)).
func celFeatures(f structured.Features) cel.Features {
	return cel.Features{EnableConsumableCapacity: f.ConsumableCapacity, EnableListTypeAttributes: f.ListTypeAttributes}
}

// nodeLocal: an error wrapping ErrFailedAllocationOnNode fails only this node (invalid pools on it), not the pod.
func nodeLocal(err error) bool {
	return errors.Is(err, structured.ErrFailedAllocationOnNode)
}

// enableAllocators limits NewAllocator to the named variants (gpudra's --allocator); none: all of them.
func enableAllocators(names []string) error {
	structured.EnableAllocators(names...)
	return nil
}
