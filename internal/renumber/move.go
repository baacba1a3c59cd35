package renumber

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/subrange"
)

// Bounds of one Service's move.
const (
	// probeAttempts bounds the dry runs that look for a free pinned address
	// (another client may take a picked one first).
	probeAttempts = 3
	// createAttempts bounds the creates of a deleted Service; the ones
	// refused for an address or port taken meanwhile ask for others.
	createAttempts = 8
	// moveTimeout bounds a delete and its create. They run to the end even
	// when the run is interrupted, so an interrupt never leaves a Service
	// deleted; the journal covers a kill.
	moveTimeout = 2 * time.Minute
)

// plan is a Service ready to move: the object that re-creates it, the
// addresses pinned in it, and the offsets among them (static-band addresses
// that keep their offset).
type plan struct {
	c       Candidate
	rec     *corev1.Service
	pins    Pins
	offsets []Offset
}

// planMove chooses c's new addresses, static-band offsets kept unless
// Config.IgnoreStaticBand, and checks with a server-side dry run that the
// API would create the re-create object; an error says why c is left
// untouched.
func (r *runner) planMove(ctx context.Context, c Candidate) (*plan, error) {
	return r.planMoveKeeping(ctx, c, !r.cfg.IgnoreStaticBand)
}

// planMoveKeeping is planMove with the offsets kept or not (keep).
func (r *runner) planMoveKeeping(ctx context.Context, c Candidate, keep bool) (*plan, error) {
	var last error
	for range probeAttempts {
		pins, offsets, err := r.choose(ctx, c, keep)
		if err != nil {
			return nil, err
		}
		probed, err := r.checkPinned(ctx, c, pins)
		if err != nil {
			last = err
			if off, ok := takenOffset(err, offsets); ok {
				return nil, offsetTaken(off, "another Service")
			}
			if isTaken(err) && (r.picker != nil || len(pins) > 0) {
				// A pin was taken since it was chosen: choose again.
				if r.picker != nil {
					for _, pin := range pins {
						r.picker.Taken(pin)
					}
				}
				continue
			}
			return nil, fmt.Errorf("the API refuses its re-create: %w", err)
		}
		if NeedsPrimaryPin(c) && len(pins) == 0 {
			ip, ok := holding.ParseClusterIP(probed.Spec.ClusterIP)
			if !ok {
				return nil, fmt.Errorf("the dry run of its re-create picked no address (%q)", probed.Spec.ClusterIP)
			}
			if err := r.checkPick(ctx, ip); err != nil {
				return nil, err
			}
			pins = Pins{ip.Is6(): ip}
		}
		rec, err := Recreate(c, pins)
		if err != nil {
			return nil, err
		}
		return &plan{c: c, rec: rec, pins: pins, offsets: offsets}, nil
	}
	if r.cfg.To == "" {
		return nil, fmt.Errorf("no free address after %d tries: %w", probeAttempts, last)
	}
	return nil, fmt.Errorf("no free address of --to %s after %d tries: %w", r.cfg.To, probeAttempts, last)
}

// pick returns the pins of c's moved families from --to, but for the
// families in skip, or none without --to.
func (r *runner) pick(c Candidate, skip map[bool]bool) (Pins, error) {
	if r.picker == nil {
		return nil, nil
	}
	pins := Pins{}
	for _, ip := range c.Moved {
		v6 := ip.Is6()
		if !r.picker.Has(v6) {
			return nil, fmt.Errorf("--to %s has no %s CIDR for %s", r.cfg.To, subrange.FamilyName(v6), ip)
		}
		if skip[v6] {
			continue
		}
		addr, ok := r.picker.Next(v6)
		if !ok {
			return nil, fmt.Errorf("--to %s has no free %s address", r.cfg.To, subrange.FamilyName(v6))
		}
		pins[v6] = addr
	}
	return pins, nil
}

// isTaken reports whether err refuses an address or port as allocated.
func isTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already allocated")
}

// FieldManager names renumber's writes in managedFields.
const FieldManager = "allocator-renumber"

// errChanged: the Service changed or went away between the read and the
// delete; nothing was deleted.
var errChanged = errors.New("changed since it was read")

// errTerminating: the delete was accepted and the Service waits for
// finalizers; it stays pending in the journal.
var errTerminating = errors.New("terminating: waiting for its finalizers; the journal re-creates it once it is gone")

// deleteService deletes p's Service if it is still the one read.
func (r *runner) deleteService(ctx context.Context, p *plan) error {
	svc := p.c.Service
	uid, rv := svc.UID, svc.ResourceVersion
	err := r.client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return fmt.Errorf("%w (%v); left untouched, run again to move it", errChanged, err)
	}
	// The outcome is unknown: read it.
	got, getErr := r.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(getErr):
		return nil
	case getErr == nil && got.UID == uid && got.DeletionTimestamp == nil:
		return fmt.Errorf("delete: %w; left untouched", err)
	case getErr == nil && got.UID == uid:
		return errTerminating
	case getErr == nil:
		return fmt.Errorf("%w (deleted and created again by someone else); left untouched", errChanged)
	}
	return fmt.Errorf("delete: %w (and the read after it: %v)", err, getErr)
}

// create creates p's re-create object after its delete: as planned, then,
// when an address or port it asks for was taken while the Service was gone,
// with fresh pins, then with its static-band offsets given up, then without
// the addresses and ports it kept. Transient errors are retried. It returns
// the created Service and a note when it had to give up kept values.
func (r *runner) create(ctx context.Context, p *plan) (*corev1.Service, string, error) {
	obj, note := p.rec, ""
	level := 0
	var last error
	for attempt := range createAttempts {
		got, err := r.client.CoreV1().Services(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			return got, note, nil
		case apierrors.IsAlreadyExists(err):
			// Created by an earlier attempt whose answer was lost, or by
			// someone else: either way the Service exists again.
			existing, getErr := r.client.CoreV1().Services(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{})
			if getErr == nil && existing.UID != p.c.Service.UID {
				return existing, note, nil
			}
			last = err
		case apierrors.IsInvalid(err) || isTaken(err):
			last = err
			if obj, note = r.fallback(ctx, p, obj, &level, err); obj == nil {
				return nil, "", fmt.Errorf("create: %w", err)
			}
			continue
		default:
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("create: %w (last error: %v)", ctx.Err(), last)
		case <-time.After(time.Duration(attempt+1) * 250 * time.Millisecond):
		}
	}
	return nil, "", fmt.Errorf("create: %d attempts, last error: %w", createAttempts, last)
}

// fallback returns the object the next create of p asks for after obj was
// refused with err (an address or port taken, or invalid), one level lower
// than *level, and the note that says what was given up; nil when nothing
// is left to give up.
func (r *runner) fallback(ctx context.Context, p *plan, obj *corev1.Service, level *int, err error) (*corev1.Service, string) {
	for *level < 3 {
		*level++
		switch *level {
		case 1: // fresh pins, offsets kept
			if fresh, perr := r.planMove(ctx, p.c); perr == nil {
				return fresh.rec, ""
			}
		case 2: // the offsets given up, node ports and kept addresses kept
			if len(p.offsets) == 0 {
				continue
			}
			if fresh, perr := r.planMoveKeeping(ctx, p.c, false); perr == nil {
				return fresh.rec, fmt.Sprintf("the addresses at its static-band offsets were refused while it was gone (%v)", err)
			}
		case 3:
			return WithoutKept(p.c, obj), fmt.Sprintf("its kept addresses or node ports were refused while it was gone (%v)", err)
		}
	}
	return nil, ""
}
