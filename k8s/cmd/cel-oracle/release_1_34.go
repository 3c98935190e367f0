//go:build !k8s_1_36

// Kubernetes 1.34's CEL compiler features (k8s.io/dynamic-resource-allocation v0.34.4 cel/compile.go Features):
// consumable capacity only. The default build (go.mod).

package main

import (
	"errors"

	dracel "k8s.io/dynamic-resource-allocation/cel"
)

func compilerFeatures(f features) (dracel.Features, error) {
	if f.ListTypeAttributes {
		return dracel.Features{}, errors.New("listTypeAttributes does not exist in this release's CEL environment")
	}
	return dracel.Features{EnableConsumableCapacity: f.ConsumableCapacity}, nil
}
