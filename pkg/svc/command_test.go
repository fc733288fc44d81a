package svc_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/svc"
)

// testConfig is a service configuration as each service writes one.
type testConfig struct {
	svc.Common
	Widgets  int
	validate error
}

func (c *testConfig) AddFlags(fs *pflag.FlagSet) {
	c.Common.AddFlags(fs, svc.DefaultCommon("127.0.0.1:9999"))
	fs.IntVar(&c.Widgets, "widgets", svc.EnvInt("PILOTWIRE_TEST_WIDGETS", 3), "widgets (env PILOTWIRE_TEST_WIDGETS)")
}

func (c *testConfig) Validate() error { return c.validate }

var (
	_ svc.Config    = (*testConfig)(nil)
	_ svc.Validator = (*testConfig)(nil)
)

func TestCommandListsEveryFlag(t *testing.T) {
	cfg := &testConfig{}
	cmd := svc.Command("test", "a test service", cfg, func(context.Context, svc.Deps) error { return nil })
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.ExecuteContext(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--nats-url", "--prefix", "--http-addr", `(default "127.0.0.1:9999")`, "--log-level", "--log-format",
		"--enable-profiling", "--replicas", "--widgets", "env PILOTWIRE_TEST_WIDGETS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %s:\n%s", want, out.String())
		}
	}
}

func TestCommandValidatesBeforeServing(t *testing.T) {
	bad := errors.New("bad widgets")
	cfg := &testConfig{validate: bad}
	cmd := svc.Command("test", "a test service", cfg, func(context.Context, svc.Deps) error {
		t.Error("run called with an invalid config")
		return nil
	})
	// No NATS is there: the command must fail before trying it.
	cmd.SetArgs([]string{"--nats-url", "nats://127.0.0.1:1", "--widgets", "9"})
	if err := cmd.ExecuteContext(testCtx(t)); !errors.Is(err, bad) {
		t.Errorf("command = %v, want %v", err, bad)
	}
	if cfg.Widgets != 9 || cfg.NATSURL != "nats://127.0.0.1:1" {
		t.Errorf("flags not parsed into the config: %+v", cfg)
	}
}

// localConfig is the configuration of a service that uses no NATS.
type localConfig struct {
	svc.Common
}

func (c *localConfig) AddFlags(fs *pflag.FlagSet) {
	c.Common.AddLocalFlags(fs, svc.DefaultCommon("127.0.0.1:9998"))
}

func TestLocalCommandHasNoNATSFlags(t *testing.T) {
	cmd := svc.LocalCommand("test", "a service without NATS", &localConfig{}, func(context.Context, svc.Deps) error { return nil })
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.ExecuteContext(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{"--http-addr", `(default "127.0.0.1:9998")`, "--debug-addr", "--log-level", "--log-format", "--enable-profiling"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %s:\n%s", want, help)
		}
	}
	for _, unwanted := range []string{"--nats-", "--prefix", "--replicas", "--changes-max"} {
		if strings.Contains(help, unwanted) {
			t.Errorf("--help of a service without NATS has %s:\n%s", unwanted, help)
		}
	}
}
