package repair

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestStoredServices: the Services a pass reads from etcd are every stored
// Service, oldest first, each with its ModRevision as resourceVersion, in
// pages (more than the first page of report.ListPageSize); Services
// encrypted at rest are listed through the API server instead; a value
// that does not decode fails the read, naming its key.
func TestStoredServices(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	layout := etcdlayout.Layout{Prefix: "/registry"}
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 5200
	var want []string
	revs := map[string]int64{}
	for i := range n {
		// Names in key order, ages in the reverse: the oldest is stored last.
		name := "s-" + strconv.Itoa(10000+i)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			CreationTimestamp: metav1.NewTime(epoch.Add(-time.Duration(i) * time.Second))}}
		data, err := etcdlayout.Encode(svc)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.Client().Put(ctx, layout.Service("default", name), string(data))
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{name}, want...)
		revs[name] = resp.Header.Revision
	}
	services, err := StoredServices{Stored: e.Stored(layout)}.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, svc := range services {
		got = append(got, svc.Name)
		if rv := strconv.FormatInt(revs[svc.Name], 10); svc.ResourceVersion != rv {
			t.Errorf("%s: resourceVersion %q, want its ModRevision %s", svc.Name, svc.ResourceVersion, rv)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Services, oldest first (-want +got):\n%s", diff)
	}

	// Encrypted at rest: listed through the API server instead.
	encrypted := layout.Service("other", "secret")
	if _, err := e.Client().Put(ctx, encrypted, "k8s:enc:aescbc:v1:key1:..."); err != nil {
		t.Fatal(err)
	}
	fromAPI := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "secret"}}
	listed, err := StoredServices{Stored: e.Stored(layout), Client: fake.NewClientset(fromAPI)}.Services(ctx)
	if err != nil || len(listed) != 1 || listed[0].Name != "secret" {
		t.Errorf("with a Service encrypted at rest: %d Services (%v), want the API server's one", len(listed), err)
	}
	if _, err := e.Client().Delete(ctx, encrypted); err != nil {
		t.Fatal(err)
	}

	bad := layout.Service("other", "bad")
	if _, err := e.Client().Put(ctx, bad, "not an object"); err != nil {
		t.Fatal(err)
	}
	var keyErr *etcdlayout.KeyError
	if _, err := (StoredServices{Stored: e.Stored(layout)}).Services(ctx); !errors.As(err, &keyErr) || keyErr.Key != bad {
		t.Errorf("a value that does not decode: %v, want an error naming %s", err, bad)
	}
}
