// Package app is the allocator command line: a cobra command tree that takes
// its arguments and streams explicitly, so tests run it in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Streams are the standard streams a command reads and writes.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Run executes the command line args and returns the process exit code.
func Run(ctx context.Context, args []string, streams Streams) int {
	root := NewRootCommand(streams)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(streams.Err, "error: %v\n", err)
		var exit *exitError
		if errors.As(err, &exit) {
			return exit.code
		}
		return 1
	}
	return 0
}

// NewRootCommand builds the allocator command tree.
func NewRootCommand(streams Streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "allocator",
		Short:         "Kubernetes-compatible ClusterIP allocator: API server, repair and migration",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	root.AddCommand(newVersionCommand(streams))
	root.AddCommand(newServeCommand(streams))
	root.AddCommand(newRepairCommand(streams))
	root.AddCommand(newMigrateCommand(streams))
	root.AddCommand(newTransitionCommand(streams))
	return root
}
