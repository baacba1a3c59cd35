package integration

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/releasetest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/dualwrite"
)

// TestReleaseThroughCachedObject: the server's own allocator releases an
// IPAddress by handing the storage the informer's copy
// (ipaddresses.InProcess.DeleteExact: no read before the delete); the
// scenario is internal/releasetest's.
func TestReleaseThroughCachedObject(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var v4 *ipaddress.Allocator
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress",
		WrapAllocator: func(a allocation.Interface) allocation.Interface {
			mu.Lock()
			defer mu.Unlock()
			switch x := a.(type) {
			case *ipaddress.Allocator:
				v4 = x
			case *dualwrite.Allocator:
				v4 = x.IPAddress()
			}
			return a
		}})
	mu.Lock()
	a := v4
	mu.Unlock()
	if a == nil {
		t.Fatal("the server's IPAddress allocator was not seen")
	}
	releasetest.Run(t, ctx, a, srv.Client, netip.MustParseAddr("10.0.0.20"), 30)
}
