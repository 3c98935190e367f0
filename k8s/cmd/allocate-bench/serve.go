package main

// serve answers allocation requests, one JSON object per line on stdin, one answer per line on stdout, with no
// timing: the upstream allocator as an oracle that gpudra's tests drive call by call (tests/oracles/
// test_allocator_conformance_go.py replays the conformance cases through it). Requests:
//
//	{"op": "state", "deviceClasses": [...], "resourceSlices": [...], "allocatedClaims": [...],
//	 "features": {...}, "allocators": ["incubating"]}                  the cluster; answer {}
//	{"op": "allocated", "claim": {...}}                                 one more allocated claim; answer {}
//	{"op": "allocate", "node": {...}, "claims": [...]}                  Allocate(node, claims) on the current state;
//	                                                                    answer {"results": [...] or null, "error",
//	                                                                    "errorNodeLocal"}
//
// As the scheduler's PreFilter, one allocator serves every node until the allocated claims change.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type request struct {
	Op string `json:"op"`
	input
	Claim *resourceapi.ResourceClaim `json:"claim"`
}

type answerLine struct {
	Results        []resourceapi.AllocationResult `json:"results"`
	Error          string                         `json:"error,omitempty"`
	ErrorNodeLocal bool                           `json:"errorNodeLocal,omitempty"`
}

type server struct {
	ctx       context.Context
	features  structured.Features
	classes   classLister
	slices    []*resourceapi.ResourceSlice
	allocated []*resourceapi.ResourceClaim
	celCache  *cel.Cache
	allocator structured.Allocator // nil: to be made from the current state
}

func (s *server) handle(r *request) (any, error) {
	switch r.Op {
	case "state":
		f, err := features(r.Features)
		if err != nil {
			return nil, err
		}
		if err := enableAllocators(r.Allocators); err != nil {
			return nil, err
		}
		s.features, s.classes, s.allocator = f, classLister{}, nil
		for i := range r.DeviceClasses {
			s.classes[r.DeviceClasses[i].Name] = &r.DeviceClasses[i]
		}
		s.slices, s.allocated = pointers(r.ResourceSlices), pointers(r.AllocatedClaims)
		s.celCache = cel.NewCache(10, celFeatures(f))
		return struct{}{}, nil
	case "allocated":
		if r.Claim == nil {
			return nil, fmt.Errorf("allocated: no claim")
		}
		s.allocated, s.allocator = append(s.allocated, r.Claim), nil
		return struct{}{}, nil
	case "allocate":
		if s.classes == nil {
			return nil, fmt.Errorf("allocate before state")
		}
		if s.allocator == nil {
			allocator, err := structured.NewAllocator(s.ctx, s.features, allocatedState(s.allocated, s.features),
				s.classes, s.slices, s.celCache)
			if err != nil {
				// NewAllocator fails only for a feature set no variant supports: an answer, as Allocate's errors
				return answerLine{Error: err.Error()}, nil
			}
			s.allocator = allocator
		}
		results, err := s.allocator.Allocate(s.ctx, &r.Node, pointers(r.Claims))
		if err != nil {
			return answerLine{Error: err.Error(), ErrorNodeLocal: nodeLocal(err)}, nil
		}
		return answerLine{Results: results}, nil
	}
	return nil, fmt.Errorf("unknown op %q", r.Op)
}

func serve(in io.Reader, out io.Writer) error {
	s := &server{ctx: context.Background()}
	lines := bufio.NewReader(in)
	encoder := json.NewEncoder(out)
	for {
		line, err := lines.ReadBytes('\n')
		if len(line) > 0 {
			var r request
			if err := json.Unmarshal(line, &r); err != nil {
				return fmt.Errorf("request: %w", err)
			}
			answer, err := s.handle(&r)
			if err != nil {
				return err
			}
			if err := encoder.Encode(answer); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
