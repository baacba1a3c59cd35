package services

import (
	"context"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
)

type recorded []string

func (r *recorded) AddWarning(_, text string) { *r = append(*r, text) }

// TestStaticHintWarnings: a create warns of each ClusterIP it asks for that
// the hint names; an update only of those the stored Service does not hold.
func TestStaticHintWarnings(t *testing.T) {
	t.Parallel()
	r := &REST{hint: func(ip netip.Addr) string {
		if netip.MustParsePrefix("10.6.0.0/24").Contains(ip) {
			return "hint " + ip.String()
		}
		return ""
	}}
	service := func(ips ...string) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIPs: ips}}
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
		return s
	}
	var got recorded
	ctx := warning.WithWarningRecorder(context.Background(), &got)
	r.warnRequested(ctx, service("10.6.0.7", "fd00::7"), nil)
	r.warnRequested(ctx, &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.6.0.8"}}, nil) // clusterIP alone
	r.warnRequested(ctx, service("None"), nil)
	r.warnRequested(ctx, service("10.9.0.1"), nil)
	if diff := cmp.Diff(recorded{"hint 10.6.0.7", "hint 10.6.0.8"}, got); diff != "" {
		t.Errorf("creates (-want +got):\n%s", diff)
	}

	got = nil
	info := hintedInfo{UpdatedObjectInfo: rest.DefaultUpdatedObjectInfo(service("10.96.0.5", "10.6.0.9")), r: r}
	if _, err := info.UpdatedObject(ctx, service("10.96.0.5")); err != nil {
		t.Fatal(err)
	}
	info = hintedInfo{UpdatedObjectInfo: rest.DefaultUpdatedObjectInfo(service("10.6.0.5")), r: r}
	if _, err := info.UpdatedObject(ctx, service("10.6.0.5")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(recorded{"hint 10.6.0.9"}, got); diff != "" {
		t.Errorf("updates (-want +got):\n%s", diff)
	}
}
