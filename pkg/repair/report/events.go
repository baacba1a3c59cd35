package report

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"
)

// Component is the event source of the repair controllers, as upstream's.
const Component = "ipallocator-repair-controller"

// NewEventRecorder returns a recorder that writes core/v1 Events through
// client (so `kubectl get events` shows them) until ctx ends.
func NewEventRecorder(ctx context.Context, client kubernetes.Interface) record.EventRecorder {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	go func() {
		<-ctx.Done()
		broadcaster.Shutdown()
	}()
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component})
}

// syncRecorder writes each event with one API call before returning, for a
// one-shot job that exits right after its pass: the broadcaster of
// NewEventRecorder is asynchronous and could lose the last events on exit.
type syncRecorder struct {
	client kubernetes.Interface
	errs   func(error)
}

// NewSyncEventRecorder returns a recorder that creates every event
// synchronously through client; failures go to onError (may be nil).
func NewSyncEventRecorder(client kubernetes.Interface, onError func(error)) record.EventRecorder {
	if onError == nil {
		onError = func(error) {}
	}
	return &syncRecorder{client: client, errs: onError}
}

func (r *syncRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	ref, err := reference.GetReference(scheme.Scheme, object)
	if err != nil {
		r.errs(fmt.Errorf("event %s: reference: %w", reason, err))
		return
	}
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	now := metav1.Now()
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%v.%x", ref.Name, now.UnixNano()),
			Namespace: namespace,
		},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		Type:                eventtype,
		Source:              corev1.EventSource{Component: Component},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: Component,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.client.CoreV1().Events(namespace).Create(ctx, event, metav1.CreateOptions{}); err != nil {
		r.errs(fmt.Errorf("event %s on %s/%s: %w", reason, ref.Namespace, ref.Name, err))
	}
}

func (r *syncRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *syncRecorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Eventf(object, eventtype, reason, messageFmt, args...)
}
