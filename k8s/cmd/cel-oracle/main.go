// cel-oracle answers DRA device selectors the way Kubernetes does, for gpudra's CEL tests and benchmarks.
//
// It reads {"cases": [...]} (or a bare list) as JSON on stdin; each case names an expression, a device (driver,
// v1 attributes and capacity) and the reading:
//
//   - envType "stored" (default): kube-scheduler's reading, as the allocator's cache compiles a selector
//     (k8s.io/dynamic-resource-allocation/cel cache.go GetOrCompile: StoredExpressions, no cost estimate; the
//     runtime cost limit resourceapi.CELSelectorExpressionMaxCost applies in DeviceMatches);
//   - envType "new": the API server's reading (NewExpressions with cost estimation: an estimate over the limit
//     is reported as exceedsCostLimit, which the API server rejects).
//
// Each answer is one JSON line: id, expression, compileError, estimatedCost, result or runtimeError, actualCost,
// and with -timing the seconds spent compiling and evaluating. Nothing here re-implements Kubernetes: the
// compiler, environment, cost limit and device conversion are the package's own (k8s.io/dynamic-resource-allocation
// v0.34.4 pinned by ../../go.mod, or v0.36.2 by ../../releases/v1.36.mod with the build tag k8s_1_36; cel-go
// v0.26.0 in both). The features each release's compiler knows: release_1_34.go, release_1_36.go.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

type device struct {
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations"`
}

type features struct {
	ConsumableCapacity bool `json:"consumableCapacity"`
	ListTypeAttributes bool `json:"listTypeAttributes"` // 1.36 on (release_1_36.go)
}

type testCase struct {
	ID         string   `json:"id"`
	Expression string   `json:"expression"`
	Driver     string   `json:"driver"`
	Device     device   `json:"device"`
	Features   features `json:"features"`
	EnvType    string   `json:"envType"`
}

type answer struct {
	ID              string   `json:"id"`
	Expression      string   `json:"expression"`
	CompileError    string   `json:"compileError,omitempty"`
	EstimatedCost   *uint64  `json:"estimatedCost,omitempty"`
	ExceedsCost     bool     `json:"exceedsCostLimit,omitempty"`
	Result          *bool    `json:"result,omitempty"`
	RuntimeError    string   `json:"runtimeError,omitempty"`
	ActualCost      *uint64  `json:"actualCost,omitempty"`
	CompileSeconds  *float64 `json:"compileSeconds,omitempty"`
	EvaluateSeconds *float64 `json:"evaluateSeconds,omitempty"`
}

func readCases(input []byte) ([]testCase, error) {
	var wrapped struct {
		Cases []testCase `json:"cases"`
	}
	if err := json.Unmarshal(input, &wrapped); err == nil && wrapped.Cases != nil {
		return wrapped.Cases, nil
	}
	var bare []testCase
	if err := json.Unmarshal(input, &bare); err != nil {
		return nil, err
	}
	return bare, nil
}

func seconds(d time.Duration) *float64 {
	s := d.Seconds()
	return &s
}

func run(c testCase, timing bool) (answer, error) {
	a := answer{ID: c.ID, Expression: c.Expression}
	celFeatures, err := compilerFeatures(c.Features)
	if err != nil {
		return a, fmt.Errorf("case %s: %w", c.ID, err)
	}
	compiler := dracel.GetCompiler(celFeatures)
	options := dracel.Options{DisableCostEstimation: true} // cache.go: the scheduler's GetOrCompile
	switch c.EnvType {
	case "", "stored":
	case "new":
		newExpressions := environment.NewExpressions
		options = dracel.Options{EnvType: &newExpressions}
	default:
		return a, fmt.Errorf("case %s: unknown envType %q", c.ID, c.EnvType)
	}
	start := time.Now()
	compiled := compiler.CompileCELExpression(c.Expression, options)
	if timing {
		a.CompileSeconds = seconds(time.Since(start))
	}
	if compiled.Error != nil {
		a.CompileError = compiled.Error.Error()
		return a, nil
	}
	if !options.DisableCostEstimation {
		estimate := compiled.MaxCost
		a.EstimatedCost = &estimate
		a.ExceedsCost = estimate > resourceapi.CELSelectorExpressionMaxCost
	}
	input := dracel.Device{
		Driver:                   c.Driver,
		Attributes:               c.Device.Attributes,
		Capacity:                 c.Device.Capacity,
		AllowMultipleAllocations: c.Device.AllowMultipleAllocations,
	}
	start = time.Now()
	matches, details, err := compiled.DeviceMatches(context.Background(), input)
	if timing {
		a.EvaluateSeconds = seconds(time.Since(start))
	}
	if details != nil {
		a.ActualCost = details.ActualCost()
	}
	if err != nil {
		a.RuntimeError = err.Error()
	} else {
		a.Result = &matches
	}
	return a, nil
}

func main() {
	timing := flag.Bool("timing", false, "report compileSeconds and evaluateSeconds per case")
	flag.Parse()
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: reading stdin: %v\n", err)
		os.Exit(2)
	}
	cases, err := readCases(input)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: cases: %v\n", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	for _, c := range cases {
		a, err := run(c, *timing)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
			os.Exit(2)
		}
		if err := out.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "error: writing: %v\n", err)
			os.Exit(2)
		}
	}
}
