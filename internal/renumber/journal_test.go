package renumber

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func deleting(name, uid string) Entry {
	s := svc("a", name, corev1.ServiceTypeClusterIP)
	return Entry{Op: OpDeleting, Namespace: "a", Name: name, OldUID: typesUID(uid), Service: &s,
		ClusterIPs: []string{"10.1.0.5", "fd00:96::5"}, Moved: []string{"10.1.0.5"}}
}

func done(name, uid string) Entry {
	return Entry{Op: OpDone, Namespace: "a", Name: name, OldUID: typesUID(uid), NewUID: "new"}
}

// TestJournal: an entry is pending from its "deleting" line until a "done"
// line for the same old UID; the state survives a reopen; a last line cut
// short by a kill is ignored and the next record starts on a line of its
// own; Close removes the file only when nothing is pending.
func TestJournal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		records     [][]Entry // one Record call each
		tail        string    // bytes appended after the records, as a kill leaves them
		wantPending []string
	}{
		{name: "empty"},
		{name: "deleted, not re-created", records: [][]Entry{{deleting("x", "1"), deleting("y", "2")}}, wantPending: []string{"a/x", "a/y"}},
		{name: "re-created", records: [][]Entry{{deleting("x", "1"), deleting("y", "2")}, {done("x", "1")}}, wantPending: []string{"a/y"}},
		{name: "done for another UID settles nothing", records: [][]Entry{{deleting("x", "1")}, {done("x", "9")}}, wantPending: []string{"a/x"}},
		{name: "moved twice", records: [][]Entry{{deleting("x", "1")}, {done("x", "1")}, {deleting("x", "2")}}, wantPending: []string{"a/x"}},
		{name: "cut short", records: [][]Entry{{deleting("x", "1")}}, tail: `{"op":"deleting","namespace":"a","na`, wantPending: []string{"a/x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "j")
			j, err := OpenJournal(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tc.records {
				if err := j.Record(r...); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.tail != "" {
				f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteString(tc.tail)
				f.Close()
			}
			read, err := ReadJournal(path)
			if err != nil {
				t.Fatal(err)
			}
			j, err = OpenJournal(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantPending, keys(j.Pending())); diff != "" {
				t.Errorf("pending after reopen (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPending, keys(read)); diff != "" {
				t.Errorf("ReadJournal (-want +got):\n%s", diff)
			}
			// Settle everything: the file goes.
			for _, e := range j.Pending() {
				if err := j.Record(done(e.Name, string(e.OldUID))); err != nil {
					t.Fatal(err)
				}
			}
			if removed, err := j.Close(); err != nil || !removed {
				t.Errorf("Close with nothing pending: removed %v, error %v", removed, err)
			}
		})
	}
}

func TestReadJournalMissing(t *testing.T) {
	t.Parallel()
	got, err := ReadJournal(filepath.Join(t.TempDir(), "none"))
	if err != nil || len(got) != 0 {
		t.Errorf("ReadJournal of a missing file: %v, %v; want nothing", got, err)
	}
}

// TestEntryCandidate: an entry rebuilds the Candidate it was written for,
// so a resumed run can ask for other addresses.
func TestEntryCandidate(t *testing.T) {
	t.Parallel()
	c := deleting("x", "1").Candidate()
	a := netip.MustParseAddr
	if c.Service.UID != "1" || c.Service.Spec.ClusterIP != "10.1.0.5" || len(c.Moved) != 1 || c.Moved[0] != a("10.1.0.5") ||
		len(c.Kept) != 1 || c.Kept[0] != a("fd00:96::5") || !NeedsPrimaryPin(c) {
		t.Errorf("Candidate %+v moved %v kept %v", c.Service.Spec, c.Moved, c.Kept)
	}
}

func keys(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Key())
	}
	return out
}
