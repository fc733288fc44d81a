package svc

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Config is a service's configuration as its command sees it. Each service
// defines it the same way, in its config.go: a struct embedding Common, a
// DefaultConfig function, and AddFlags.
type Config interface {
	// CommonConfig is the part every service shares (promoted from Common).
	CommonConfig() *Common
	// AddFlags registers every flag of the service, the common ones
	// included, each defaulting to the service's DefaultConfig value
	// unless its environment variable is set.
	AddFlags(fs *pflag.FlagSet)
}

// Validator is a Config that checks itself before anything starts.
type Validator interface {
	Validate() error
}

// Command builds a service binary's command: cfg's flags, and a RunE that
// validates cfg (if it is a Validator) and runs run inside Serve.
func Command(use, short string, cfg Config, run func(ctx context.Context, d Deps) error) *cobra.Command {
	return command(use, short, cfg, Serve, run)
}

// LocalCommand is Command for a service that uses no NATS: run runs
// inside ServeLocal. Its config registers the common flags with
// Common.AddLocalFlags.
func LocalCommand(use, short string, cfg Config, run func(ctx context.Context, d Deps) error) *cobra.Command {
	return command(use, short, cfg, ServeLocal, run)
}

type serveFunc func(ctx context.Context, c Common, component string, run func(ctx context.Context, d Deps) error) error

func command(use, short string, cfg Config, serve serveFunc, run func(ctx context.Context, d Deps) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:           use,
		Short:         short,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true, // Main prints the error
		RunE: func(cmd *cobra.Command, _ []string) error {
			if v, ok := cfg.(Validator); ok {
				if err := v.Validate(); err != nil {
					return err
				}
			}
			return serve(cmd.Context(), *cfg.CommonConfig(), use, run)
		},
	}
	cfg.AddFlags(cmd.Flags())
	return cmd
}
