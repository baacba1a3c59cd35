package app

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

func TestErrProblemsLeft(t *testing.T) {
	for n, want := range map[int]string{1: "1 problem left", 2: "2 problems left", 0: "0 problems left"} {
		if got := errProblemsLeft(n).Error(); got != want {
			t.Errorf("errProblemsLeft(%d) = %q, want %q", n, got, want)
		}
	}
}

var leak = report.Problem{Type: report.TypeLeak, IP: "10.0.0.200",
	Message: "Cluster IP [IPv4]:10.0.0.200 appears to have leaked: cleaning up"}
var notAllocated = report.Problem{Type: report.TypeRepair, IP: "10.0.0.50", Service: "default/planted",
	Message: "Cluster IP [IPv4]:10.0.0.50 is not allocated; repairing"}
var outOfScope = report.Problem{Type: report.TypeOutOfScope, IP: "10.1.0.3", Service: "team-a/web",
	Message: "Cluster IP [IPv4]: 10.1.0.3 is outside the ServiceCIDRs this Service's scope allows", Clear: "kubectl label namespace team-a ..."}

func TestRepairTable(t *testing.T) {
	tests := []struct {
		name   string
		rep    report.Report
		want   []string // lines or fragments expected, in order
		absent []string
	}{{
		name: "dry run says would",
		rep: report.Report{Model: "bitmap", DryRun: true, Services: 3, Allocated: 2,
			Problems: []report.Problem{leak, notAllocated}, Duration: 12 * time.Millisecond},
		want: []string{"appears to have leaked: would clean up", "is not allocated; would repair",
			"bitmap repair (dry run, nothing changed): 3 services, 2 allocated, 2 problems (2 would need a fix), 12ms"},
		absent: []string{": cleaning up", "; repairing", "writes"},
	}, {
		name: "real pass keeps upstream's texts",
		rep: report.Report{Model: "bitmap", Services: 1, Allocated: 2, Writes: 1,
			Problems: []report.Problem{{Type: leak.Type, IP: leak.IP, Message: leak.Message, Fixed: true}}, Duration: 3 * time.Millisecond},
		want: []string{"appears to have leaked: cleaning up",
			"bitmap repair: 1 service, 2 allocated, 1 problem (0 unresolved), 1 write, 3ms"},
		absent: []string{"would"},
	}, {
		name: "left by design: the hint, counted apart",
		rep: report.Report{Model: "ipaddress", Services: 2, Allocated: 2,
			Problems: []report.Problem{outOfScope, {Type: report.TypeLeak, IP: "10.0.0.9", Foreign: true, Message: "left untouched"}}},
		want: []string{"outOfScope", "scope allows [left by design; to clear: kubectl label namespace team-a ...]",
			"leak", "left untouched [left by design]",
			"ipaddress repair: 2 services, 2 allocated, 2 problems (0 unresolved, 2 left by design), 0 writes"},
	}, {
		name: "dry run: what needs a fix and what is left by design",
		rep:  report.Report{Model: "ipaddress", DryRun: true, Problems: []report.Problem{outOfScope, notAllocated}},
		want: []string{"(dry run, nothing changed): 0 services, 0 allocated, 2 problems (1 would need a fix, 1 left by design), 0s"},
	}, {
		name: "dry run with only what is left by design",
		rep:  report.Report{Model: "ipaddress", DryRun: true, Problems: []report.Problem{outOfScope}},
		want: []string{"1 problem (1 left by design), 0s"},
	}, {
		name:   "consistent",
		rep:    report.Report{Model: "ipaddress", Services: 4, Allocated: 4},
		want:   []string{"ipaddress repair: 4 services, 4 allocated, 0 problems (0 unresolved), 0 writes, 0s"},
		absent: []string{"TYPE"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printRepair(Streams{Out: &out}, "table", &tt.rep); err != nil {
				t.Fatal(err)
			}
			checkText(t, out.String(), tt.want, tt.absent)
			if tt.rep.Problems != nil && !slices.Contains([]string{leak.Message, notAllocated.Message, outOfScope.Message}, tt.rep.Problems[0].Message) {
				t.Errorf("rendering modified the report: %q", tt.rep.Problems[0].Message)
			}
		})
	}
}

func checkText(t *testing.T, got string, want, absent []string) {
	t.Helper()
	rest := got
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("output lacks %q (in order):\n%s", w, got)
			continue
		}
		rest = rest[i+len(w):]
	}
	for _, a := range absent {
		if strings.Contains(got, a) {
			t.Errorf("output has %q:\n%s", a, got)
		}
	}
}

