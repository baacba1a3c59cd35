package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// Markers in stored objects' bytes, in a field no API type knows: a list
// served from the stored bytes passes it on, a decode drops it.
const (
	storedMarker  = "marker-served-as-stored"
	decodedMarker = "marker-decoded-in-full"
)

// putStoredProtobuf stores obj (kind in apiVersion) at key as a server
// stores it, protobuf in its envelope, with field 99 holding marker
// appended to its message.
func putStoredProtobuf(ctx context.Context, t *testing.T, etcd *etcdtest.Etcd, key, apiVersion, kind string,
	obj interface{ Marshal() ([]byte, error) }, marker string) {
	t.Helper()
	raw, err := obj.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	raw = protowire.AppendTag(raw, 99, protowire.BytesType)
	raw = protowire.AppendString(raw, marker)
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: raw}
	env, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client().Put(ctx, key, etcdlayout.ProtobufMagic+string(env)); err != nil {
		t.Fatal(err)
	}
}

// clientAccepting is a client of the server that reads accept.
func clientAccepting(t *testing.T, cfg *rest.Config, accept string) kubernetes.Interface {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.AcceptContentTypes = accept
	c.ContentType = strings.Split(accept, ",")[0]
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestStoredLists: a client reading protobuf gets lists of Services and
// IPAddresses served from the bytes etcd holds (internal/rawlist). It must
// read what a JSON client reads of the same lists: the same objects with
// the same resourceVersions, the same list metadata, page by page. That
// includes a Service an older kube-apiserver stored without the fields
// later defaults set (decoded, defaulted and encoded instead) and one
// stored as JSON. A table or JSON is served as before.
func TestStoredLists(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	srv := startServer(t, serverOptions{serviceRange: "10.0.0.0/24", model: "ipaddress", etcd: etcd})
	if _, err := srv.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		ns := "default"
		if i%3 == 0 {
			ns = "legacy"
		}
		mustCreateIn(t, ctx, srv.client.CoreV1().Services(ns), newService(fmt.Sprintf("list-%d", i)))
	}
	layout := etcdlayout.Layout{Prefix: "/registry"}
	single, cluster := corev1.IPFamilyPolicySingleStack, corev1.ServiceInternalTrafficPolicyCluster
	port := []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}
	// As a server writes it: served as stored.
	putStoredProtobuf(ctx, t, etcd, layout.Service("legacy", "current"), "v1", "Service", &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "current", Namespace: "legacy", UID: "33333333-3333-4333-8333-333333333333", CreationTimestamp: metav1.Now()},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.5", ClusterIPs: []string{"10.0.0.5"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: &single, InternalTrafficPolicy: &cluster,
			SessionAffinity: corev1.ServiceAffinityNone, Ports: port},
	}, storedMarker)
	// As a kube-apiserver before dual stack and internalTrafficPolicy wrote
	// it: the read defaults apply, so it is decoded.
	putStoredProtobuf(ctx, t, etcd, layout.Service("legacy", "old"), "v1", "Service", &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "legacy", UID: "44444444-4444-4444-8444-444444444444", CreationTimestamp: metav1.Now()},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.6", SessionAffinity: corev1.ServiceAffinityNone, Ports: port},
	}, decodedMarker)
	// Every default of the decode set, but without families: the read
	// defaulting of the store applies.
	putStoredProtobuf(ctx, t, etcd, layout.Service("legacy", "no-families"), "v1", "Service", &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "no-families", Namespace: "legacy", UID: "66666666-6666-4666-8666-666666666666", CreationTimestamp: metav1.Now()},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.7", ClusterIPs: []string{"10.0.0.7"},
			InternalTrafficPolicy: &cluster, SessionAffinity: corev1.ServiceAffinityNone, Ports: port},
	}, decodedMarker)
	// As a server run with --storage-media-type=application/json wrote it.
	jsonService, err := json.Marshal(&corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "json", Namespace: "legacy", UID: "77777777-7777-4777-8777-777777777777", CreationTimestamp: metav1.Now()},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.8", ClusterIPs: []string{"10.0.0.8"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: &single, InternalTrafficPolicy: &cluster,
			SessionAffinity: corev1.ServiceAffinityNone, Ports: port},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client().Put(ctx, layout.Service("legacy", "json"), string(jsonService)); err != nil {
		t.Fatal(err)
	}
	putStoredProtobuf(ctx, t, etcd, layout.IPAddress("10.0.0.5"), "networking.k8s.io/v1", "IPAddress", &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.5", UID: "55555555-5555-4555-8555-555555555555", CreationTimestamp: metav1.Now()},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "legacy", Name: "current"}},
	}, storedMarker)

	pb := clientAccepting(t, srv.restConfig, "application/vnd.kubernetes.protobuf,application/json")
	js := clientAccepting(t, srv.restConfig, "application/json")
	// One revision for both clients' lists: the repair may still write.
	head, err := js.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(head.Items); n != 14 {
		t.Fatalf("%d Services listed, want the 10 created and the 4 stored", n)
	}
	at := metav1.ListOptions{ResourceVersion: head.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	for _, limit := range []int64{0, 4} {
		for _, ns := range []string{"", "legacy"} {
			compareServicePages(ctx, t, pb, js, ns, at, limit)
		}
		compareIPAddressPages(ctx, t, pb, js, at, limit)
	}

	// The protobuf lists were served from the stored bytes: the marker no
	// API type knows is in them, but not that of the Service decoded.
	body := rawList(ctx, t, pb, "/api/v1/namespaces/legacy/services", "application/vnd.kubernetes.protobuf")
	if !bytes.Contains(body, []byte(storedMarker)) || bytes.Contains(body, []byte(decodedMarker)) {
		t.Errorf("the protobuf list of Services holds the stored marker: %v, the decoded one's: %v (want true, false)",
			bytes.Contains(body, []byte(storedMarker)), bytes.Contains(body, []byte(decodedMarker)))
	}
	if body := rawList(ctx, t, pb, "/apis/networking.k8s.io/v1/ipaddresses", "application/vnd.kubernetes.protobuf"); !bytes.Contains(body, []byte(storedMarker)) {
		t.Error("the protobuf list of IPAddresses was not served from the stored bytes")
	}
	for _, accept := range []string{"application/json", "application/json;as=Table;v=v1;g=meta.k8s.io,application/vnd.kubernetes.protobuf"} {
		body := rawList(ctx, t, pb, "/api/v1/namespaces/legacy/services", accept)
		if bytes.Contains(body, []byte(storedMarker)) || !bytes.HasPrefix(body, []byte("{")) {
			t.Errorf("Accept %q: served from the stored bytes, or not as JSON: %.80q", accept, body)
		}
		if strings.Contains(accept, "Table") && !bytes.Contains(body, []byte(`"kind":"Table"`)) {
			t.Errorf("Accept %q: not a table: %.80q", accept, body)
		}
	}
}

