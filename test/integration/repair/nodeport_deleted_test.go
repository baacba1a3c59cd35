package repair_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"

	"github.com/allocator/allocator/pkg/bitmap"
)

// racingPortStore runs before once, just ahead of the pass's first write.
type racingPortStore struct {
	*nodeport.EtcdAllocator
	once   sync.Once
	before func()
}

func (s *racingPortStore) CompareAndWrite(ctx context.Context, data []byte, base bitmap.StoredMap) (int64, error) {
	s.once.Do(s.before)
	return s.EtcdAllocator.CompareAndWrite(ctx, data, base)
}

// TestNodePortRepairServiceDeletedDuringPass is
// TestBitmapRepairServiceDeletedDuringPass for node ports: a Service listed
// without its port's bit and deleted before the pass writes (while an
// allocation moves the map on, so the write is merged onto a fresh read)
// gets no bit and no PortNotAllocated; a Service that still exists gets its
// bit.
func TestNodePortRepairServiceDeletedDuringPass(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24"})
	etcd := srv.Etcd.Client()
	old := time.Now().Add(-time.Hour)
	plantNodePortService(t, etcd, "gone", 30060, old)
	plantNodePortService(t, etcd, "kept", 30070, old)
	repairtest.WaitListed(t, srv, "default", "gone", true)
	repairtest.WaitListed(t, srv, "default", "kept", true)

	ports, err := nodeport.NewEtcd(etcd, etcdlayout.Layout{}.ServiceNodePortRange(), nodeport.MustParse(nodeport.Default), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &racingPortStore{EtcdAllocator: ports}
	store.before = func() {
		if err := srv.Client.CoreV1().Services("default").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete gone: %v", err)
		}
		// Another allocation: the pass's compare-and-swap now fails.
		if err := store.Allocate(ctx, 30080); err != nil {
			t.Errorf("allocate: %v", err)
		}
	}
	ctrl, err := repair.NewNodePortRepair(repair.NodePortConfig{Options: repair.Options{Client: srv.Client}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ctrl.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var notAllocated []string
	for _, p := range rep.Problems {
		if p.Reason == repair.ReasonPortNotAllocated {
			notAllocated = append(notAllocated, p.IP)
		}
	}
	if len(notAllocated) != 1 || notAllocated[0] != "30070" {
		t.Errorf("PortNotAllocated for %v, want only 30070 (gone was deleted before the write)", notAllocated)
	}
	for port, want := range map[int]bool{30060: false, 30070: true, 30080: true} {
		has, err := store.Has(ctx, port)
		if err != nil || has != want {
			t.Errorf("bit of %d = %v (%v), want %v", port, has, err, want)
		}
	}
}