func TestRepairJSON(t *testing.T) {
	tests := []struct {
		name  string
		rep   report.Report
		check func(t *testing.T, m map[string]any)
	}{{
		name: "no problems is an empty list, duration in seconds",
		rep:  report.Report{Model: "bitmap", Duration: 12 * time.Millisecond},
		check: func(t *testing.T, m map[string]any) {
			if p, ok := m["problems"].([]any); !ok || len(p) != 0 {
				t.Errorf("problems = %#v, want []", m["problems"])
			}
			if m["durationSeconds"] != 0.012 {
				t.Errorf("durationSeconds = %v, want 0.012", m["durationSeconds"])
			}
			if _, ok := m["duration"]; ok {
				t.Errorf("unit-less duration still present: %v", m["duration"])
			}
		},
	}, {
		name: "dry-run wording",
		rep:  report.Report{Model: "bitmap", DryRun: true, Problems: []report.Problem{leak}},
		check: func(t *testing.T, m map[string]any) {
			msg := m["problems"].([]any)[0].(map[string]any)["message"]
			if msg != "Cluster IP [IPv4]:10.0.0.200 appears to have leaked: would clean up" {
				t.Errorf("message = %q", msg)
			}
			if m["unresolved"] != 1.0 {
				t.Errorf("unresolved = %v", m["unresolved"])
			}
		},
	}, {
		name: "left by design: counted apart, with what clears it",
		rep:  report.Report{Model: "ipaddress", Problems: []report.Problem{outOfScope, leak}},
		check: func(t *testing.T, m map[string]any) {
			if m["unresolved"] != 1.0 || m["byDesign"] != 1.0 {
				t.Errorf("unresolved = %v, byDesign = %v; want 1 and 1", m["unresolved"], m["byDesign"])
			}
			if clear := m["problems"].([]any)[0].(map[string]any)["clear"]; clear != outOfScope.Clear {
				t.Errorf("clear = %v, want %q", clear, outOfScope.Clear)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printRepair(Streams{Out: &out}, "json", &tt.rep); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), `"problems": [`) {
				t.Errorf("problems not a list:\n%s", out.String())
			}
			var m map[string]any
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			tt.check(t, m)
		})
	}
}

func TestRepairPassTimestamp(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 5, 6, 0, time.UTC)
	rep := &report.Report{Model: "bitmap"}
	var out bytes.Buffer
	if err := printRepairPass(Streams{Out: &out}, "table", rep, at); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "2026-11-23T14:05:06Z bitmap repair: ") {
		t.Errorf("table pass has no timestamp: %q", out.String())
	}
	out.Reset()
	if err := printRepairPass(Streams{Out: &out}, "json", rep, at); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"time": "2026-11-23T14:05:06Z"`) {
		t.Errorf("JSON pass has no time: %s", out.String())
	}
}

func TestMigrationRendering(t *testing.T) {
	tests := []struct {
		name   string
		rep    iprepair.MigrationReport
		format string
		want   []string
		absent []string
	}{{
		name:   "dry run table",
		rep:    iprepair.MigrationReport{Direction: iprepair.ToBitmap, DryRun: true, Services: 5, Addresses: 5, Created: 5, Duration: 12 * time.Millisecond},
		format: "table",
		want:   []string{"(dry run, nothing changed; pass --dry-run=false to migrate): 5 services, 5 addresses (would create 5, 0 already present), 0 problems, 12ms"},
		absent: []string{"5 created", "verified"},
	}, {
		name:   "real run table",
		rep:    iprepair.MigrationReport{Direction: iprepair.ToIPAddress, Services: 1, Addresses: 1, Created: 1, Verified: true, Duration: time.Second},
		format: "table",
		want:   []string{": 1 service, 1 address (1 created, 0 already present), 0 problems, verified=true, 1s"},
		absent: []string{"would"},
	}, {
		name:   "json",
		rep:    iprepair.MigrationReport{Direction: iprepair.ToBitmap, DryRun: true, Duration: 1500 * time.Millisecond},
		format: "json",
		want:   []string{`"problems": []`, `"durationSeconds": 1.5`},
		absent: []string{`null`, `"duration":`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			var err error
			if tt.format == "json" {
				err = writeMachine(&out, "json", newMigrationJSON(&tt.rep))
			} else {
				err = writeProblems(&out, tt.rep.Problems, tt.rep.DryRun, migrationSummary(&tt.rep))
			}
			if err != nil {
				t.Fatal(err)
			}
			checkText(t, out.String(), tt.want, tt.absent)
		})
	}
}
