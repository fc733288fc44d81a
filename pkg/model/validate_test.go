package model

import (
	"slices"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
)

func TestCheckHeaderValue(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"", true},
		{"plain value", true},
		{"tab\tinside", true},
		{"100%%", true},
		{"%HOSTNAME%", true},
		{"prefix %HOSTNAME% suffix", true},
		{"%REQ(x-request-id)%", true},
		{"%START_TIME(%s.%3f)%", true},
		{"%%%DOWNSTREAM_REMOTE_ADDRESS%%%", true},
		{"100%", false},
		{"abc%123", false},
		{"%", false},
		{"%REQ(x-a%", false},
		{"line\nbreak", false},
		{"nul\x00", false},
		{"del\x7f", false},
	} {
		if got := checkHeaderValue(tc.v) == ""; got != tc.ok {
			t.Errorf("checkHeaderValue(%q) valid = %v, want %v (%s)", tc.v, got, tc.ok, checkHeaderValue(tc.v))
		}
	}
}

func TestCheckHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"*", true},
		{"web", true},
		{"web.shop.svc.cluster.local", true},
		{"*.example.com", true},
		{"under_score.example.com", true},
		{"10.0.0.1", true},
		{"fd00::1", true},
		{"", false},
		{"a b", false},
		{"a..b", false},
		{"web.", false},
		{"*example.com", false},
		{"web.*.com", false},
		{"x\nsplit", false},
	} {
		if got := checkHost(tc.host) == ""; got != tc.ok {
			t.Errorf("checkHost(%q) valid = %v, want %v (%s)", tc.host, got, tc.ok, checkHost(tc.host))
		}
	}
}

func TestCheckHeaderName(t *testing.T) {
	for name, ok := range map[string]bool{
		"x-request-id": true, ":authority": true, "X_Odd~Name!": true,
		"": false, ":": false, "bad header": false, "x\nsplit": false, "a:b": false, "é": false,
	} {
		if got := checkHeaderName(name) == ""; got != ok {
			t.Errorf("checkHeaderName(%q) valid = %v, want %v", name, got, ok)
		}
	}
}

func TestIgnoredHeaderOps(t *testing.T) {
	ops := func(set map[string]string, remove ...string) *networkingv1.Headers_HeaderOperations {
		return &networkingv1.Headers_HeaderOperations{Set: set, Remove: remove}
	}
	h := &networkingv1.HTTPRoute{
		Headers: &networkingv1.Headers{
			Request:  ops(map[string]string{":authority": "a", "host": "b", ":path": "/x", "x-ok": "1"}, ":method", "Host", "x-gone"),
			Response: ops(map[string]string{"host": "c", ":status": "200"}),
		},
		Route: []*networkingv1.HTTPRouteDestination{{Headers: &networkingv1.Headers{Request: ops(nil, ":scheme")}}},
	}
	want := []string{
		".headers.request.set[:path]: a proxy does not let config set it",
		".headers.request.remove[:method]: a proxy does not let config remove it",
		".headers.request.remove[Host]: a proxy does not let config remove it",
		".headers.response.set[:status]: a proxy does not let config set it",
		".headers.response.set[host]: a proxy does not let config set it",
		".route[0].headers.request.remove[:scheme]: a proxy does not let config remove it",
	}
	if got := ignoredHeaderOps(h); !slices.Equal(got, want) {
		t.Errorf("ignoredHeaderOps:\n got %q\nwant %q", got, want)
	}
}
