package ipaddresses

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// upstreamManager and upstreamFields are the field ownership kube-apiserver
// records on the IPAddresses its allocator creates (manager kube-apiserver,
// operation Update, as in testdata's 1.36 capture): an IPAddress written in
// process carries the same, so objects and server-side apply behave alike
// whichever server made them.
const (
	upstreamManager = "kube-apiserver"
	upstreamFields  = `{"f:metadata":{"f:labels":{".":{},"f:ipaddress.kubernetes.io/ip-family":{},"f:ipaddress.kubernetes.io/managed-by":{}}},"f:spec":{"f:parentRef":{".":{},"f:name":{},"f:namespace":{},"f:resource":{}}}}`
)

// InProcess is the IPAddress storage as the server's own allocator uses it:
// the store's create, get and delete called in process (the same strategy,
// validation and etcd write as an API request), without a loopback request
// (authentication, encoding, HTTP, admission). Watches still see every
// change. It satisfies pkg/ipallocator/ipaddress.Objects.
type InProcess struct {
	r *REST
}

// InProcess returns r as the allocator's Objects.
func (r *REST) InProcess() InProcess { return InProcess{r: r} }

// Get reads an IPAddress.
func (p InProcess) Get(ctx context.Context, name string, opts metav1.GetOptions) (*networkingv1.IPAddress, error) {
	obj, err := p.r.Get(ctx, name, &opts)
	if err != nil {
		return nil, err
	}
	return asIPAddress(obj)
}

// Create stores a new IPAddress, with upstream's field ownership when the
// caller set none.
func (p InProcess) Create(ctx context.Context, ip *networkingv1.IPAddress, opts metav1.CreateOptions) (*networkingv1.IPAddress, error) {
	ip = ip.DeepCopy()
	if len(ip.ManagedFields) == 0 {
		now := metav1.Now()
		ip.ManagedFields = []metav1.ManagedFieldsEntry{{
			Manager: upstreamManager, Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: networkingv1.SchemeGroupVersion.String(), Time: &now,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(upstreamFields)},
		}}
	}
	obj, err := p.r.Create(ctx, ip, rest.ValidateAllObjectFunc, &opts)
	if err != nil {
		return nil, err
	}
	return asIPAddress(obj)
}

// Delete deletes an IPAddress, honouring opts' preconditions.
func (p InProcess) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	_, _, err := p.r.Delete(ctx, name, rest.ValidateAllObjectFunc, &opts)
	return err
}

func asIPAddress(obj runtime.Object) (*networkingv1.IPAddress, error) {
	ip, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return nil, fmt.Errorf("ipaddresses store returned %T", obj)
	}
	return ip, nil
}
