package app

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/allocator/allocator/internal/version"
)

func newVersionCommand(streams Streams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary (module version, VCS revision, Kubernetes API level)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			if output == "" {
				_, err := fmt.Fprintln(streams.Out, info.String())
				return err
			}
			if err := checkOutputFormat(output); err != nil {
				return err
			}
			return writeMachine(streams.Out, output, struct {
				version.Info
				Kubernetes any `json:"kubernetes"`
			}{info, info.Kubernetes()})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: empty for one line, or "+machineFormats)
	return cmd
}
