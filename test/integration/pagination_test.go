package integration

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// TestPagedListAtOneResourceVersion: with the watch cache's
// ListFromCacheSnapshot off (internal/apiserver/features.go), the pages after the
// first and a LIST at an exact older resourceVersion are read from etcd.
// They must answer as the cache's snapshots did: every Service once, at the
// first page's resourceVersion, without one created or deleted between the
// pages; and the exact LIST shows the state at its resourceVersion.
func TestPagedListAtOneResourceVersion(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	srv := startServer(t, serverOptions{serviceRange: "10.0.0.0/24", model: "ipaddress"})
	if utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Fatal("ListFromCacheSnapshot is on in a running server")
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.ConcurrentWatchObjectDecode) {
		t.Fatal("ConcurrentWatchObjectDecode is on in a running server")
	}
	c := srv.client.CoreV1().Services("default")
	for i := range 11 {
		mustCreate(t, ctx, srv.client, newService(fmt.Sprintf("page-%02d", i)))
	}
	first, err := c.List(ctx, metav1.ListOptions{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	rv := first.ResourceVersion
	// Changes after the first page: neither may show in the later pages.
	mustCreate(t, ctx, srv.client, newService("page-late"))
	mustDelete(t, ctx, srv.client, "page-00")

	var names []string
	for _, s := range first.Items {
		names = append(names, s.Name)
	}
	for page, cont := 1, first.Continue; cont != ""; page++ {
		if page > 10 {
			t.Fatalf("more than 10 pages of 4 for 12 Services")
		}
		next, err := c.List(ctx, metav1.ListOptions{Limit: 4, Continue: cont})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if next.ResourceVersion != rv {
			t.Errorf("page %d at resourceVersion %s, the first at %s", page, next.ResourceVersion, rv)
		}
		for _, s := range next.Items {
			names = append(names, s.Name)
		}
		cont = next.Continue
	}
	want := []string{"kubernetes"}
	for i := range 11 {
		want = append(want, fmt.Sprintf("page-%02d", i))
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("paged list: %v, want %v", names, want)
	}

	exact, err := c.List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range exact.Items {
		got = append(got, s.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("list at exact resourceVersion %s: %v, want %v", rv, got, want)
	}
}
