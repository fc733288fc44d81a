// Package stats holds the small amount of arithmetic the benchmark
// harness reports with: nearest-rank percentiles of a sample and the
// median, minimum and maximum of repeated measurements.
package stats

import (
	"math"
	"slices"
)

// Percentile returns the p-th percentile (0 < p <= 100) of values by the
// nearest-rank method: the smallest value such that at least p percent of
// the values are at or below it. It is always one of the values (never
// interpolated), so "p99 of 1000 proxies" is the 990th fastest proxy. It
// returns NaN for an empty sample. values need not be sorted and is not
// modified.
func Percentile(values []float64, p float64) float64 {
	if len(values) == 0 || p <= 0 || p > 100 || math.IsNaN(p) {
		return math.NaN()
	}
	s := sorted(values)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// Sample describes one distribution (per-proxy convergence times of one
// step of one run).
type Sample struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
	Min float64 `json:"min"`
}

// Describe returns the size, p50, p99, maximum and minimum of values; NaN fields
// for an empty sample.
func Describe(values []float64) Sample {
	if len(values) == 0 {
		return Sample{P50: math.NaN(), P99: math.NaN(), Max: math.NaN(), Min: math.NaN()}
	}
	s := sorted(values)
	return Sample{N: len(s), P50: percentileSorted(s, 50), P99: percentileSorted(s, 99), Max: s[len(s)-1], Min: s[0]}
}

// Summary is one quantity measured in several runs.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize returns the median (the mean of the two middle values for an
// even count), minimum and maximum of values, ignoring NaNs. An empty
// input (or only NaNs) gives NaN fields and N = 0.
func Summarize(values []float64) Summary {
	s := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{N: n, Median: med, Min: s[0], Max: s[n-1]}
}

// Ratio returns a/b, or NaN when either is NaN or b is zero.
func Ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// CDF returns the points (x, fraction of values <= x) of the empirical
// distribution of values, one per value, sorted by x.
func CDF(values []float64) (xs, ys []float64) {
	s := sorted(values)
	ys = make([]float64, len(s))
	for i := range s {
		ys[i] = float64(i+1) / float64(len(s))
	}
	return s, ys
}

func sorted(values []float64) []float64 {
	s := slices.Clone(values)
	slices.Sort(s)
	return s
}
