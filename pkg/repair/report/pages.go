package report

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/slim"
)

// Pages reads the pages of a list of every object of one resource, each
// object decoded into what the repairs keep of it (internal/slim): the
// bytes of a protobuf page are walked for the fields kept, each object an
// allocation of its own, instead of decoded whole into a list whose items
// the decoder grows by copying them. A page is read into one buffer the
// pages share. Decoding whole is most of a job's CPU at scale, and the job
// shares the machine with the API server answering it (docs/performance.md).
//
// Next reads the list in the repairs' pages: ListPageSize first, then
// NextPageSize of what the first page says remains, each page at the
// first page's revision (its continue token).
//
// Bytes the walk does not read (JSON from a server that sends no
// protobuf, anything else) are decoded in full and then made slim; a
// client without a REST client of its own (a fake clientset) is read
// through its typed List. Either way the page is the same.
type Pages[T any] struct {
	rest     *rest.RESTClient // nil: read through typed
	resource string
	walk     func([]byte) ([]T, metav1.ListMeta, bool)
	slim     func(runtime.Object) ([]T, metav1.ListMeta, error)
	typed    func(context.Context, metav1.ListOptions) (runtime.Object, error)
	buf      bytes.Buffer

	opts metav1.ListOptions // Next's next page; Limit 0: none read yet
}

// Next reads the list's next page; Done reports when there is none left.
func (p *Pages[T]) Next(ctx context.Context) ([]T, error) {
	first := p.opts.Limit == 0
	if first {
		p.opts.Limit = ListPageSize
	}
	items, meta, err := p.Page(ctx, p.opts)
	if err != nil {
		return nil, err
	}
	if first && meta.Continue != "" {
		p.opts.Limit = NextPageSize(meta.RemainingItemCount)
	}
	p.opts.Continue = meta.Continue
	return items, nil
}

// Done reports whether Next has read the list's last page.
func (p *Pages[T]) Done() bool { return p.opts.Limit != 0 && p.opts.Continue == "" }

// ServicePages reads the pages of a list of every Service as slim.Service
// makes them.
func ServicePages(client kubernetes.Interface) *Pages[*corev1.Service] {
	return &Pages[*corev1.Service]{
		rest: restClient(client.CoreV1().RESTClient()), resource: "services",
		walk: slim.DecodeServiceList,
		slim: func(obj runtime.Object) ([]*corev1.Service, metav1.ListMeta, error) {
			list, ok := obj.(*corev1.ServiceList)
			if !ok {
				return nil, metav1.ListMeta{}, fmt.Errorf("a list of services is a %T", obj)
			}
			items := make([]*corev1.Service, len(list.Items))
			for i := range list.Items {
				items[i] = slim.Service(&list.Items[i])
			}
			return items, list.ListMeta, nil
		},
		typed: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		},
	}
}

// IPAddressPages reads the pages of a list of every IPAddress as
// slim.IPAddress makes them.
func IPAddressPages(client kubernetes.Interface) *Pages[*networkingv1.IPAddress] {
	return &Pages[*networkingv1.IPAddress]{
		rest: restClient(client.NetworkingV1().RESTClient()), resource: "ipaddresses",
		walk: slim.DecodeIPAddressList,
		slim: func(obj runtime.Object) ([]*networkingv1.IPAddress, metav1.ListMeta, error) {
			list, ok := obj.(*networkingv1.IPAddressList)
			if !ok {
				return nil, metav1.ListMeta{}, fmt.Errorf("a list of ipaddresses is a %T", obj)
			}
			items := make([]*networkingv1.IPAddress, len(list.Items))
			for i := range list.Items {
				items[i] = slim.IPAddress(&list.Items[i])
			}
			return items, list.ListMeta, nil
		},
		typed: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.NetworkingV1().IPAddresses().List(ctx, opts)
		},
	}
}

// restClient is c when it is a REST client that sends requests (a fake
// clientset's is a nil one).
func restClient(c rest.Interface) *rest.RESTClient {
	rc, ok := c.(*rest.RESTClient)
	if !ok || rc == nil {
		return nil
	}
	return rc
}

// protobufOrJSON is what a page asks for: protobuf, which the walk reads,
// else JSON.
const protobufOrJSON = "application/vnd.kubernetes.protobuf,application/json"

// Page reads the page opts asks for: its objects and the list's metadata
// (its continue token and remaining count). A page's objects share nothing
// with the page's bytes or with another page.
func (p *Pages[T]) Page(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error) {
	if p.rest == nil {
		obj, err := p.typed(ctx, opts)
		if err != nil {
			return nil, metav1.ListMeta{}, fmt.Errorf("list %s: %w", p.resource, err)
		}
		return p.slim(obj)
	}
	data, err := p.read(ctx, opts)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	if items, meta, ok := p.walk(data); ok {
		return items, meta, nil
	}
	obj, err := runtime.Decode(scheme.Codecs.UniversalDeserializer(), data)
	if err != nil {
		return nil, metav1.ListMeta{}, fmt.Errorf("decode a page of %s: %w", p.resource, err)
	}
	return p.slim(obj)
}

// read reads a page's bytes into the pages' buffer; they are valid until
// the next read.
func (p *Pages[T]) read(ctx context.Context, opts metav1.ListOptions) ([]byte, error) {
	body, err := p.rest.Get().Resource(p.resource).VersionedParams(&opts, scheme.ParameterCodec).
		SetHeader("Accept", protobufOrJSON).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p.resource, err)
	}
	defer func() { _ = body.Close() }()
	p.buf.Reset()
	if _, err := p.buf.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("list %s: read a page: %w", p.resource, err)
	}
	return p.buf.Bytes(), nil
}
