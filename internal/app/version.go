package app

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/allocator/allocator/pkg/version"
)

func newVersionCommand(streams Streams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary (module version, VCS revision, Kubernetes API level)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "":
				_, err := fmt.Fprintln(streams.Out, info.String())
				return err
			case "json":
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					version.Info
					Kubernetes any `json:"kubernetes"`
				}{info, info.Kubernetes()})
			default:
				return fmt.Errorf("unknown output format %q: use json or leave it empty", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: empty for one line, or json")
	return cmd
}
