// Command allocate-bench times the upstream structured allocator (k8s.io/dynamic-resource-allocation/structured,
// the code kube-scheduler's DynamicResources plugin runs) on the inputs benchmarks/allocate.py gives gpudra's
// allocator, so that both are measured in the same run on the same objects.
//
//	allocate-bench INPUT.json
//	allocate-bench -serve      (allocation answers only, no timing: serve.go)
//
// INPUT is one JSON object (the k8s.io/api types decode its objects):
//
//	{"deviceClasses": [...], "resourceSlices": [...], "allocatedClaims": [...], "node": {...},
//	 "claims": [...], "features": {"AdminAccess": true, ...}, "seconds": 1, "windows": 5, "minRuns": 20}
//
// It prints one JSON object: the allocation results of one Allocate call on a ready allocator ("results", null when
// the claims do not fit the node; "error" when Allocate failed) and two rates, each by the wall clock and per
// CPU-second of this process (GC threads included), each the median of `windows` timing windows:
//
//	allocate   Allocate(node, claims) on one ready allocator, the same claim objects every call;
//	per pod    NewAllocator from the classes, slices and allocated devices plus one Allocate, as the plugin's
//	           PreFilter and one Filter do for each pod, each pod bringing new claim objects (deep copies of
//	           `claims` with their own name and uid, as the resourceclaim controller makes them from a template).
//
// The claim copies are made before a window starts, outside the timing, as the informer hands them out decoded.
// The same sources build against every release gpudra's module pins (go.mod: 1.34; releases/v1.36.mod, with the
// build tag k8s_1_36 that gpudra.kubecluster.build passes): release_1_34.go and release_1_36.go hold the few names
// that differ between the releases' allocator APIs.
//
// How the plugin calls the allocator: k8s.io/kubernetes v1.34.4 pkg/scheduler/framework/plugins/dynamicresources/
// dynamicresources.go (PreFilter: ListAllAllocatedDevices, NewAllocator with a cel.NewCache(10) kept by the plugin).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

type input struct {
	DeviceClasses   []resourceapi.DeviceClass   `json:"deviceClasses"`
	ResourceSlices  []resourceapi.ResourceSlice `json:"resourceSlices"`
	AllocatedClaims []resourceapi.ResourceClaim `json:"allocatedClaims"`
	Node            v1.Node                     `json:"node"`
	Claims          []resourceapi.ResourceClaim `json:"claims"`
	Features        map[string]bool             `json:"features"`
	Allocators      []string                    `json:"allocators"` // upstream variants allowed (--allocator); none: all
	Seconds         float64                     `json:"seconds"`
	Windows         int                         `json:"windows"`
	MinRuns         int                         `json:"minRuns"`
}

type output struct {
	Results         []resourceapi.AllocationResult `json:"results"`
	Error           string                         `json:"error,omitempty"`
	AllocatePerS    float64                        `json:"allocate_per_s"`
	AllocatePerCPUS float64                        `json:"allocate_per_cpu_s"`
	PerPodPerS      float64                        `json:"per_pod_per_s"`
	PerPodPerCPUS   float64                        `json:"per_pod_per_cpu_s"`
}

// classLister serves DeviceClasses as the scheduler's informer-backed lister does.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	classes := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, class := range l {
		classes = append(classes, class)
	}
	return classes, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := l[name]; ok {
		return class, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// features maps gpudra's allocator feature names onto upstream's Features (setFeature, per release: release_*.go);
// a name upstream does not have at this release is an error, not silently dropped.
func features(named map[string]bool) (structured.Features, error) {
	var f structured.Features
	for name, on := range named {
		if !setFeature(&f, name, on) && on {
			return f, fmt.Errorf("feature %s does not exist in this release's allocator", name)
		}
	}
	return f, nil
}

// setCommonFeature sets the features both releases name alike; false for a name it does not know.
func setCommonFeature(f *structured.Features, name string, on bool) bool {
	switch name {
	case "AdminAccess":
		f.AdminAccess = on
	case "ConsumableCapacity":
		f.ConsumableCapacity = on
	case "DeviceTaints":
		f.DeviceTaints = on
	case "PartitionableDevices":
		f.PartitionableDevices = on
	case "PrioritizedList":
		f.PrioritizedList = on
	default:
		return false
	}
	return true
}

// allocatedState is what the scheduler's claim tracker hands NewAllocator for these claims (k8s.io/kubernetes
// v1.36.0 and v1.34.4 pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go foreachAllocatedDevice):
// a device allocated with admin access is not allocated; with consumable capacity on, a result with a shareID is
// a shared device whose consumed capacity adds up, every other one is taken whole.
func allocatedState(claims []*resourceapi.ResourceClaim, f structured.Features) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(result.AdminAccess, false) {
				continue
			}
			device := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if f.ConsumableCapacity && result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(device, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(device, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(device)
		}
	}
	return state
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return float64(usage.Utime.Nano()+usage.Stime.Nano()) / 1e9
}

