//go:build k8s_1_36

// Kubernetes 1.36's CEL compiler features (k8s.io/dynamic-resource-allocation v0.36.2 cel/compile.go Features):
// consumable capacity and DRAListTypeAttributes. Built with releases/v1.36.mod and the tag k8s_1_36.

package main

import dracel "k8s.io/dynamic-resource-allocation/cel"

func compilerFeatures(f features) (dracel.Features, error) {
	return dracel.Features{EnableConsumableCapacity: f.ConsumableCapacity,
		EnableListTypeAttributes: f.ListTypeAttributes}, nil
}
