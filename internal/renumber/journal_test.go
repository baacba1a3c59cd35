package renumber

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
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

// TestJournalConfirmed: an OpDeleted line confirms the pending entry of the
// same old UID, survives a reopen, and a new OpDeleting line for the
// Service starts unconfirmed again.
func TestJournalConfirmed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	deleted := func(name, uid string) Entry {
		return Entry{Op: OpDeleted, Namespace: "a", Name: name, OldUID: typesUID(uid)}
	}
	for _, r := range [][]Entry{
		{deleting("x", "1"), deleting("y", "2"), deleting("z", "3")},
		{deleted("x", "1"), deleted("y", "9")},                      // y: another UID confirms nothing
		{deleted("z", "3")}, {done("z", "3")}, {deleting("z", "4")}, // z moved again: unconfirmed
	} {
		if err := j.Record(r...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Close(); err != nil {
		t.Fatal(err)
	}
	read, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range read {
		got[e.Key()] = e.Confirmed
	}
	if diff := cmp.Diff(map[string]bool{"a/x": true, "a/y": false, "a/z": false}, got); diff != "" {
		t.Errorf("confirmed after reopen (-want +got):\n%s", diff)
	}
}

// TestJournalGroupCommit: concurrent Records are written together and each
// returns with its own lines on disk: every line is whole and every entry
// pending after a reopen.
func TestJournalGroupCommit(t *testing.T) {
	t.Parallel()
	const writers, each = 32, 20
	path := filepath.Join(t.TempDir(), "j")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("s-%d-%d", w, i)
				if err := j.Record(deleting(name, name)); err != nil {
					errs <- err
					return
				}
				if len(j.Pending()) == 0 {
					errs <- fmt.Errorf("%s recorded, nothing pending", name)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := j.Close(); err != nil {
		t.Fatal(err)
	}
	read, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != writers*each {
		t.Errorf("%d entries pending after reopen, want %d", len(read), writers*each)
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	confirmed, unconfirmed := deleting("x", "1"), deleting("x", "1")
	confirmed.Confirmed = true
	noHistory := errors.New("too old resource version")
	tests := []struct {
		name  string
		entry Entry
		ev    Events
		err   error
		want  Deleter
	}{
		{"confirmed, deleted straight after the read", confirmed, Events{Deleted: true}, nil, DeletedByRenumber},
		{"confirmed, no history", confirmed, Events{}, noHistory, DeletedByRenumber},
		{"confirmed, created again since and gone", confirmed, Events{Deleted: true, Recreated: true}, nil, DeletedBySomeoneElse},
		{"unconfirmed, changed before its delete", unconfirmed, Events{Changed: true, Deleted: true}, nil, DeletedBySomeoneElse},
		{"unconfirmed, created again since and gone", unconfirmed, Events{Deleted: true, Recreated: true}, nil, DeletedBySomeoneElse},
		{"unconfirmed, deleted straight after the read", unconfirmed, Events{Deleted: true}, nil, DeleterInDoubt},
		{"unconfirmed, no history", unconfirmed, Events{}, noHistory, DeleterInDoubt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Judge(tc.entry, tc.ev, tc.err); got != tc.want {
				t.Errorf("Judge = %d, want %d", got, tc.want)
			}
		})
	}
}
