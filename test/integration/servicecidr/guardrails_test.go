package servicecidr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// guardedServer runs a dual-stack server whose guardrails allow 10.0.0.0/8
// and fd00::/48, forbid the pod networks 10.244.0.0/16 and
// fd00:0:0:244::/64, and bound the prefixes to /16–/28 (IPv4) and
// /64–/120 (IPv6).
func guardedServer(t *testing.T) *testserver.Server {
	return testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24,fd00::/112", Model: "ipaddress",
		Flags: func(o *apiserver.Options) {
			o.Guardrails = apiserver.GuardrailOptions{
				AllowedPrefixes:   []string{"10.0.0.0/8", "fd00::/48"},
				ForbiddenPrefixes: []string{"10.244.0.0/16", "fd00:0:0:244::/64"},
				IPv4:              servicecidrs.PrefixLengths{Min: 16, Max: 28},
				IPv6:              servicecidrs.PrefixLengths{Min: 64, Max: 120},
			}
		}})
}

// TestGuardrailsThroughTheServer: creates and updates outside the
// guardrails get 422 on spec.cidrs naming the rule and its flag, through
// the real server; the default ServiceCIDR the server made from its own
// range passes them.
func TestGuardrailsThroughTheServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := guardedServer(t)
	if _, err := srv.Client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		t.Fatalf("the default ServiceCIDR: %v", err)
	}
	cases := []struct {
		name  string
		cidrs []string
		field string // "" accepted
		want  string
	}{
		{name: "ok-v4", cidrs: []string{"10.50.0.0/24"}},
		{name: "ok-dual", cidrs: []string{"10.51.0.0/16", "fd00:0:0:51::/112"}},
		{name: "ok-lifecycle", cidrs: []string{"10.52.0.0/28"}},
		{name: "not-allowed", cidrs: []string{"192.168.0.0/24"}, field: "spec.cidrs[0]",
			want: "not inside a prefix allowed by --service-cidr-allowed-prefixes (10.0.0.0/8, fd00::/48)"},
		{name: "not-allowed-v6", cidrs: []string{"10.53.0.0/24", "fd01::/112"}, field: "spec.cidrs[1]",
			want: "not inside a prefix allowed by --service-cidr-allowed-prefixes"},
		{name: "pod-network", cidrs: []string{"10.244.3.0/24"}, field: "spec.cidrs[0]",
			want: "overlaps 10.244.0.0/16, which --service-cidr-forbidden-prefixes forbids"},
		{name: "holds-pod-network", cidrs: []string{"10.0.0.0/8"}, field: "spec.cidrs[0]",
			want: "overlaps 10.244.0.0/16, which --service-cidr-forbidden-prefixes forbids"},
		{name: "pod-network-v6", cidrs: []string{"10.54.0.0/24", "fd00:0:0:244::/112"}, field: "spec.cidrs[1]",
			want: "overlaps fd00:0:0:244::/64"},
		{name: "too-wide", cidrs: []string{"10.64.0.0/12"}, field: "spec.cidrs[0]",
			want: "prefix length /12 is shorter than the shortest allowed, /16 (--service-cidr-min-prefix-length-ipv4)"},
		{name: "too-narrow", cidrs: []string{"10.55.0.0/29"}, field: "spec.cidrs[0]",
			want: "prefix length /29 is longer than the longest allowed, /28 (--service-cidr-max-prefix-length-ipv4)"},
		{name: "too-narrow-v6", cidrs: []string{"10.56.0.0/24", "fd00::1:0/124"}, field: "spec.cidrs[1]",
			want: "/124 is longer than the longest allowed, /120 (--service-cidr-max-prefix-length-ipv6)"},
	}
	for _, tc := range cases {
		_, err := createServiceCIDR(ctx, srv.Client, tc.name, tc.cidrs)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %v: %v", tc.name, tc.cidrs, err)
			}
			continue
		}
		checkFieldError(t, tc.name, err, tc.field, tc.want)
	}

	// An update that adds a CIDR is checked like a create.
	if _, err := createServiceCIDR(ctx, srv.Client, "grows", []string{"10.57.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	// The ServiceCIDR controller writes its status meanwhile: a conflict is
	// sent again on a fresh read.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := srv.Client.NetworkingV1().ServiceCIDRs().Get(ctx, "grows", metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.CIDRs = append(sc.Spec.CIDRs, "fd00:0:0:244::/112")
		_, err = srv.Client.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{})
		return err
	})
	checkFieldError(t, "grows", err, "spec.cidrs[1]", "--service-cidr-forbidden-prefixes")
	// Annotating it (an update keeping its CIDRs) is not.
	if _, err := annotate(ctx, srv.Client, "grows", lifecycle.ManualOnlyAnnotation, ptr("true")); err != nil {
		t.Errorf("annotating a guarded ServiceCIDR: %v", err)
	}
}

func checkFieldError(t *testing.T, name string, err error, field, want string) {
	t.Helper()
	var status *apierrors.StatusError
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.ErrStatus.Details == nil {
		t.Errorf("%s: %v, want 422", name, err)
		return
	}
	for _, cause := range status.ErrStatus.Details.Causes {
		if cause.Field == field && strings.Contains(cause.Message, want) {
			return
		}
	}
	t.Errorf("%s: causes %+v, want one on %s containing %q", name, status.ErrStatus.Details.Causes, field, want)
}

// TestOverlapWarning: by default (--service-cidr-overlap-warnings), a ServiceCIDR
// that overlaps others is stored (as upstream allows) with a warning naming
// each of them; one apart from all gets none.
func TestOverlapWarning(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress"})
	c, seen := warningClient(t, srv)
	if _, err := createServiceCIDR(ctx, c, "outer", []string{"10.60.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	if w := seen.take(); len(w) != 0 {
		t.Errorf("a ServiceCIDR apart from all warns %q", w)
	}
	if _, err := createServiceCIDR(ctx, c, "inner", []string{"10.60.1.0/24"}); err != nil {
		t.Fatalf("an overlapping ServiceCIDR is refused: %v", err)
	}
	want := `ServiceCIDR "inner": 10.60.1.0/24 lies inside ServiceCIDR "outer" (10.60.0.0/16); overlapping ServiceCIDRs are allowed, as in Kubernetes, and share their addresses`
	if w := seen.take(); len(w) != 1 || w[0] != want {
		t.Errorf("warnings %q, want [%q]", w, want)
	}
	if _, err := createServiceCIDR(ctx, c, "default-again", []string{"10.96.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	if w := seen.take(); !containsAny(w, `10.96.0.0/24 is the same prefix as ServiceCIDR "kubernetes" (10.96.0.0/24)`) {
		t.Errorf("warnings %q, want one naming kubernetes", w)
	}
}
