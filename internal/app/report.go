package app

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/allocator/allocator/pkg/repair"
)

// exitError carries a process exit code other than 1 (problems left: 2).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// errProblemsLeft makes the process exit 2: the job ran, the cluster is not
// consistent.
func errProblemsLeft(n int) error {
	return &exitError{code: 2, msg: fmt.Sprintf("%d problems left", n)}
}

func checkOutputFormat(format string) error {
	switch format {
	case "table", "json":
		return nil
	default:
		return fmt.Errorf("unknown output format %q: use table or json", format)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeProblems prints problems as a table, then the summary line.
func writeProblems(w io.Writer, problems []repair.Problem, summary string) error {
	if len(problems) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tIP\tSERVICE\tFIXED\tMESSAGE")
		for _, p := range problems {
			svc := p.Service
			if svc == "" {
				svc = "<none>"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", p.Type, p.IP, svc, p.Fixed, p.Message)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, summary)
	return err
}
