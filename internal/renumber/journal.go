package renumber

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Journal ops, one JSON line each.
const (
	// OpDeleting: the Service is about to be deleted; Service is the
	// object that re-creates it. Written and synced right before its delete
	// is sent.
	OpDeleting = "deleting"
	// OpDeleted: the delete sent after OpDeleting deleted the Service: it is
	// gone because of renumber. Written and synced as soon as the delete is
	// answered, so that only a kill while a delete is in flight leaves an
	// absent Service whose deleter the journal cannot name.
	OpDeleted = "deleted"
	// OpDone: the entry is settled: re-created (NewUID), not deleted after
	// all (its delete refused, or it was found with its old UID), or left
	// deleted because someone else deleted it.
	OpDone = "done"
)

// Entry is one line of the journal.
type Entry struct {
	Op        string    `json:"op"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	OldUID    types.UID `json:"oldUID,omitempty"`
	NewUID    types.UID `json:"newUID,omitempty"`
	// ResourceVersion (OpDeleting) is the Service's resourceVersion the
	// delete is conditional on: a resumed run reads the Service's history
	// from there to tell renumber's delete from someone else's.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Confirmed is set on a pending entry once its OpDeleted line is read or
	// recorded: the Service was deleted by renumber. Not written.
	Confirmed bool `json:"-"`
	// Service is the re-create object (OpDeleting); ClusterIPs the old
	// Service's spec.clusterIPs and Moved those of them being moved, so a
	// resumed run can ask for other addresses if the chosen ones are taken.
	Service    *corev1.Service `json:"service,omitempty"`
	ClusterIPs []string        `json:"clusterIPs,omitempty"`
	Moved      []string        `json:"moved,omitempty"`
	// Offsets are the static-band addresses Service keeps the offset of,
	// so a resumed run reports one it had to give up.
	Offsets []Offset `json:"keptOffsets,omitempty"`
}

// Candidate rebuilds the Candidate the entry was written for: the old
// Service as far as a re-create needs it (its spec with its old addresses).
func (e Entry) Candidate() Candidate {
	old := e.Service.DeepCopy()
	old.Spec.ClusterIPs = e.ClusterIPs
	old.Spec.ClusterIP = ""
	if len(e.ClusterIPs) > 0 {
		old.Spec.ClusterIP = e.ClusterIPs[0]
	}
	old.UID = e.OldUID
	c := Candidate{Service: old}
	for _, text := range e.ClusterIPs {
		ip, err := netip.ParseAddr(text)
		if err != nil {
			continue
		}
		if slices.Contains(e.Moved, text) {
			c.Moved = append(c.Moved, ip)
		} else {
			c.Kept = append(c.Kept, ip)
		}
	}
	return c
}

// Key is namespace/name.
func (e Entry) Key() string { return e.Namespace + "/" + e.Name }

// Journal is an append-only file of JSON lines that records, before each
// delete, what re-creates the Service. An entry is pending from its
// OpDeleting line until an OpDone line for the same Service and old UID;
// the entries pending when a run starts are Services a killed run may have
// deleted without re-creating. A last line cut short by a kill is ignored:
// its delete had not been sent, because a line is synced before its delete.
// The methods are safe for concurrent use.
type Journal struct {
	path string

	mu      sync.Mutex
	f       *os.File
	pending map[string]Entry // by Key
	cut     bool             // the file ends in a line cut short

	// Group commit: what callers record while another one writes is queued,
	// then written and synced at once by the next of them (the leader), so
	// that the workers' per-Service lines cost one sync per round, not one
	// each. Guarded by mu; only the leader (writing) touches f.
	writing bool
	queue   []byte
	queued  []Entry
	waiters []chan error
}

// OpenJournal opens (creating it when absent) the journal at path and reads
// its pending entries.
func OpenJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	j := &Journal{path: path, f: f, pending: map[string]Entry{}}
	if err := j.read(); err != nil {
		f.Close()
		return nil, err
	}
	if j.cut {
		// Start the next record on a line of its own.
		if _, err := f.Write([]byte("\n")); err != nil {
			f.Close()
			return nil, fmt.Errorf("write journal %s: %w", path, err)
		}
	}
	return j, nil
}

// ReadJournal returns the pending entries of the journal at path without
// opening it for writing; none when it does not exist.
func ReadJournal(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer f.Close()
	j := &Journal{path: path, f: f, pending: map[string]Entry{}}
	if err := j.read(); err != nil {
		return nil, err
	}
	return j.Pending(), nil
}

func (j *Journal) read() error {
	data, err := io.ReadAll(j.f)
	if err != nil {
		return fmt.Errorf("read journal %s: %w", j.path, err)
	}
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			if i == len(lines)-1 {
				break // cut short by a kill: never synced, so never acted on
			}
			return fmt.Errorf("journal %s line %d: %w", j.path, i+1, err)
		}
		j.apply(e)
	}
	j.cut = len(data) > 0 && data[len(data)-1] != '\n'
	return nil
}

func (j *Journal) apply(e Entry) {
	switch e.Op {
	case OpDeleting:
		e.Confirmed = false
		j.pending[e.Key()] = e
	case OpDeleted:
		if p, ok := j.pending[e.Key()]; ok && p.OldUID == e.OldUID {
			p.Confirmed = true
			j.pending[e.Key()] = p
		}
	case OpDone:
		if p, ok := j.pending[e.Key()]; ok && p.OldUID == e.OldUID {
			delete(j.pending, e.Key())
		}
	}
}

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Pending returns the entries deleted (or about to be) and not known to be
// re-created, in namespace and name order.
func (j *Journal) Pending() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Entry, 0, len(j.pending))
	for _, e := range j.pending {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// Record appends entries and syncs the file before it returns: an
// OpDeleting line must be on disk before its delete is sent. Concurrent
// calls are written and synced together (group commit); each returns once
// its own entries are on disk.
func (j *Journal) Record(entries ...Entry) error {
	if len(entries) == 0 {
		return nil
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	enc := json.NewEncoder(w)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("encode journal entry %s: %w", e.Key(), err)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	done := make(chan error, 1)
	j.mu.Lock()
	j.queue = append(j.queue, buf.Bytes()...)
	j.queued = append(j.queued, entries...)
	j.waiters = append(j.waiters, done)
	if j.writing {
		j.mu.Unlock()
		return <-done
	}
	j.writing = true
	for len(j.waiters) > 0 {
		data, queued, waiters := j.queue, j.queued, j.waiters
		j.queue, j.queued, j.waiters = nil, nil, nil
		j.mu.Unlock()
		err := j.writeSynced(data)
		j.mu.Lock()
		if err == nil {
			for _, e := range queued {
				j.apply(e)
			}
		}
		for _, w := range waiters {
			w <- err
		}
	}
	j.writing = false
	j.mu.Unlock()
	return <-done
}

// writeSynced appends data to the file and syncs it; only the leader of a
// group commit calls it.
func (j *Journal) writeSynced(data []byte) error {
	if _, err := j.f.Write(data); err != nil {
		return fmt.Errorf("write journal %s: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sync journal %s: %w", j.path, err)
	}
	return nil
}

// Close closes the file, and removes it when nothing is pending: a finished
// run leaves no journal behind. It reports whether the file was removed.
func (j *Journal) Close() (removed bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.f.Close(); err != nil {
		return false, fmt.Errorf("close journal %s: %w", j.path, err)
	}
	if len(j.pending) > 0 {
		return false, nil
	}
	if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove journal %s: %w", j.path, err)
	}
	return true, nil
}
