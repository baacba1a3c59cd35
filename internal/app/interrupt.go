package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// exitInterrupted is the exit code after SIGINT, as shells report 128+2.
const exitInterrupted = 130

// interrupted turns an error caused by ctx's cancellation (SIGINT or
// SIGTERM; cmd/allocator cancels the context on both) into a clean stop: it
// prints what was done and the command that resumes, and exits 130. Other
// errors pass through. done says what the run achieved and why stopping
// part-way is safe.
func interrupted(ctx context.Context, err error, streams Streams, rerun, done string) error {
	if err == nil || !errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	fmt.Fprintf(streams.Err, "interrupted: %s\nTo resume, run the same command again:\n  %s\n", done, rerun)
	return &exitError{code: exitInterrupted, msg: "interrupted"}
}

// secretFlags are never echoed back in the resume line.
var secretFlags = map[string]bool{"token": true, "password": true}

// rerunLine is the command line that repeats cmd with the flags given: the
// command path (`allocator migrate`, or `kubectl allocator migrate` as a
// plugin) and every flag that was set, in a form a shell takes back.
func rerunLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		value := "<hidden>"
		var values []string
		switch v := f.Value.(type) {
		case pflag.SliceValue:
			values = v.GetSlice()
		default:
			values = []string{f.Value.String()}
		}
		if f.Value.Type() == "stringArray" {
			for _, item := range values {
				if !secretFlags[f.Name] {
					value = item
				}
				parts = append(parts, "--"+f.Name+"="+shellQuote(value))
			}
			return
		}
		if !secretFlags[f.Name] {
			value = strings.Join(values, ",")
		}
		parts = append(parts, "--"+f.Name+"="+shellQuote(value))
	})
	return strings.Join(parts, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:,=@%+-]*$`)

func shellQuote(s string) string {
	if s != "" && shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isTerminal reports whether w is a terminal. (A character device is not
// enough: /dev/null is one.)
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressWriter is where repair prints a pass's progress: stderr with
// --progress or when stderr is a terminal, else nowhere.
func (o *repairOptions) progressWriter() io.Writer {
	if o.progress || isTerminal(o.stderr) {
		return o.stderr
	}
	return nil
}
