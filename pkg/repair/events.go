package repair

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
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
