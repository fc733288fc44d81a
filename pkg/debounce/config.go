package debounce

import "time"

// Defaults, the same as Istio's.
const (
	// DefaultDebounceAfter is the quiet window (PILOT_DEBOUNCE_AFTER).
	DefaultDebounceAfter = 100 * time.Millisecond
	// DefaultDebounceMax bounds how long a change can be held back
	// (PILOT_DEBOUNCE_MAX).
	DefaultDebounceMax = 10 * time.Second
	// DefaultEnableEDSDebounce says whether endpoint-only changes are
	// debounced too (PILOT_ENABLE_EDS_DEBOUNCE).
	DefaultEnableEDSDebounce = true
	// DefaultMaxBypassRanges bounds the fragmentation of a bypass request
	// (see Config.MaxBypassRanges).
	DefaultMaxBypassRanges = 64
)

// Config holds the debounce windows. Start from DefaultConfig: the zero
// value of EnableEDSDebounce (false) is not the default.
type Config struct {
	// DebounceAfter is the quiet window: a pending request is due once no
	// event arrived for this long. Zero or negative means the default.
	DebounceAfter time.Duration
	// DebounceMax is the longest a pending request waits after its first
	// event, even if events keep arriving. Zero or negative means the
	// default.
	DebounceMax time.Duration
	// EnableEDSDebounce debounces endpoint-only events (Full false) like
	// every other event. When false they bypass the windows (see the
	// package comment).
	EnableEDSDebounce bool
	// MaxBypassRanges bounds how fragmented a bypass request may be: once
	// the pending bypass events' sequences break into more than this many
	// runs (the sequences between them pending in the debounced batch),
	// the bypass batch goes out together with the debounced one, due or
	// not, as one wider request. Zero or negative means the default.
	MaxBypassRanges int
}

// DefaultConfig returns Istio's defaults: 100ms, 10s, EDS debounce on.
func DefaultConfig() Config {
	return Config{
		DebounceAfter:     DefaultDebounceAfter,
		DebounceMax:       DefaultDebounceMax,
		EnableEDSDebounce: DefaultEnableEDSDebounce,
		MaxBypassRanges:   DefaultMaxBypassRanges,
	}
}

// withDefaults replaces unset durations with the defaults.
func (c Config) withDefaults() Config {
	if c.DebounceAfter <= 0 {
		c.DebounceAfter = DefaultDebounceAfter
	}
	if c.DebounceMax <= 0 {
		c.DebounceMax = DefaultDebounceMax
	}
	if c.MaxBypassRanges <= 0 {
		c.MaxBypassRanges = DefaultMaxBypassRanges
	}
	return c
}
