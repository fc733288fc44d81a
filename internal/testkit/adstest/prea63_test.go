//lint:file-ignore SA1019 pre-A63 gRPC clients read only the deprecated fields, which these cases hold

package adstest

import (
	"errors"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestPreA63HeaderMatcher: the pre-A63 reading accepts the HeaderMatcher's
// own fields and refuses string_match and an unset matcher with the
// client's words, and a regex or range the client cannot use.
func TestPreA63HeaderMatcher(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h       *route.HeaderMatcher
		wantErr bool
		words   bool // ErrPreA63HeaderMatcher
	}{
		{name: "exact", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_ExactMatch{ExactMatch: "a"}}},
		{name: "prefix", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_PrefixMatch{PrefixMatch: "a"}}},
		{name: "suffix", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_SuffixMatch{SuffixMatch: "a"}}},
		{name: "contains", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_ContainsMatch{ContainsMatch: "a"}}},
		{name: "present", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}}},
		{name: "regex", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcher.RegexMatcher{Regex: "a.*"}}}},
		{name: "range", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_RangeMatch{RangeMatch: &typev3.Int64Range{Start: 1, End: 5}}}},
		{name: "bad regex", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcher.RegexMatcher{Regex: "(("}}}, wantErr: true},
		{name: "backwards range", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_RangeMatch{RangeMatch: &typev3.Int64Range{Start: 5, End: 1}}}, wantErr: true},
		{name: "string match", h: &route.HeaderMatcher{Name: "x-h", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "a"}}}}, wantErr: true, words: true},
		{name: "unset", h: &route.HeaderMatcher{Name: "x-h"}, wantErr: true, words: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := PreA63HeaderMatcher(tc.h)
			if (err != nil) != tc.wantErr || errors.Is(err, ErrPreA63HeaderMatcher) != tc.words {
				t.Errorf("PreA63HeaderMatcher(%v) = %v, want error %v (the client's words: %v)", tc.h, err, tc.wantErr, tc.words)
			}
		})
	}
}
