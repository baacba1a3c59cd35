package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitset"
)

// storedMap is what a range repair writes: a RangeAllocation (ClusterIP
// bitmap or node-port map) read and written with compare-and-swap.
type storedMap interface {
	ReadStored(ctx context.Context) (bitmap.StoredMap, error)
	CompareAndWrite(ctx context.Context, data []byte, revision int64) (int64, error)
}

// mergeWrite is the one write of a range repair pass, shared by the
// ClusterIP bitmap repair and the node-port repair so the two cannot drift
// apart. It writes data, the pass's rebuilt map of size slots (static of
// them in the lower band), with a compare-and-swap on stored's revision.
// When that loses to a concurrent allocation it merges the pass's changes
// onto a fresh read and tries again: slots of toSet are set and slots of
// toClear (leaks confirmed by the pass) cleared. Each attempt is one read
// and one compare-and-swap with nothing in between, so a pass makes
// progress at any create rate.
//
// notMissing are the slots of toSet the merge did not set: found set in a
// fresh read (the allocation that stored the Service set it after the
// pass's read, so it was not missing), or still clear there while
// stillHeld says its Service no longer holds it (deleted, its slot freed,
// between the pass's list and its write: setting the slot then would leave
// it held by nothing and report a false "not allocated"). stillHeld is
// asked at most once per slot, and only after a lost compare-and-swap.
func mergeWrite(ctx context.Context, store storedMap, size, static int, data []byte, stored bitmap.StoredMap,
	toSet, toClear []int, stillHeld func(context.Context, int) (bool, error)) (wrote bool, notMissing map[int]bool, err error) {
	rev := stored.Revision
	notMissing = map[int]bool{}
	held := map[int]bool{}
	for attempt := 1; ; attempt++ {
		_, err := store.CompareAndWrite(ctx, data, rev)
		if err == nil {
			return true, notMissing, nil
		}
		if !errors.Is(err, bitmap.ErrConflict) || attempt >= maxMergeAttempts {
			return false, notMissing, err
		}
		fresh, err := store.ReadStored(ctx)
		if err != nil {
			return false, notMissing, err
		}
		if !fresh.Exists() {
			// Deleted meanwhile: rebuilding it is a decision for a new pass.
			return false, notMissing, fmt.Errorf("map deleted during the pass: %w", bitmap.ErrConflict)
		}
		merged, err := bitset.New(size, static)
		if err != nil {
			return false, notMissing, err
		}
		if err := merged.SetBytes(fresh.Data); err != nil {
			return false, notMissing, fmt.Errorf("stored map: %w", err)
		}
		for _, slot := range toSet {
			if merged.Has(slot) {
				notMissing[slot] = true
				continue
			}
			ok, checked := held[slot]
			if !checked {
				if ok, err = stillHeld(ctx, slot); err != nil {
					return false, notMissing, err
				}
				held[slot] = ok
			}
			if !ok {
				notMissing[slot] = true
				continue
			}
			delete(notMissing, slot)
			merged.Set(slot)
		}
		for _, slot := range toClear {
			merged.Clear(slot)
		}
		data = merged.Bytes()
		if bytes.Equal(data, fresh.Data) {
			return false, notMissing, nil
		}
		rev = fresh.Revision
	}
}

// sameService reads svc again and returns it when it still exists with the
// same UID; nil when it was deleted, or deleted and created again, since
// the pass listed it.
func sameService(ctx context.Context, client kubernetes.Interface, svc *corev1.Service) (*corev1.Service, error) {
	cur, err := client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read Service %s/%s again: %w", svc.Namespace, svc.Name, err)
	case cur.UID != svc.UID:
		return nil, nil
	}
	return cur, nil
}
