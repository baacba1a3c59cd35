package renumber

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// Deleter says whose delete left a journalled Service absent.
type Deleter int

const (
	// DeletedByRenumber: the journal confirms renumber's delete (OpDeleted)
	// and the Service's history shows nothing created in its place since.
	DeletedByRenumber Deleter = iota
	// DeletedBySomeoneElse: the history shows the Service changed after the
	// read renumber's delete was conditional on (so that delete could not
	// have deleted it), or created again after the delete and gone since.
	DeletedBySomeoneElse
	// DeleterInDoubt: the journal has no OpDeleted (the run stopped while
	// the delete was in flight) and the history shows one delete straight
	// after the read, or no history can be had: renumber's delete and
	// another client's look the same.
	DeleterInDoubt
)

// History bounds: the events since a journalled read are in the API
// server's watch cache or etcd and arrive at once; a quiet moment means
// they are all in.
const (
	historyQuiet   = time.Second
	historyTimeout = 15 * time.Second
)

// Events is what a Service's history since a read says.
type Events struct {
	// Changed: the Service (its old UID) was modified after the read.
	Changed bool
	// Deleted: the Service (its old UID) was deleted after the read.
	Deleted bool
	// Recreated: a Service of that name was created after the read.
	Recreated bool
}

// Judge says whose delete left e's Service absent, from what its history
// says (err: no history could be read).
func Judge(e Entry, ev Events, err error) Deleter {
	switch {
	case err == nil && (ev.Changed || ev.Recreated):
		return DeletedBySomeoneElse
	case e.Confirmed:
		return DeletedByRenumber
	}
	return DeleterInDoubt
}

// history reads what happened to e's Service since the resourceVersion its
// delete was conditional on, through a watch from there; an error when the
// entry has none or the server no longer keeps that history.
func (r *runner) history(ctx context.Context, e Entry) (Events, error) {
	var ev Events
	if e.ResourceVersion == "" {
		return ev, errors.New("the journal entry has no resourceVersion")
	}
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", e.Name).String()
	w, err := r.client.CoreV1().Services(e.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: e.ResourceVersion})
	if err != nil {
		return ev, fmt.Errorf("watch from %s: %w", e.ResourceVersion, err)
	}
	defer w.Stop()
	quiet := time.NewTimer(historyQuiet)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return ev, fmt.Errorf("history since %s: %w", e.ResourceVersion, ctx.Err())
		case <-quiet.C:
			return ev, nil
		case event, ok := <-w.ResultChan():
			if !ok {
				return ev, fmt.Errorf("history since %s: the watch ended", e.ResourceVersion)
			}
			if event.Type == watch.Error {
				return ev, fmt.Errorf("history since %s: %v", e.ResourceVersion, event.Object)
			}
			svc, isSvc := event.Object.(*corev1.Service)
			if !isSvc {
				continue
			}
			switch {
			case event.Type == watch.Added:
				ev.Recreated = true
			case svc.UID == e.OldUID && event.Type == watch.Modified && !ev.Deleted && svc.DeletionTimestamp == nil:
				// A change after the read. (One that sets or follows the
				// deletionTimestamp is the delete itself, held by
				// finalizers: renumber's when the journal confirms it.)
				ev.Changed = true
			case svc.UID == e.OldUID && event.Type == watch.Deleted:
				ev.Deleted = true
			}
			quiet.Reset(historyQuiet)
		}
	}
}
