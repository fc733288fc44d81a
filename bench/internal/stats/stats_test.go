package stats

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(n - i) // descending: Percentile must sort
	}
	return out
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		p      float64
		want   float64
	}{
		{name: "p50 of 1..100", values: seq(100), p: 50, want: 50},
		{name: "p99 of 1..1000 is the 990th", values: seq(1000), p: 99, want: 990},
		{name: "p99 of 1..100", values: seq(100), p: 99, want: 99},
		{name: "p100 is the max", values: seq(7), p: 100, want: 7},
		{name: "p99 of 10 values is the max", values: seq(10), p: 99, want: 10},
		{name: "p50 of two", values: []float64{3, 1}, p: 50, want: 1},
		{name: "tiny p is the min", values: seq(5), p: 0.001, want: 1},
		{name: "one value", values: []float64{4.5}, p: 99, want: 4.5},
		{name: "empty", values: nil, p: 50, want: math.NaN()},
		{name: "p out of range", values: seq(3), p: 0, want: math.NaN()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Percentile(tc.values, tc.p)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("Percentile(p%v) (-want +got):\n%s", tc.p, diff)
			}
		})
	}
}

func TestPercentileDoesNotModifyInput(t *testing.T) {
	in := []float64{3, 1, 2}
	Percentile(in, 50)
	if diff := cmp.Diff([]float64{3, 1, 2}, in); diff != "" {
		t.Errorf("input modified (-want +got):\n%s", diff)
	}
}

func TestDescribe(t *testing.T) {
	got := Describe(seq(200))
	want := Sample{N: 200, P50: 100, P99: 198, Max: 200, Min: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Describe (-want +got):\n%s", diff)
	}
	empty := Describe(nil)
	if empty.N != 0 || !math.IsNaN(empty.P99) {
		t.Errorf("Describe(nil) = %+v, want N=0 and NaNs", empty)
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		want   Summary
	}{
		{name: "odd", values: []float64{5, 1, 3}, want: Summary{N: 3, Median: 3, Min: 1, Max: 5}},
		{name: "even takes the mean of the middle two", values: []float64{4, 1, 2, 10}, want: Summary{N: 4, Median: 3, Min: 1, Max: 10}},
		{name: "one", values: []float64{2}, want: Summary{N: 1, Median: 2, Min: 2, Max: 2}},
		{name: "NaNs ignored", values: []float64{math.NaN(), 2, 4}, want: Summary{N: 2, Median: 3, Min: 2, Max: 4}},
		{name: "empty", values: nil, want: Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Summarize(tc.values), cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	if got := Ratio(10, 4); got != 2.5 {
		t.Errorf("Ratio(10, 4) = %v, want 2.5", got)
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := Ratio(c[0], c[1]); !math.IsNaN(got) {
			t.Errorf("Ratio(%v, %v) = %v, want NaN", c[0], c[1], got)
		}
	}
}

func TestCDF(t *testing.T) {
	xs, ys := CDF([]float64{3, 1, 2, 4})
	if diff := cmp.Diff([]float64{1, 2, 3, 4}, xs); diff != "" {
		t.Errorf("xs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{0.25, 0.5, 0.75, 1}, ys); diff != "" {
		t.Errorf("ys (-want +got):\n%s", diff)
	}
}
