package rawlist

import (
	"context"
	"net/http"
	"strings"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// plainProtobufKey marks a request whose response is plain protobuf.
type plainProtobufKey struct{}

// WithNegotiation marks each GET of a list of Services or IPAddresses whose response the API handler
// would write as plain protobuf (no table, no partial metadata), ns being
// the API's serializers. Serve answers only marked requests.
//
// It negotiates the Accept header as the handler does, but takes every
// transformation (as=...) as allowed: a clause the handler would skip for
// one, this takes, so a request it marks is one whose first acceptable
// clause is plain protobuf for the handler too.
func WithNegotiation(h http.Handler, ns runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && listsStoredKind(req.URL.Path) {
			opts, ok := negotiation.NegotiateMediaTypeOptions(req.Header.Get("Accept"), ns.SupportedMediaTypes(), anyTransform{})
			if ok && opts.Convert == nil && opts.Stream == "" && opts.Accepted.MediaType == runtime.ContentTypeProtobuf {
				req = req.WithContext(context.WithValue(req.Context(), plainProtobufKey{}, true))
			}
		}
		h.ServeHTTP(w, req)
	})
}

// listsStoredKind reports whether path may list a kind in storedKinds: its
// last segment is their resource. Other GETs (single objects, probes,
// other resources) are not negotiated again.
func listsStoredKind(path string) bool {
	return strings.HasSuffix(path, "/services") || strings.HasSuffix(path, "/ipaddresses")
}

// anyTransform allows what the API handler allows of a list, and every
// transformation.
type anyTransform struct{}

func (anyTransform) AllowsMediaTypeTransform(string, string, *schema.GroupVersionKind) bool {
	return true
}
func (anyTransform) AllowsServerVersion(v string) bool { return v == metav1.SchemeGroupVersion.Version }
func (anyTransform) AllowsStreamSchema(s string) bool  { return s == "watch" }

// Source is a store whose decoder reads a List's items (Decoder): a
// resource's etcd store, not its watch cache.
type Source interface {
	ServesStoredLists() bool
}

// Serve answers a LIST of store's resource (kind is the list's kind) from
// the stored bytes when:
//   - the request is marked (WithNegotiation) and has no selector;
//   - the store reads etcd through a Decoder (Source), not a watch cache;
//   - the kind is in storedKinds, and its rule covers the store's
//     Decorator if the store has one;
//   - the audit log does not record the response body.
//
// handled is false for any other request, which the caller answers as
// usual. The list is the store's GetList, as the registry's List reads it;
// items decoded in full get the store's Decorator.
func Serve(ctx context.Context, store *genericregistry.Store, opts *metainternalversion.ListOptions, kind schema.GroupVersionKind) (out runtime.Object, handled bool, err error) {
	if !servable(ctx, store, opts, kind) {
		return nil, false, nil
	}
	p := storage.Everything
	if opts != nil {
		p.Limit, p.Continue = opts.Limit, opts.Continue
	}
	listOpts := storage.ListOptions{Predicate: p, Recursive: true}
	if opts != nil {
		listOpts.ResourceVersion, listOpts.ResourceVersionMatch = opts.ResourceVersion, opts.ResourceVersionMatch
	}
	list := &List{}
	if err := store.Storage.GetList(ctx, store.KeyRootFunc(ctx), listOpts, list); err != nil {
		return nil, true, storeerr.InterpretListError(err, store.DefaultQualifiedResource)
	}
	resp, err := list.Response(kind, store.Decorator)
	return resp, true, err
}

func servable(ctx context.Context, store *genericregistry.Store, opts *metainternalversion.ListOptions, kind schema.GroupVersionKind) bool {
	if marked, _ := ctx.Value(plainProtobufKey{}).(bool); !marked {
		return false
	}
	if opts != nil && (opts.LabelSelector != nil && !opts.LabelSelector.Empty() ||
		opts.FieldSelector != nil && !opts.FieldSelector.Empty() || opts.ShardSelector != "" || opts.Watch) {
		return false
	}
	k, ok := storedKinds[schema.GroupKind{Group: kind.Group, Kind: trimList(kind.Kind)}]
	if !ok || store.Decorator != nil && !k.decorated {
		return false
	}
	src, ok := store.Storage.Storage.(Source)
	if !ok || !src.ServesStoredLists() {
		return false
	}
	ac := audit.AuditContextFrom(ctx)
	return ac == nil || !ac.Enabled() || ac.GetEventLevel().Less(auditinternal.LevelRequestResponse)
}

// trimList is the kind of a list's items.
func trimList(listKind string) string {
	if n := len(listKind) - len("List"); n > 0 && listKind[n:] == "List" {
		return listKind[:n]
	}
	return listKind
}
