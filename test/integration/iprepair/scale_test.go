package iprepair_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
)

// TestScaleTimings measures a full repair pass and a migration in each
// direction on N Services (ALLOCATOR_SCALE=N; skipped when unset). It is a
// measurement, not a check of speed: it asserts only correctness.
//
//	ALLOCATOR_SCALE=50000 go test -run TestScaleTimings -v -timeout 60m ./test/integration/iprepair/
func TestScaleTimings(t *testing.T) {
	t.Parallel()
	n, err := strconv.Atoi(os.Getenv("ALLOCATOR_SCALE"))
	if err != nil || n <= 0 {
		t.Skip("set ALLOCATOR_SCALE=N to measure repair and migration on N Services")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	etcd := etcdtest.New(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/16,fd00::/112", Model: "bitmap", Etcd: etcd})
	start := time.Now()
	createMany(t, srv.Client, n)
	t.Logf("created %d Services in %v", n, time.Since(start))
	stores := familyStores(t, etcd, "10.0.0.0/16", "fd00::/112")

	bitmapRepair, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client}, Stores: stores})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	rep, err := bitmapRepair.RunOnce(ctx)
	if err != nil || !rep.Consistent() {
		t.Fatalf("bitmap repair: %v %v", err, rep)
	}
	t.Logf("bitmap repair pass, %d Services: %v", n, time.Since(start))

	start = time.Now()
	migration, err := iprepair.MigrateToIPAddress(ctx, iprepair.MigrateConfig{Client: srv.Client, Workers: 32})
	if err != nil || !migration.Verified {
		t.Fatalf("migrate to ipaddress: %v %v", err, migration)
	}
	t.Logf("bitmap → IPAddress migration, %d Services: %v (%s)", n, time.Since(start), migration)

	ipRepair, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client}})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	rep, err = ipRepair.RunOnce(ctx)
	if err != nil || !rep.Consistent() {
		t.Fatalf("ipaddress repair: %v %v", err, rep)
	}
	t.Logf("IPAddress repair pass, %d Services: %v", n, time.Since(start))

	start = time.Now()
	migration, err = iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: srv.Client, Stores: stores})
	if err != nil || !migration.Verified {
		t.Fatalf("migrate to bitmap: %v %v", err, migration)
	}
	t.Logf("IPAddress → bitmap migration, %d Services: %v (%s)", n, time.Since(start), migration)
}
