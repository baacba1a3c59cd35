// Package app is the allocator command line: a cobra command tree that takes
// its arguments and streams explicitly, so tests run it in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"github.com/allocator/allocator/internal/version"
)

// Streams are the standard streams a command reads and writes.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// PluginName is the file name under which kubectl finds the binary as a
// plugin (`kubectl allocator ...`).
const PluginName = "kubectl-allocator"

// CompletionName is the file name under which kubectl finds the plugin's
// shell completion (`kubectl allocator <TAB>`): kubectl runs it with the
// words after `kubectl allocator`, the last one being completed, and reads
// cobra's completion answer.
const CompletionName = "kubectl_complete-allocator"

// Main runs the process's command line argv (argv[0] included) and returns
// its exit code. Installed or linked as kubectl-allocator, the binary is a
// kubectl plugin: kubectl runs it with the words after `kubectl allocator`,
// and it takes kubectl's connection flags (--kubeconfig, --context, -n, ...).
// Linked as kubectl_complete-allocator, it answers the plugin's completions.
func Main(ctx context.Context, argv []string, streams Streams) int {
	plugin := false
	if len(argv) > 0 {
		name := strings.TrimSuffix(filepath.Base(argv[0]), ".exe")
		plugin = name == PluginName || name == CompletionName
		argv = argv[1:]
		if name == CompletionName {
			argv = append([]string{cobra.ShellCompRequestCmd}, argv...)
		}
	}
	return run(ctx, newRootCommand(streams, plugin), argv, streams)
}

// Run executes the command line args and returns the process exit code.
func Run(ctx context.Context, args []string, streams Streams) int {
	return run(ctx, NewRootCommand(streams), args, streams)
}

func run(ctx context.Context, root *cobra.Command, args []string, streams Streams) int {
	root.SetArgs(args)
	defer logs.FlushLogs()
	if cmd, err := root.ExecuteContextC(ctx); err != nil {
		fmt.Fprintf(streams.Err, "error: %v\n", err)
		if isUsageError(err) {
			fmt.Fprintf(streams.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		var exit *exitError
		if errors.As(err, &exit) {
			return exit.code
		}
		return 1
	}
	return 0
}

// NewRootCommand builds the allocator command tree.
func NewRootCommand(streams Streams) *cobra.Command { return newRootCommand(streams, false) }

// newRootCommand builds the command tree; as a kubectl plugin it holds the
// commands that work on a cluster (status, repair, migrate, renumber) and version, with
// kubectl's connection flags, and help names it `kubectl allocator`.
func newRootCommand(streams Streams, plugin bool) *cobra.Command {
	root := &cobra.Command{
		Use:           "allocator",
		Short:         "Kubernetes-compatible ClusterIP allocator: API server, repair and migration",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if plugin {
		root.Short = "ClusterIP allocation status, repair and migration (kubectl plugin)"
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl allocator"}
	}
	// --version prints what `allocator version` prints.
	root.Version = version.Get().String()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	// -v, --vmodule, --logging-format (text or json) as every Kubernetes
	// component; applied once the flags are parsed. Without them -v was
	// refused ("unknown shorthand flag: 'v'").
	logging := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(logging, root.PersistentFlags())
	// The [Alpha] logging flags need a feature gate this binary has no
	// --feature-gates flag for: hidden rather than offered and refused.
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if strings.HasPrefix(f.Usage, "[Alpha]") {
			f.Hidden = true
		}
	})
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := logsapi.ValidateAndApply(logging, nil); err != nil {
			return &usageError{fmt.Errorf("logging options: %w", err)}
		}
		return nil
	}
	root.AddCommand(newVersionCommand(streams))
	root.AddCommand(newStatusCommand(streams, plugin))
	root.AddCommand(newRepairCommand(streams, plugin))
	root.AddCommand(newMigrateCommand(streams, plugin))
	root.AddCommand(newRenumberCommand(streams, plugin))
	if !plugin {
		root.AddCommand(newServeCommand(streams))
		root.AddCommand(newTransitionCommand(streams))
		root.AddCommand(newWebhookCommand(streams))
	}
	return root
}

// usageError is a command line the commands cannot parse (a bad flag).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// isUsageError reports whether err means the command line was wrong, so the
// user gets a pointer to --help: a bad flag, or an unknown command (cobra
// reports those as plain errors starting "unknown command").
func isUsageError(err error) bool {
	var u *usageError
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command")
}
