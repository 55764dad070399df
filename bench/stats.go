package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// maxSamples bounds the latencies a sampler keeps, and so its memory
// (8 MiB), however many calls a case makes.
const maxSamples = 1 << 20

// sampler keeps a uniform random sample of at most limit latencies
// (reservoir sampling), from which it reads percentiles.
type sampler struct {
	n     int64 // latencies offered
	limit int
	buf   []time.Duration
	rng   *rand.Rand
}

// newSampler returns a sampler that keeps up to maxSamples latencies.
func newSampler(seed uint64) *sampler { return newSamplerLimit(seed, maxSamples) }

// newSamplerLimit returns a sampler that keeps up to limit latencies (at
// least 1).
func newSamplerLimit(seed uint64, limit int) *sampler {
	return &sampler{limit: max(limit, 1), rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

// add offers one latency.
func (s *sampler) add(d time.Duration) {
	s.n++
	if len(s.buf) < s.limit {
		s.buf = append(s.buf, d)
		return
	}
	if j := s.rng.Int64N(s.n); j < int64(s.limit) {
		s.buf[j] = d
	}
}

// mergeSamplers returns a sampler holding the samples of every one of ss,
// for percentiles over all of them. It is exact when none of ss dropped a
// latency; otherwise each keeps a uniform sample of its own calls, and
// calls of a sampler that saw more are under-weighted.
func mergeSamplers(ss []*sampler) *sampler {
	out := newSamplerLimit(0, 1)
	for _, s := range ss {
		out.n += s.n
		out.buf = append(out.buf, s.buf...)
	}
	out.limit = max(len(out.buf), 1)
	return out
}

// percentiles returns the nearest-rank percentiles ps (0 < p <= 100) of
// the sample, in seconds; NaN for an empty sample.
func (s *sampler) percentiles(ps ...float64) []float64 {
	out := make([]float64, len(ps))
	sorted := slices.Clone(s.buf)
	slices.Sort(sorted)
	for i, p := range ps {
		if len(sorted) == 0 {
			out[i] = math.NaN()
			continue
		}
		rank := int(math.Ceil(p / 100 * float64(len(sorted))))
		out[i] = sorted[max(rank, 1)-1].Seconds()
	}
	return out
}

// median returns the median of xs, NaN if there are none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fmtSeconds formats a time in seconds with three significant digits and a
// fitting unit.
func fmtSeconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s < 1e-6:
		return fmt.Sprintf("%.0f ns", s*1e9)
	case s < 1e-3:
		return sig3(s*1e6) + " µs"
	case s < 1:
		return sig3(s*1e3) + " ms"
	default:
		return sig3(s) + " s"
	}
}

// sig3 formats x >= 0 with three significant digits, no exponent.
func sig3(x float64) string {
	switch {
	case x < 10:
		return strconv.FormatFloat(x, 'f', 2, 64)
	case x < 100:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
}

// fmtCount formats a count or rate as an integer with thousands
// separators.
func fmtCount(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	digits := strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	var out []byte
	for i := range len(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, digits[i])
	}
	return string(out)
}

// fmtMiB formats a rate or size in MiB with three significant digits.
func fmtMiB(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return sig3(x)
}

// fmtBytes formats a size in bytes as MiB.
func fmtBytes(b float64) string {
	if math.IsNaN(b) {
		return "–"
	}
	return sig3(b/(1<<20)) + " MiB"
}

// fmtRatio formats a ratio such as 1.25×.
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "–"
	}
	return sig3(r) + "×"
}
