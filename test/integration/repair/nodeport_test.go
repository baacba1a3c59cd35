package repair_test

import (
	"github.com/allocator/allocator/pkg/repair"

	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/repair/report"
)

// plantNodePortService writes a NodePort Service straight into etcd,
// bypassing allocation.
func plantNodePortService(t *testing.T, client *clientv3.Client, name string, nodePort int32, created time.Time) {
	t.Helper()
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceDefault, UID: types.UID(uuid.NewUUID()),
			CreationTimestamp: metav1.NewTime(created.Truncate(time.Second)),
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(80), NodePort: nodePort}},
		},
	}
	value, err := etcdlayout.Encode(svc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(context.Background(), etcdlayout.Layout{}.Service(metav1.NamespaceDefault, name), string(value)); err != nil {
		t.Fatal(err)
	}
}

func TestNodePortRepairPlantedFaults(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24"})
	etcd := srv.Etcd.Client()
	store, err := nodeport.NewEtcd(etcd, etcdlayout.Layout{}.ServiceNodePortRange(), nodeport.MustParse(nodeport.Default), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := srv.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "good"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 30050}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	plantNodePortService(t, etcd, "missing", 30100, base)
	plantNodePortService(t, etcd, "first", 30200, base)
	plantNodePortService(t, etcd, "second", 30200, base.Add(time.Minute))
	plantNodePortService(t, etcd, "outside", 20000, base)
	if err := store.Allocate(ctx, 30300); err != nil { // a leak
		t.Fatal(err)
	}
	repairtest.WaitListed(t, srv, "default", "outside", true)

	now := time.Now()
	r, err := repair.NewNodePortRepair(repair.NodePortConfig{Options: repair.Options{Client: srv.Client, Recorder: report.NewSyncEventRecorder(srv.Client, func(err error) { t.Error(err) }), LeakGrace: time.Minute, Now: func() time.Time { return now }}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ typ, port, reason, svc string }{
		{report.TypeRepair, "30100", repair.ReasonPortNotAllocated, "default/missing"},
		{report.TypeDuplicate, "30200", repair.ReasonPortAlreadyAllocated, "default/second"},
		{report.TypeOutOfRange, "20000", repair.ReasonPortOutOfRange, "default/outside"},
		{report.TypeLeak, "30300", "", ""},
	} {
		p, ok := rep.Find(want.typ, want.port)
		if !ok || p.Reason != want.reason || p.Service != want.svc {
			t.Errorf("want %s %s (%s, %s), report: %+v", want.typ, want.port, want.reason, want.svc, rep.Problems)
		}
	}
	if _, ok := rep.Find(report.TypeRepair, strconv.Itoa(int(good.Spec.Ports[0].NodePort))); ok {
		t.Error("the Service created through the API was reported")
	}
	if has, _ := store.Has(ctx, 30100); !has {
		t.Error("the missing port 30100 was not set again")
	}
	if p, _ := rep.Find(report.TypeOutOfRange, "20000"); p.Fixed || rep.Unresolved() != 3 {
		t.Errorf("unresolved %d, want 3 (duplicate, out of range, leak not yet freed)", rep.Unresolved())
	}
	// Events with upstream's reasons, on the Services.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := srv.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		var reasons []string
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason+"/"+e.InvolvedObject.Name)
		}
		for _, want := range []string{"PortNotAllocated/missing", "PortAlreadyAllocated/second", "PortOutOfRange/outside"} {
			if !slices.Contains(reasons, want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("events: %v", err)
	}

	// The leak: kept on passes 2 and 3 while the grace runs, freed on the
	// first pass past both.
	for pass := 2; pass <= 3; pass++ {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if has, _ := store.Has(ctx, 30300); !has {
			t.Fatalf("leak 30300 freed on pass %d", pass)
		}
	}
	now = now.Add(2 * time.Minute)
	rep, err = r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := rep.Find(report.TypeLeak, "30300"); !ok || !p.Fixed {
		t.Errorf("4th pass past the grace did not free the leak: %+v", rep.Problems)
	}
	if has, _ := store.Has(ctx, 30300); has {
		t.Error("leak 30300 still set")
	}
	for _, port := range []int{30050, 30100, 30200} {
		if has, _ := store.Has(ctx, port); !has {
			t.Errorf("held port %d not set after the passes", port)
		}
	}
}
