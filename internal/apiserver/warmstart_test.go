package apiserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/internal/streaminformer"
	"github.com/allocator/allocator/internal/warmstart"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// decodedForInformer decodes each stored object as the informer keeps it,
// with a resource version of its own.
func decodedForInformer(t *testing.T, codec runtime.Codec, stored map[string][]byte) []any {
	t.Helper()
	names := make([]string, 0, len(stored))
	for name := range stored {
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []any
	for i, name := range names {
		obj, err := runtime.Decode(codec, stored[name])
		if err != nil {
			continue // the informer's codec refuses it: never in a store
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		m.SetResourceVersion(strconv.Itoa(100 + i))
		// A file holds the object's message, not the type meta around it;
		// the informers' readers take an unset one (the scheme answers).
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		objs = append(objs, obj)
	}
	return objs
}

// TestWarmStartFilesRoundTrip: what an informer keeps of every stored
// Service and IPAddress the decode tests know (slim Services, compact
// IPAddresses, their resource versions) comes back equal from its
// warm-start file, as LoadWarmStart decodes it; the allocators' IPAddresses
// share their family's labels again.
func TestWarmStartFilesRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	services := decodedForInformer(t, slimServiceCodec(storageCodec("")), storedServices(t))
	ipAddresses := decodedForInformer(t, compactIPAddressCodec(storageCodec(networkingv1.GroupName)), storedIPAddresses(t))
	if len(services) < 10 || len(ipAddresses) < 5 {
		t.Fatalf("only %d Services and %d IPAddresses to write", len(services), len(ipAddresses))
	}
	h := warmstart.Header{Token: warmstart.Token{ID: "t", Revision: 9}, ResourceVersion: "8"}
	for file, objs := range map[string][]any{warmServices: services, warmIPAddresses: ipAddresses} {
		if err := warmstart.Write(filepath.Join(dir, file), h, objs); err != nil {
			t.Fatal(err)
		}
	}
	ws := LoadWarmStart(dir)
	for file, want := range map[string][]any{warmServices: services, warmIPAddresses: ipAddresses} {
		l := ws.loads[file]
		<-l.done
		if l.err != nil {
			t.Fatalf("%s: %v", file, l.err)
		}
		if l.header.ResourceVersion != "8" || l.header.Token != h.Token {
			t.Errorf("%s: header %+v", file, l.header)
		}
		if diff := cmp.Diff(want, l.objs); diff != "" {
			t.Errorf("%s read back (-written +read):\n%s", file, diff)
		}
	}
	shared := 0
	for _, obj := range ws.loads[warmIPAddresses].objs {
		ipa := obj.(*networkingv1.IPAddress)
		for _, family := range []string{"IPv4", "IPv6"} {
			if cmp.Equal(ipa.Labels, slim.SharedLabels(family)) {
				shared++
				if !sameMap(ipa.Labels, slim.SharedLabels(family)) {
					t.Errorf("IPAddress %s, an allocator's of %s, read back with a label map of its own", ipa.Name, family)
				}
			}
		}
	}
	if shared < 2 {
		t.Errorf("%d allocator IPAddresses read back, want at least 2", shared)
	}
}

// TestWarmStartNoFiles: a start with no warm-start files has nothing to
// seed from, and one with a damaged file seeds nothing from it. What a
// stop killed during its write left (a temporary file of each) is removed,
// and no file is read from it.
func TestWarmStartNoFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, warmServices), []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	// As a killed Write leaves them: a valid start of a File, cut short.
	partial := filepath.Join(dir, warmIPAddresses+".4711.tmp")
	if err := os.WriteFile(partial, []byte("allocator warm start\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := LoadWarmStart(dir)
	if _, err := os.Stat(partial); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a killed write's temporary file is still there: %v", err)
	}
	for file, want := range map[string]error{warmServices: warmstart.ErrCorrupt, warmIPAddresses: os.ErrNotExist} {
		l := ws.loads[file]
		<-l.done
		if !errors.Is(l.err, want) || l.objs != nil {
			t.Errorf("%s: %v with %d objects, want %v and none", file, l.err, len(l.objs), want)
		}
	}
}

// idleSource is a watch source whose watches never send anything.
type idleSource struct{}

func (idleSource) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

// stoppedSeeded returns a stopped Service informer whose store was seeded
// with objs at rv: one whose Snapshot a shutdown writes.
func stoppedSeeded(t *testing.T, rv string, objs ...any) *streaminformer.Informer {
	t.Helper()
	inf := streaminformer.New(idleSource{}, "Service", nil)
	seed := func(context.Context) ([]any, string, bool) { return objs, rv, true }
	if err := inf.SetSeed(seed, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); len(inf.GetStore().ListKeys()) < len(objs); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the seed was not stored")
		}
	}
	cancel()
	<-done
	return inf
}

// refusingKV fails every put, as etcd does when it is down or out of space.
type refusingKV struct{ clientv3.KV }

func (refusingKV) Put(context.Context, string, string, ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return nil, errors.New("etcdserver: mvcc: database space exceeded")
}

// TestWarmStartSave: a shutdown writes a file of each stopped store, named
// by a token it put in etcd, which the next start's check accepts; when
// etcd refuses the token, the shutdown writes no file (a file without its
// token would be refused anyway).
func TestWarmStartSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := etcdtest.New(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "1"}}
	infs := map[string]*streaminformer.Informer{warmServices: stoppedSeeded(t, "1", svc)}

	refused := t.TempDir()
	if err := LoadWarmStart(refused).save(ctx, refusingKV{}, "/registry", infs); err == nil {
		t.Error("saved with the token refused")
	}
	if entries, _ := os.ReadDir(refused); len(entries) != 0 {
		t.Errorf("files written without a token: %v", entries)
	}

	dir := t.TempDir()
	if err := LoadWarmStart(dir).save(ctx, e.Client(), "/registry", infs); err != nil {
		t.Fatal(err)
	}
	l := LoadWarmStart(dir).loads[warmServices]
	<-l.done
	if l.err != nil || len(l.objs) != 1 || l.header.ResourceVersion != "1" {
		t.Fatalf("read back %d objects at %q: %v", len(l.objs), l.header.ResourceVersion, l.err)
	}
	if err := l.header.Token.Check(ctx, e.Client(), etcdlayout.Layout{Prefix: "/registry"}.WarmStart(), "1"); err != nil {
		t.Errorf("the written token: %v", err)
	}
}
