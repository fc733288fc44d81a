package svc_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/svc"
)

func TestEnv(t *testing.T) {
	const name = "PILOTWIRE_SVC_TEST_VALUE"
	type got struct {
		String   string
		Int      int
		Bool     bool
		Duration time.Duration
		List     []string
	}
	def := got{String: "def", Int: 7, Bool: true, Duration: time.Second, List: []string{"d"}}
	tests := []struct {
		name  string
		value *string // nil: unset
		want  got
	}{
		{name: "unset", want: def},
		{name: "empty", value: ptr(""), want: def},
		{name: "blanks", value: ptr(" , ,"), want: got{String: " , ,", Int: 7, Bool: true, Duration: time.Second, List: []string{"d"}}},
		{name: "invalid for all but string and list", value: ptr("x"), want: got{String: "x", Int: 7, Bool: true, Duration: time.Second, List: []string{"x"}}},
		{name: "int", value: ptr("42"), want: got{String: "42", Int: 42, Bool: true, Duration: time.Second, List: []string{"42"}}},
		{name: "bool", value: ptr("false"), want: got{String: "false", Int: 7, Bool: false, Duration: time.Second, List: []string{"false"}}},
		{name: "duration", value: ptr("250ms"), want: got{String: "250ms", Int: 7, Bool: true, Duration: 250 * time.Millisecond, List: []string{"250ms"}}},
		{name: "list", value: ptr(" a=/x , b=/y,,"), want: got{String: " a=/x , b=/y,,", Int: 7, Bool: true, Duration: time.Second, List: []string{"a=/x", "b=/y"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.value != nil {
				t.Setenv(name, *tc.value)
			}
			g := got{
				String:   svc.EnvString(name, def.String),
				Int:      svc.EnvInt(name, def.Int),
				Bool:     svc.EnvBool(name, def.Bool),
				Duration: svc.EnvDuration(name, def.Duration),
				List:     svc.EnvList(name, def.List),
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("env %s=%v (-want +got):\n%s", name, tc.value, diff)
			}
		})
	}
}

func ptr(s string) *string { return &s }

var commonEnv = []string{
	"PILOTWIRE_NATS_URL", "PILOTWIRE_PREFIX", "PILOTWIRE_HTTP_ADDR", "PILOTWIRE_LOG_LEVEL",
	"PILOTWIRE_LOG_FORMAT", "PILOTWIRE_REPLICAS", "ENABLE_PROFILING", "PILOTWIRE_DEBUG_ADDR",
	"PILOTWIRE_CHANGES_MAX_AGE", "PILOTWIRE_CHANGES_MAX_BYTES", "PILOTWIRE_DELIVERIES_MAX_AGE", "PILOTWIRE_DELIVERIES_MAX_BYTES",
}

// TestCommonFlags checks the common flags' three layers: DefaultCommon,
// then the environment, then the command line.
func TestCommonFlags(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want svc.Common
	}{
		{
			name: "defaults",
			want: svc.Common{NATSURL: "nats://127.0.0.1:4222", Prefix: "pw", HTTPAddr: "127.0.0.1:9999", DebugAddr: "127.0.0.1:10099", LogLevel: "info", LogFormat: "text", Replicas: 1, Profiling: true, DeliveriesMaxAge: 24 * time.Hour, DeliveriesMaxBytes: 1 << 30},
		},
		{
			name: "environment",
			env: map[string]string{
				"PILOTWIRE_NATS_URL": "nats://nats:4222", "PILOTWIRE_PREFIX": "mesh1", "PILOTWIRE_HTTP_ADDR": ":9000",
				"PILOTWIRE_LOG_LEVEL": "debug", "PILOTWIRE_LOG_FORMAT": "json", "PILOTWIRE_REPLICAS": "3", "ENABLE_PROFILING": "false",
				"PILOTWIRE_CHANGES_MAX_AGE": "720h", "PILOTWIRE_CHANGES_MAX_BYTES": "8589934592",
				"PILOTWIRE_DELIVERIES_MAX_AGE": "1h", "PILOTWIRE_DELIVERIES_MAX_BYTES": "-1",
			},
			want: svc.Common{
				NATSURL: "nats://nats:4222", Prefix: "mesh1", HTTPAddr: ":9000", DebugAddr: "127.0.0.1:10099", LogLevel: "debug", LogFormat: "json", Replicas: 3, Profiling: false,
				ChangesMaxAge: 720 * time.Hour, ChangesMaxBytes: 8 << 30, DeliveriesMaxAge: time.Hour, DeliveriesMaxBytes: -1,
			},
		},
		{
			name: "flags over environment",
			env:  map[string]string{"PILOTWIRE_PREFIX": "mesh1", "PILOTWIRE_REPLICAS": "3"},
			args: []string{"--prefix", "mesh2", "--replicas=5", "--enable-profiling=false"},
			want: svc.Common{NATSURL: "nats://127.0.0.1:4222", Prefix: "mesh2", HTTPAddr: "127.0.0.1:9999", DebugAddr: "127.0.0.1:10099", LogLevel: "info", LogFormat: "text", Replicas: 5, Profiling: false, DeliveriesMaxAge: 24 * time.Hour, DeliveriesMaxBytes: 1 << 30},
		},
		{
			name: "invalid environment keeps the default",
			env:  map[string]string{"PILOTWIRE_REPLICAS": "three", "ENABLE_PROFILING": "maybe"},
			want: svc.Common{NATSURL: "nats://127.0.0.1:4222", Prefix: "pw", HTTPAddr: "127.0.0.1:9999", DebugAddr: "127.0.0.1:10099", LogLevel: "info", LogFormat: "text", Replicas: 1, Profiling: true, DeliveriesMaxAge: 24 * time.Hour, DeliveriesMaxBytes: 1 << 30},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range commonEnv { // empty is unset
				t.Setenv(k, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var c svc.Common
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			c.AddFlags(fs, svc.DefaultCommon("127.0.0.1:9999"))
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, c); diff != "" {
				t.Errorf("common config (-want +got):\n%s", diff)
			}
		})
	}
}
