package iprepair_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestIPAddressRepairRunFirstPassCarriesOver is the server's start in the
// IPAddress model: its repair's first pass stands for the carry-over from
// the bitmap model. Run holds that pass until Start closes (the server
// closes it once the ServiceCIDRs it writes at start are in the informers),
// creates the IPAddress of a Service that has none quietly, as carried over,
// and only after that pass treats a missing IPAddress as a fault again
// (ClusterIPNotAllocated).
func TestIPAddressRepairRunFirstPassCarriesOver(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := ipaddressServer(t, "10.0.0.0/24")
	repairtest.PlantService(t, srv.Etcd.Client(), "default", "old", []string{"10.0.0.40"}, time.Now())
	start := make(chan struct{})
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{
		Options:              repair.Options{Client: srv.Client, Recorder: report.NewEventRecorder(ctx, srv.Client), Interval: time.Hour, OrphanGrace: time.Hour},
		FirstPassCarriesOver: true, Start: start,
	})
	if err != nil {
		t.Fatal(err)
	}
	firstPass, stop := startRepair(ctx, t, ctrl)

	select {
	case <-firstPass:
		t.Fatal("the first pass ran before Start closed")
	case <-time.After(time.Second):
	}
	if getIPAddress(t, srv, "10.0.0.40") != nil {
		t.Fatal("an IPAddress was created before Start closed")
	}
	close(start)
	select {
	case <-firstPass:
	case <-ctx.Done():
		t.Fatal("no first pass after Start closed")
	}
	checkClaim(t, srv, "10.0.0.40", "default", "old")
	if n := ctrl.CarriedOver(); n != 1 {
		t.Errorf("CarriedOver() = %d after the first pass, want 1", n)
	}

	// After the first pass a missing IPAddress is a fault, with its event.
	repairtest.PlantService(t, srv.Etcd.Client(), "default", "later", []string{"10.0.0.41"}, time.Now())
	waitObjectEvent(t, srv, "Service", "default", "later", report.ReasonNotAllocated, "Cluster IP [IPv4]: 10.0.0.41 is not allocated; repairing")
	checkClaim(t, srv, "10.0.0.41", "default", "later")
	if n := ctrl.CarriedOver(); n != 1 {
		t.Errorf("CarriedOver() = %d after a later create, want 1", n)
	}
	// The recorder sends events in order: the later one is stored, so the
	// carried one would be too.
	events, err := srv.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == "old" {
			t.Errorf("event on the carried-over Service: %s %s", e.Reason, e.Message)
		}
	}

	stop()
}
