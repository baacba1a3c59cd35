package renumber

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/repair/report"
)

// moveBatch moves one batch: every Service's re-create is planned and
// checked by a dry run, the batch's journal entries are synced, then each
// Service is deleted and created again. Once journalled, a Service's delete
// and create run to the end even when ctx ends; the ones not started by
// then are marked in the journal as not deleted.
func (r *runner) moveBatch(ctx context.Context, batch []Candidate, prog report.Progress) error {
	plans := make([]*plan, len(batch))
	r.parallel(ctx, len(batch), func(i int) {
		p, err := r.planMove(ctx, batch[i])
		if err != nil {
			r.record(leftMove(batch[i], err.Error()), nil)
			prog.Add(1)
			return
		}
		plans[i] = p
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	var ready []*plan
	var entries []Entry
	for _, p := range plans {
		if p == nil {
			continue
		}
		ready = append(ready, p)
		entries = append(entries, Entry{Op: OpDeleting, Namespace: p.c.Service.Namespace, Name: p.c.Service.Name,
			OldUID: p.c.Service.UID, Service: p.rec, ClusterIPs: storedClusterIPs(p.c.Service), Moved: ipStrings(p.c.Moved)})
	}
	if err := r.cfg.Journal.Record(entries...); err != nil {
		return err
	}
	done := make([]*Entry, len(ready))
	r.parallel(ctx, len(ready), func(i int) {
		done[i] = r.moveOne(ctx, ready[i])
		prog.Add(1)
	})
	var settled []Entry
	for i, e := range done {
		if e == nil && !r.pendingKey(ready[i]) {
			// Never started (interrupted): not deleted.
			e = &Entry{Op: OpDone, Namespace: entries[i].Namespace, Name: entries[i].Name, OldUID: entries[i].OldUID}
		}
		if e != nil {
			settled = append(settled, *e)
		}
	}
	return r.cfg.Journal.Record(settled...)
}

// pendingKey reports whether p's Service was recorded as deleted and not
// re-created.
func (r *runner) pendingKey(p *plan) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.res.Moves {
		if m.Namespace == p.c.Service.Namespace && m.Name == p.c.Service.Name && m.Outcome == Pending {
			return true
		}
	}
	return false
}

// moveOne deletes p's Service and creates it again, under a context that
// an interrupt does not cancel. It returns the journal entry that settles
// it, or nil while it stays pending (deleted, not re-created).
func (r *runner) moveOne(ctx context.Context, p *plan) *Entry {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	svc := p.c.Service
	settled := &Entry{Op: OpDone, Namespace: svc.Namespace, Name: svc.Name, OldUID: svc.UID}
	if err := r.deleteService(ctx, p); errors.Is(err, errTerminating) {
		m := leftMove(p.c, err.Error())
		m.Outcome = Pending
		r.record(m, nil)
		return nil
	} else if err != nil {
		r.record(leftMove(p.c, err.Error()), nil)
		return settled
	}
	got, note, err := r.create(ctx, p)
	if err != nil {
		r.record(Move{Namespace: svc.Namespace, Name: svc.Name, OldIPs: ipStrings(holding.IPs(svc)), Outcome: Pending,
			Reason: fmt.Sprintf("%v; the journal %s holds it: run the same command again to re-create it", err, r.cfg.Journal.Path())}, nil)
		return nil
	}
	m := Move{Namespace: svc.Namespace, Name: svc.Name, OldIPs: ipStrings(holding.IPs(svc)),
		NewIPs: ipStrings(holding.IPs(got)), Outcome: Moved, Reason: note}
	markChanged(&m, p.c, got)
	r.record(m, p.rec)
	settled.NewUID = got.UID
	return settled
}

// markChanged makes m a Changed move when created lost a node port or a
// kept address of c's Service.
func markChanged(m *Move, c Candidate, created *corev1.Service) {
	changes := KeptChanges(c, created)
	if len(changes) == 0 {
		return
	}
	m.Outcome = Changed
	m.Reason = fmt.Sprintf("taken by another Service while it was gone: %s", strings.Join(changes, ", "))
}

func leftMove(c Candidate, reason string) Move {
	return Move{Namespace: c.Service.Namespace, Name: c.Service.Name, OldIPs: ipStrings(holding.IPs(c.Service)), Outcome: Left, Reason: reason}
}

func storedClusterIPs(svc *corev1.Service) []string {
	if len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}
	}
	return svc.Spec.ClusterIPs
}

// resume settles what the journal holds from a killed run: a Service found
// with its old UID was never deleted; one found with another UID was
// re-created; one not found is created from the journal. In a dry run it
// only reports the ones not found.
func (r *runner) resume(ctx context.Context) error {
	var pending []Entry
	if r.cfg.DryRun {
		var err error
		if pending, err = ReadJournal(r.cfg.JournalPath); err != nil {
			return err
		}
	} else {
		pending = r.cfg.Journal.Pending()
	}
	for _, e := range pending {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.resumeOne(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) resumeOne(ctx context.Context, e Entry) error {
	m := Move{Namespace: e.Namespace, Name: e.Name, OldIPs: e.ClusterIPs}
	got, err := r.client.CoreV1().Services(e.Namespace).Get(ctx, e.Name, metav1.GetOptions{})
	switch {
	case err != nil && !isGone(err):
		return fmt.Errorf("resume: get Service %s: %w", e.Key(), err)
	case err == nil && got.UID == e.OldUID && got.DeletionTimestamp != nil:
		m.Outcome, m.Reason = Pending, "terminating: waiting for its finalizers; the journal re-creates it once it is gone"
		r.record(m, nil)
		return nil
	case err == nil && got.UID == e.OldUID:
		// The killed run journalled it and never deleted it.
		if r.cfg.DryRun {
			return nil
		}
		return r.cfg.Journal.Record(Entry{Op: OpDone, Namespace: e.Namespace, Name: e.Name, OldUID: e.OldUID})
	case err == nil:
		if r.cfg.DryRun {
			return nil
		}
		m.Outcome, m.NewIPs = Resumed, ipStrings(holding.IPs(got))
		r.record(m, e.Service)
		return r.cfg.Journal.Record(Entry{Op: OpDone, Namespace: e.Namespace, Name: e.Name, OldUID: e.OldUID, NewUID: got.UID})
	case r.cfg.DryRun:
		m.Outcome, m.Reason = Pending, "a killed run deleted it; run without --dry-run to re-create it from the journal "+r.cfg.JournalPath
		r.record(m, nil)
		return nil
	}
	createCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	created, note, err := r.create(createCtx, &plan{c: e.Candidate(), rec: e.Service})
	if err != nil {
		m.Outcome, m.Reason = Pending, fmt.Sprintf("%v; the journal %s holds it: run the same command again", err, r.cfg.Journal.Path())
		r.record(m, nil)
		return nil
	}
	m.Outcome, m.NewIPs, m.Reason = Resumed, ipStrings(holding.IPs(created)), note
	markChanged(&m, e.Candidate(), created)
	r.record(m, e.Service)
	return r.cfg.Journal.Record(Entry{Op: OpDone, Namespace: e.Namespace, Name: e.Name, OldUID: e.OldUID, NewUID: created.UID})
}