// compareServicePages lists namespace's Services (all: "") through both
// clients in pages of limit (0: one), at opts' revision, and requires the
// same pages.
func compareServicePages(ctx context.Context, t *testing.T, pb, js kubernetes.Interface, namespace string, opts metav1.ListOptions, limit int64) {
	t.Helper()
	compareListPages(t, "Services of "+namespace, opts, limit,
		func(opts metav1.ListOptions) (*corev1.ServiceList, error) {
			return pb.CoreV1().Services(namespace).List(ctx, opts)
		},
		func(opts metav1.ListOptions) (*corev1.ServiceList, error) {
			return js.CoreV1().Services(namespace).List(ctx, opts)
		})
}

// compareIPAddressPages is compareServicePages for the IPAddresses.
func compareIPAddressPages(ctx context.Context, t *testing.T, pb, js kubernetes.Interface, opts metav1.ListOptions, limit int64) {
	t.Helper()
	compareListPages(t, "IPAddresses", opts, limit,
		func(opts metav1.ListOptions) (*networkingv1.IPAddressList, error) {
			return pb.NetworkingV1().IPAddresses().List(ctx, opts)
		},
		func(opts metav1.ListOptions) (*networkingv1.IPAddressList, error) {
			return js.NetworkingV1().IPAddresses().List(ctx, opts)
		})
}

