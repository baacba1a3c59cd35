package app

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
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
	return &exitError{code: 2, msg: plural(n, "problem", "problems") + " left"}
}

// plural returns "1 problem", "2 problems", "0 problems".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// dryRunWording turns the present tense of the repair messages (upstream's
// event texts, written for a pass that acts) into what a dry run would do:
// a dry run that printed "cleaning up" next to FIXED false read as if it had
// changed the cluster.
var dryRunWording = strings.NewReplacer(
	"cleaning up", "would clean up",
	"repairing", "would repair",
	"it is freed", "it would be freed",
	"it is deleted", "it would be deleted",
	"it is re-created", "it would be re-created",
)

// problemsForOutput returns the problems as the report should show them:
// never nil (JSON "problems": [] rather than null), and in dry-run wording
// when dryRun is set. The input is not modified.
func problemsForOutput(problems []report.Problem, dryRun bool) []report.Problem {
	out := make([]report.Problem, len(problems))
	copy(out, problems)
	if dryRun {
		for i := range out {
			out[i].Message = dryRunWording.Replace(out[i].Message)
		}
	}
	return out
}

// seconds is a duration in seconds, rounded to the millisecond, for JSON
// ("durationSeconds": 0.012): a bare time.Duration prints nanoseconds with no
// unit.
func seconds(d time.Duration) float64 {
	return d.Round(time.Millisecond).Seconds()
}

// repairJSON is the JSON form of a repair report.
type repairJSON struct {
	Model           string           `json:"model"`
	DryRun          bool             `json:"dryRun"`
	Services        int              `json:"services"`
	Allocated       int              `json:"allocated"`
	Writes          int              `json:"writes"`
	Problems        []report.Problem `json:"problems"`
	Unresolved      int              `json:"unresolved"` // the problems that make the job exit 2
	ByDesign        int              `json:"byDesign"`   // the problems left by design, each with its "clear"
	DurationSeconds float64          `json:"durationSeconds"`
	// Time is when the pass ended (RFC 3339), set by repair --interval.
	Time string `json:"time,omitempty"`
}

func newRepairJSON(r *report.Report) repairJSON {
	return repairJSON{
		Model: r.Subject(), DryRun: r.DryRun, Services: r.Services, Allocated: r.Allocated, Writes: r.Writes,
		Problems: problemsForOutput(r.Problems, r.DryRun), Unresolved: r.Unresolved(), ByDesign: r.LeftByDesign(), DurationSeconds: seconds(r.Duration),
	}
}

// repairSummary is the closing line of a repair report in table form.
func repairSummary(r *report.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s repair", r.Subject())
	if r.DryRun {
		b.WriteString(" (dry run, nothing changed)")
	}
	fmt.Fprintf(&b, ": %s, %d allocated, %s", plural(r.Services, "service", "services"), r.Allocated,
		plural(len(r.Problems), "problem", "problems"))
	var left []string
	if !r.DryRun {
		left = append(left, fmt.Sprintf("%d unresolved", r.Unresolved()))
	} else if n := r.Unresolved(); n > 0 {
		left = append(left, fmt.Sprintf("%d would need a fix", n))
	}
	if n := r.LeftByDesign(); n > 0 {
		left = append(left, fmt.Sprintf("%d left by design", n))
	}
	if len(left) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(left, ", "))
	}
	if !r.DryRun {
		fmt.Fprintf(&b, ", %s", plural(r.Writes, "write", "writes"))
	}
	fmt.Fprintf(&b, ", %v", r.Duration.Round(time.Millisecond))
	return b.String()
}

// migrationJSON is the JSON form of a migration report.
type migrationJSON struct {
	Direction       string           `json:"direction"`
	DryRun          bool             `json:"dryRun"`
	Services        int              `json:"services"`
	Addresses       int              `json:"addresses"`
	Created         int              `json:"created"`
	Present         int              `json:"present"`
	Problems        []report.Problem `json:"problems"`
	Verified        bool             `json:"verified"`
	DurationSeconds float64          `json:"durationSeconds"`
}

func newMigrationJSON(r *iprepair.MigrationReport) migrationJSON {
	return migrationJSON{
		Direction: r.Direction, DryRun: r.DryRun, Services: r.Services, Addresses: r.Addresses,
		Created: r.Created, Present: r.Present, Problems: problemsForOutput(r.Problems, r.DryRun),
		Verified: r.Verified, DurationSeconds: seconds(r.Duration),
	}
}

// migrationSummary is the closing line of a migration report in table form.
func migrationSummary(r *iprepair.MigrationReport) string {
	var b strings.Builder
	b.WriteString(r.Direction)
	if r.DryRun {
		b.WriteString(" (dry run, nothing changed; pass --dry-run=false to migrate)")
	}
	fmt.Fprintf(&b, ": %s, %s (", plural(r.Services, "service", "services"), plural(r.Addresses, "address", "addresses"))
	if r.DryRun {
		fmt.Fprintf(&b, "would create %d", r.Created)
	} else {
		fmt.Fprintf(&b, "%d created", r.Created)
	}
	fmt.Fprintf(&b, ", %d already present), %s", r.Present, plural(len(r.Problems), "problem", "problems"))
	if !r.DryRun {
		fmt.Fprintf(&b, ", verified=%v", r.Verified)
	}
	fmt.Fprintf(&b, ", %v", r.Duration.Round(time.Millisecond))
	return b.String()
}

// writeProblems prints problems as a table, then the summary line.
func writeProblems(w io.Writer, problems []report.Problem, dryRun bool, summary string) error {
	if len(problems) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tIP\tSERVICE\tFIXED\tMESSAGE")
		for _, p := range problemsForOutput(problems, dryRun) {
			svc := p.Service
			if svc == "" {
				svc = "<none>"
			}
			what := p.IP
			if p.Resource != "" {
				what = p.Resource + ":" + p.IP // a node port, not an address
			}
			msg := p.Message
			if p.Standing() == report.ByDesign {
				msg += " [left by design"
				if p.Clear != "" {
					msg += "; to clear: " + p.Clear
				}
				msg += "]"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", p.Type, what, svc, p.Fixed, msg)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, summary)
	return err
}
