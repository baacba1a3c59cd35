package apiserver

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/internal/warmstart"
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
