package svc

import (
	"context"

	"github.com/spf13/cobra"
)

// Command builds a service binary's command: the common flags (with the
// service's default --http-addr) and a RunE that runs run inside Serve.
// validate, if set, checks the configuration before anything starts. The
// caller adds its own flags to cmd.Flags().
func Command(use, short, defaultHTTP string, common *Common, validate func() error, run func(ctx context.Context, d Deps) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:           use,
		Short:         short,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true, // Main prints the error
		RunE: func(cmd *cobra.Command, _ []string) error {
			if validate != nil {
				if err := validate(); err != nil {
					return err
				}
			}
			return Serve(cmd.Context(), *common, use, run)
		},
	}
	common.AddFlags(cmd.Flags(), defaultHTTP)
	return cmd
}
