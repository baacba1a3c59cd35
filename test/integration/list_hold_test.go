package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/listhold"
	"github.com/allocator/allocator/internal/testserver"
)

// holdCompaction is the compaction interval of these tests: a paged list
// that pauses for pageGap between its pages outlasts several compactions.
const (
	holdCompaction = 300 * time.Millisecond
	pageGap        = 400 * time.Millisecond
)

// holdLimits end a hold after 2 s without a page.
var holdLimits = listhold.Limits{Idle: 2 * time.Second, MaxAge: time.Minute}

// startHoldServer starts a server on e (nil: its own etcd) that compacts
// every interval (negative: never).
func startHoldServer(t *testing.T, e *etcdtest.Etcd, interval time.Duration) *testserver.Server {
	t.Helper()
	return testserver.Start(t, testserver.Options{
		ServiceRange: "10.0.0.0/24",
		Model:        "ipaddress",
		Etcd:         e,
		WithRepair:   true,
		Configure: func(cfg *apiserver.Config) {
			cfg.CompactionInterval = interval
			cfg.ListHoldLimits = holdLimits
		},
	})
}

// TestPagedListOutlivesCompaction: a list paged slowly while Services are
// written and etcd is compacted every 300 ms reads every page at its first
// page's revision; a list whose client stops asking for pages longer than
// the hold's idle limit ends in 410 Expired, as every list did before.
func TestPagedListOutlivesCompaction(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	srv := startHoldServer(t, nil, holdCompaction)
	want := createListed(t, ctx, srv.Client, 12)
	defer testserver.Churn(t, ctx, srv.Client, "default")()

	got, err := pageSlowly(ctx, srv.Client, pageGap, 0)
	if err != nil {
		t.Fatalf("a list paged every %v with etcd compacted every %v: %v", pageGap, holdCompaction, err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged list: %v, want %v", got, want)
	}

	// A pause past the idle limit: the hold ends and the compaction takes
	// the list's revision.
	_, err = pageSlowly(ctx, srv.Client, pageGap, holdLimits.Idle+3*holdCompaction)
	if !apierrors.IsResourceExpired(err) {
		t.Errorf("a list paused for %v past its hold's idle limit: %v, want 410 Expired", holdLimits.Idle+3*holdCompaction, err)
	}
}

// TestListHoldAcrossServers: the list is paged on a server that compacts
// nothing while another compacts etcd every 300 ms; the hold the first
// publishes stops the second's compaction at the list's revision.
func TestListHoldAcrossServers(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := etcdtest.New(t)
	lister := startHoldServer(t, e, -1)
	compactor := startHoldServer(t, e, holdCompaction)
	want := createListed(t, ctx, compactor.Client, 12)
	defer testserver.Churn(t, ctx, compactor.Client, "default")()

	got, err := pageSlowly(ctx, lister.Client, pageGap, 0)
	if err != nil {
		t.Fatalf("a list paged every %v on one server, another compacting every %v: %v", pageGap, holdCompaction, err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged list: %v, want %v", got, want)
	}
	_, err = pageSlowly(ctx, lister.Client, pageGap, holdLimits.Idle+3*holdCompaction)
	if !apierrors.IsResourceExpired(err) {
		t.Errorf("a list paused past its hold's idle limit: %v, want 410 Expired", err)
	}
}

// createListed creates n Services in "listed" and returns their names,
// sorted.
func createListed(t *testing.T, ctx context.Context, c kubernetes.Interface, n int) []string {
	t.Helper()
	mustCreateNamespace(t, ctx, c, "listed", nil)
	var names []string
	for i := range n {
		svc := newService(fmt.Sprintf("listed-%02d", i))
		svc.Namespace = "listed"
		if _, err := c.CoreV1().Services("listed").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, svc.Name)
	}
	return names
}

// pageSlowly lists the Services of "listed" in pages of 2, waiting gap
// between pages and pause once before the second, and returns their names
// in order. Every page must be at the first page's resourceVersion.
func pageSlowly(ctx context.Context, c kubernetes.Interface, gap, pause time.Duration) ([]string, error) {
	svcs := c.CoreV1().Services("listed")
	first, err := svcs.List(ctx, metav1.ListOptions{Limit: 2})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range first.Items {
		names = append(names, s.Name)
	}
	time.Sleep(pause)
	for page, cont := 1, first.Continue; cont != ""; page++ {
		if page > 20 {
			return nil, fmt.Errorf("more than 20 pages of 2")
		}
		time.Sleep(gap)
		next, err := svcs.List(ctx, metav1.ListOptions{Limit: 2, Continue: cont})
		if err != nil {
			return nil, fmt.Errorf("page %d: %w", page, err)
		}
		if next.ResourceVersion != first.ResourceVersion {
			return nil, fmt.Errorf("page %d at resourceVersion %s, the first at %s", page, next.ResourceVersion, first.ResourceVersion)
		}
		for _, s := range next.Items {
			names = append(names, s.Name)
		}
		cont = next.Continue
	}
	return names, nil
}