// compareListPages lists what through the protobuf and the JSON client's list
// in pages of limit (0: one), from opts, and requires the same pages, none
// of them empty.
func compareListPages[L interface {
	runtime.Object
	GetContinue() string
}](t *testing.T, what string, opts metav1.ListOptions, limit int64, pbList, jsList func(metav1.ListOptions) (L, error)) {
	t.Helper()
	opts.Limit = limit
	for page := 0; ; page++ {
		a, err := pbList(opts)
		if err != nil {
			t.Fatalf("protobuf list of %s, page %d: %v", what, page, err)
		}
		b, err := jsList(opts)
		if err != nil {
			t.Fatalf("JSON list of %s, page %d: %v", what, page, err)
		}
		_ = meta.EachListItem(b, func(item runtime.Object) error { // protobuf carries no item's kind
			item.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			return nil
		})
		if meta.LenList(a) == 0 || !apiequality.Semantic.DeepEqual(a, b) {
			t.Fatalf("%s, page %d of %d: empty, or protobuf and JSON differ:\n%s", what, page, limit, listDiff(a, b))
		}
		if a.GetContinue() == "" || page > 10 {
			return
		}
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = a.GetContinue(), "", ""
	}
}

// listDiff shows how two lists differ, as JSON.
func listDiff(a, b any) string {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return cmp.Diff(string(ja), string(jb))
}

// rawList GETs path with accept and returns the body as served.
func rawList(ctx context.Context, t *testing.T, c kubernetes.Interface, path, accept string) []byte {
	t.Helper()
	rc := c.CoreV1().RESTClient()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rc.Get().AbsPath(path).URL().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := rc.(*rest.RESTClient).Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s (Accept %s): %d %v: %.200s", path, accept, resp.StatusCode, err, body)
	}
	return body
}

// TestStoredListsUnderWrites: while four clients create and delete
// Services, lists in protobuf (served from the stored bytes) and in JSON
// at one revision, page by page, hold the same Services and list metadata,
// and no Service in them is newer than the list.
func TestStoredListsUnderWrites(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	srv := startServer(t, serverOptions{serviceRange: "10.0.0.0/22", model: "ipaddress"})
	pb := clientAccepting(t, srv.restConfig, "application/vnd.kubernetes.protobuf,application/json")
	js := clientAccepting(t, srv.restConfig, "application/json")
	for i := range 30 {
		mustCreate(t, ctx, srv.client, newService(fmt.Sprintf("base-%02d", i)))
	}

	writeCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var created atomic.Int64
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			svcs := srv.client.CoreV1().Services("default")
			for i := 0; i < 200 && writeCtx.Err() == nil; i++ {
				name := fmt.Sprintf("w%d-%03d", w, i)
				if _, err := svcs.Create(writeCtx, newService(name), metav1.CreateOptions{}); err != nil {
					if writeCtx.Err() == nil {
						errs <- fmt.Errorf("create %s: %w", name, err)
					}
					return
				}
				created.Add(1)
				if i%2 == 1 { // keep half of them
					if err := svcs.Delete(writeCtx, name, metav1.DeleteOptions{}); err != nil && writeCtx.Err() == nil {
						errs <- fmt.Errorf("delete %s: %w", name, err)
						return
					}
				}
			}
		})
	}
	for created.Load() == 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	before := created.Load()
	for round := range 15 {
		head, err := js.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		at := metav1.ListOptions{ResourceVersion: head.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
		compareServicePages(ctx, t, pb, js, "", at, int64(7+round))
		compareIPAddressPages(ctx, t, pb, js, at, int64(11+round))
		// Unpinned: each page newer than none of its Services.
		list, err := pb.CoreV1().Services("default").List(ctx, metav1.ListOptions{Limit: 13})
		if err != nil {
			t.Fatal(err)
		}
		listRV, _ := strconv.ParseUint(list.ResourceVersion, 10, 64)
		for _, s := range list.Items {
			if rv, err := strconv.ParseUint(s.ResourceVersion, 10, 64); err != nil || rv == 0 || rv > listRV {
				t.Fatalf("Service %s at resourceVersion %q in a list at %d", s.Name, s.ResourceVersion, listRV)
			}
		}
	}
	during := created.Load() - before
	stop()
	wg.Wait()
	close(errs)
	if during < 20 {
		t.Errorf("only %d creates during the lists: the test raced too little", during)
	}
	t.Logf("%d creates during the lists", during)
	for err := range errs {
		t.Error(err)
	}
}
