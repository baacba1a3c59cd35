package app

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/component-base/version"
)

func newVersionCommand(streams Streams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "":
				_, err := fmt.Fprintf(streams.Out, "allocator %s (%s, %s)\n", info.GitVersion, info.GoVersion, info.Platform)
				return err
			case "json":
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			default:
				return fmt.Errorf("unknown output format %q: use json or leave it empty", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: empty for one line, or json")
	return cmd
}
