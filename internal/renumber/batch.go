package renumber

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/repair/report"
)

// moveBatch moves one batch: every Service's re-create is planned and
// checked by a dry run, then each Service is journalled, deleted and
// created again, Workers at a time. A Service's journal entry is synced
// right before its delete is sent and confirmed (OpDeleted) as soon as the
// delete is answered, so a kill leaves at most the deletes in flight
// unconfirmed. Once journalled, a Service's delete and create run to the
// end even when ctx ends; the ones not started by then are not journalled
// and not touched.
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
	for _, p := range plans {
		if p != nil {
			ready = append(ready, p)
		}
	}
	done := make([]*Entry, len(ready))
	var failed error
	var mu sync.Mutex
	r.parallel(ctx, len(ready), func(i int) {
		e, err := r.moveOne(ctx, ready[i])
		if err != nil {
			mu.Lock()
			failed = errors.Join(failed, err)
			mu.Unlock()
		}
		done[i] = e
		prog.Add(1)
	})
	var settled []Entry
	for _, e := range done {
		if e != nil {
			settled = append(settled, *e)
		}
	}
	return errors.Join(failed, r.cfg.Journal.Record(settled...))
}

// moveOne journals p's Service, deletes it and creates it again, under a
// context that an interrupt does not cancel. It returns the journal entry
// that settles it, or nil while it stays pending (deleted, not re-created)
// or was never journalled; an error only when the journal cannot be
// written.
func (r *runner) moveOne(ctx context.Context, p *plan) (*Entry, error) {
	if ctx.Err() != nil {
		return nil, nil // interrupted before it started: untouched
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	svc := p.c.Service
	entry := Entry{Op: OpDeleting, Namespace: svc.Namespace, Name: svc.Name, OldUID: svc.UID, ResourceVersion: svc.ResourceVersion,
		Service: p.rec, ClusterIPs: storedClusterIPs(p.c.Service), Moved: ipStrings(p.c.Moved), Offsets: p.offsets}
	if err := r.cfg.Journal.Record(entry); err != nil {
		r.record(leftMove(p.c, err.Error()), nil)
		return nil, err
	}
	settled := &Entry{Op: OpDone, Namespace: svc.Namespace, Name: svc.Name, OldUID: svc.UID}
	err := r.deleteService(ctx, p)
	if err != nil && !errors.Is(err, errTerminating) {
		r.record(leftMove(p.c, err.Error()), nil)
		return settled, nil
	}
	// The delete was accepted: the Service is gone, or terminating, because
	// of renumber.
	if jerr := r.cfg.Journal.Record(Entry{Op: OpDeleted, Namespace: svc.Namespace, Name: svc.Name, OldUID: svc.UID}); jerr != nil {
		return nil, jerr
	}
	if err != nil { // errTerminating
		m := leftMove(p.c, err.Error())
		m.Outcome = Pending
		r.record(m, nil)
		return nil, nil
	}
	got, note, err := r.create(ctx, p)
	if err != nil {
		r.record(Move{Namespace: svc.Namespace, Name: svc.Name, OldIPs: ipStrings(holding.IPs(svc)), Outcome: Pending,
			Reason: fmt.Sprintf("%v; the journal %s holds it: run the same command again to re-create it", err, r.cfg.Journal.Path())}, nil)
		return nil, nil
	}
	m := Move{Namespace: svc.Namespace, Name: svc.Name, OldIPs: ipStrings(holding.IPs(svc)),
		NewIPs: ipStrings(holding.IPs(got)), Outcome: Moved, Reason: note}
	markChanged(&m, p, got)
	r.record(m, p.rec)
	settled.NewUID = got.UID
	return settled, nil
}

// markChanged records the offsets created keeps in m, and makes m a Changed
// move when created lost a node port, a kept address or an offset p asked
// for.
func markChanged(m *Move, p *plan, created *corev1.Service) {
	held := holding.IPs(created)
	m.Offsets = keptOffsets(p.offsets, held)
	changes := append(KeptChanges(p.c, created), offsetChanges(p.offsets, held)...)
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
// re-created; one not found is created from the journal only when it is
// gone because of renumber's delete (Judge): one someone else deleted is
// left deleted, one in doubt is left pending unless RecreateInDoubt. In a
// dry run it only reports the ones not found.
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
	}
	// Gone: re-created only when renumber's delete is why.
	ev, herr := r.history(ctx, e)
	switch Judge(e, ev, herr) {
	case DeletedBySomeoneElse:
		m.Outcome, m.Reason = LeftDeleted, "deleted by someone else after the killed run read it; not re-created"
		if ev.Recreated {
			m.Reason = "created again after the killed run's delete and deleted since by someone else; not re-created"
		}
		r.record(m, nil)
		if r.cfg.DryRun {
			return nil
		}
		return r.cfg.Journal.Record(Entry{Op: OpDone, Namespace: e.Namespace, Name: e.Name, OldUID: e.OldUID})
	case DeleterInDoubt:
		if !r.cfg.RecreateInDoubt {
			why := "its delete was in flight when the run stopped and it was deleted once since"
			if herr != nil {
				why = fmt.Sprintf("its delete was in flight when the run stopped, and its history cannot be read (%v)", herr)
			}
			m.Outcome, m.Reason = InDoubt, fmt.Sprintf("%s: the run's delete or another client's; the journal %s keeps it: "+
				"run the same command with --recreate-in-doubt to re-create it", why, r.journalPath())
			r.record(m, nil)
			return nil
		}
	}
	if r.cfg.DryRun {
		m.Outcome, m.Reason = Pending, "a killed run deleted it; run without --dry-run to re-create it from the journal "+r.cfg.JournalPath
		r.record(m, nil)
		return nil
	}
	createCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	p := &plan{c: e.Candidate(), rec: e.Service, offsets: e.Offsets}
	created, note, err := r.create(createCtx, p)
	if err != nil {
		m.Outcome, m.Reason = Pending, fmt.Sprintf("%v; the journal %s holds it: run the same command again", err, r.cfg.Journal.Path())
		r.record(m, nil)
		return nil
	}
	m.Outcome, m.NewIPs, m.Reason = Resumed, ipStrings(holding.IPs(created)), note
	if herr != nil && e.Confirmed {
		m.Reason = strings.TrimPrefix(m.Reason+"; ", "; ") + fmt.Sprintf("the journal confirms the killed run deleted it; "+
			"its history could not be read (%v), so a re-create and delete by another client since cannot be ruled out", herr)
	}
	markChanged(&m, p, created)
	r.record(m, e.Service)
	return r.cfg.Journal.Record(Entry{Op: OpDone, Namespace: e.Namespace, Name: e.Name, OldUID: e.OldUID, NewUID: created.UID})
}

// journalPath is the journal's file, open or only read (a dry run).
func (r *runner) journalPath() string {
	if r.cfg.Journal != nil {
		return r.cfg.Journal.Path()
	}
	return r.cfg.JournalPath
}