func median(values []float64) float64 {
	sort.Float64s(values)
	n := len(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}

// rate times `action` as benchmarks/allocate.py's rate does: a warm-up call, an estimate of the calls per window,
// then `windows` windows of that many calls (each given its inputs from `fresh`, made before the window's clock
// starts); the medians of the windows' wall and CPU rates.
func rate[T any](in *input, fresh func(int) T, action func(T) error) (float64, float64, error) {
	windows := max(1, in.Windows)
	if err := action(fresh(0)); err != nil {
		return 0, 0, err
	}
	perWindow := in.Seconds / float64(windows)
	runs, start := 0, time.Now()
	for runs < 3 || time.Since(start).Seconds() < perWindow/4 {
		if err := action(fresh(runs)); err != nil {
			return 0, 0, err
		}
		runs++
	}
	estimate := float64(runs) / time.Since(start).Seconds()
	calls := max(in.MinRuns/windows, 1, int(math.Ceil(estimate*perWindow)))
	var wallRates, cpuRates []float64
	for window := 0; window < windows; window++ {
		inputs := make([]T, calls)
		for i := range inputs {
			inputs[i] = fresh(window*calls + i)
		}
		wallStart, cpuStart := time.Now(), cpuSeconds()
		for _, item := range inputs {
			if err := action(item); err != nil {
				return 0, 0, err
			}
		}
		wall := time.Since(wallStart).Seconds()
		cpu := math.Max(cpuSeconds()-cpuStart, 1e-9)
		wallRates = append(wallRates, float64(calls)/wall)
		cpuRates = append(cpuRates, float64(calls)/cpu)
	}
	return median(wallRates), median(cpuRates), nil
}

func pointers[T any](objects []T) []*T {
	out := make([]*T, len(objects))
	for i := range objects {
		out[i] = &objects[i]
	}
	return out
}

func run(in *input) (*output, error) {
	ctx := context.Background()
	if err := enableAllocators(in.Allocators); err != nil {
		return nil, err
	}
	f, err := features(in.Features)
	if err != nil {
		return nil, err
	}
	classes := classLister{}
	for i := range in.DeviceClasses {
		classes[in.DeviceClasses[i].Name] = &in.DeviceClasses[i]
	}
	slices := pointers(in.ResourceSlices)
	allocated := pointers(in.AllocatedClaims)
	claims := pointers(in.Claims)
	celCache := cel.NewCache(10, celFeatures(f))
	newAllocator := func() (structured.Allocator, error) {
		return structured.NewAllocator(ctx, f, allocatedState(allocated, f), classes, slices, celCache)
	}

	out := &output{}
	ready, err := newAllocator()
	if err != nil {
		return nil, fmt.Errorf("NewAllocator: %w", err)
	}
	out.Results, err = ready.Allocate(ctx, &in.Node, claims)
	if err != nil {
		// An allocation error is an answer to compare (gpudra's outcome "error"), not a failure of the harness;
		// it is not timed.
		out.Error = err.Error()
		return out, nil
	}
	same := func(int) []*resourceapi.ResourceClaim { return claims }
	allocate := func(c []*resourceapi.ResourceClaim) error {
		_, err := ready.Allocate(ctx, &in.Node, c)
		return err
	}
	if out.AllocatePerS, out.AllocatePerCPUS, err = rate(in, same, allocate); err != nil {
		return nil, err
	}
	fromTemplate := func(pod int) []*resourceapi.ResourceClaim {
		fresh := make([]*resourceapi.ResourceClaim, len(claims))
		for i, template := range claims {
			claim := template.DeepCopy()
			claim.Name = fmt.Sprintf("%s-pod%d", template.Name, pod)
			claim.UID = types.UID(fmt.Sprintf("pod-%d-claim-%d", pod, i))
			fresh[i] = claim
		}
		return fresh
	}
	perPod := func(c []*resourceapi.ResourceClaim) error {
		allocator, err := newAllocator()
		if err != nil {
			return err
		}
		_, err = allocator.Allocate(ctx, &in.Node, c)
		return err
	}
	if out.PerPodPerS, out.PerPodPerCPUS, err = rate(in, fromTemplate, perPod); err != nil {
		return nil, err
	}
	return out, nil
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-serve" {
		if err := serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
			os.Exit(2)
		}
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: allocate-bench INPUT.json | allocate-bench -serve")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	}
	var in input
	if err := json.Unmarshal(data, &in); err != nil {
		fmt.Fprintf(os.Stderr, "error: %s: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	out, err := run(&in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
