package ipallocator

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
	"github.com/allocator/allocator/pkg/model"
)

// AnnotationModel is set by `allocator serve` on the default ServiceCIDR
// ("kubernetes") to the ClusterIP model it allocates with (model.Name's
// text), at start and whenever it creates that ServiceCIDR. It is how a job
// without etcd tells a bitmap-model server from an IPAddress-model one: both
// serve the ServiceCIDR API and, in a transition, keep IPAddresses, so
// nothing else the API shows differs. While replicas of both models run it
// names the model of the one that started last; etcd's replica records
// (Detect with etcd) are exact. kube-apiserver neither sets nor reads it.
const AnnotationModel = "allocator.github.io/allocator-model"

// detectThroughAPI resolves model.Auto when no etcd was given, from what
// the API shows, by the first of these that holds:
//
//	no API to ask (client nil)                                   ipaddress
//	the API serves no networking.k8s.io/v1 ServiceCIDRs          bitmap     (kube-apiserver ≤ 1.32)
//	the ServiceCIDR "kubernetes" names a model (AnnotationModel) that model (set by allocator serve)
//	otherwise                                                    ipaddress  (kube-apiserver ≥ 1.33)
//
// It lists (never gets) the default ServiceCIDR, so the status job's
// list-only role may run it.
func detectThroughAPI(ctx context.Context, client kubernetes.Interface) (Detection, error) {
	if client == nil {
		return Detection{Model: model.IPAddress, Reason: "no etcd was given, so there is no bitmap to read"}, nil
	}
	served, err := servesServiceCIDRs(ctx, client)
	if err != nil {
		return Detection{}, err
	}
	if !served {
		return Detection{Model: model.Bitmap, Reason: "the API server serves no networking.k8s.io/v1 ServiceCIDRs " +
			"(the bitmap model, kube-apiserver 1.32 or earlier)"}, nil
	}
	sc, err := ListDefaultServiceCIDR(ctx, client)
	if err != nil {
		return Detection{}, err
	}
	if sc != nil {
		if text, ok := sc.Annotations[AnnotationModel]; ok {
			m, err := model.Parse(text, false)
			if err != nil {
				return Detection{}, fmt.Errorf("ServiceCIDR %s annotation %s: %w", sc.Name, AnnotationModel, err)
			}
			return Detection{Model: m, Reason: fmt.Sprintf("no etcd was given, and the ServiceCIDR %q says its server allocates in the %s model "+
				"(annotation %s)", sc.Name, m, AnnotationModel)}, nil
		}
	}
	return Detection{Model: model.IPAddress, Reason: "no etcd was given, and the API serves networking.k8s.io/v1 ServiceCIDRs " +
		"with no allocator serve naming another model"}, nil
}

// ListDefaultServiceCIDR returns the ServiceCIDR "kubernetes", or nil when
// there is none. It lists with a field selector rather than getting, so a
// role with list alone may read it.
func ListDefaultServiceCIDR(ctx context.Context, client kubernetes.Interface) (*networkingv1.ServiceCIDR, error) {
	list, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", servicecidr.DefaultName).String()})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list ServiceCIDR %s: %w", servicecidr.DefaultName, err)
	}
	for i := range list.Items {
		if list.Items[i].Name == servicecidr.DefaultName {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}
