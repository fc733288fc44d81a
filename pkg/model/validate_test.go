package model

import "testing"

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
