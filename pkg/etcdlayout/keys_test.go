package etcdlayout

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLayoutKeys(t *testing.T) {
	t.Parallel()
	keys := func(l Layout) []string {
		return []string{
			l.Root(),
			l.PrimaryServiceIPRange(),
			l.SecondaryServiceIPRange(),
			l.ServiceNodePortRange(),
			l.RangesPrefix(),
			l.Service("default", "kubernetes"),
			l.ServicesPrefix(),
			l.ServicesInNamespacePrefix("kube-system"),
			l.IPAddress("10.96.0.1"),
			l.IPAddress("fd00:10:96::a"),
			l.IPAddressesPrefix(),
			l.ServiceCIDR("kubernetes"),
			l.ServiceCIDRsPrefix(),
			l.Namespace("fx"),
			l.NamespacesPrefix(),
		}
	}
	registry := []string{
		"/registry",
		"/registry/ranges/serviceips",
		"/registry/ranges/secondaryserviceips",
		"/registry/ranges/servicenodeports",
		"/registry/ranges/",
		"/registry/services/specs/default/kubernetes",
		"/registry/services/specs/",
		"/registry/services/specs/kube-system/",
		"/registry/ipaddresses/10.96.0.1",
		"/registry/ipaddresses/fd00:10:96::a",
		"/registry/ipaddresses/",
		"/registry/servicecidrs/kubernetes",
		"/registry/servicecidrs/",
		"/registry/namespaces/fx",
		"/registry/namespaces/",
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", registry},
		{"/registry", registry},
		{"registry", registry},
		{"/registry/", registry},
		{"//registry//", registry},
		{"/a//b/", []string{
			"/a/b",
			"/a/b/ranges/serviceips",
			"/a/b/ranges/secondaryserviceips",
			"/a/b/ranges/servicenodeports",
			"/a/b/ranges/",
			"/a/b/services/specs/default/kubernetes",
			"/a/b/services/specs/",
			"/a/b/services/specs/kube-system/",
			"/a/b/ipaddresses/10.96.0.1",
			"/a/b/ipaddresses/fd00:10:96::a",
			"/a/b/ipaddresses/",
			"/a/b/servicecidrs/kubernetes",
			"/a/b/servicecidrs/",
			"/a/b/namespaces/fx",
			"/a/b/namespaces/",
		}},
		{"/", []string{
			"/",
			"/ranges/serviceips",
			"/ranges/secondaryserviceips",
			"/ranges/servicenodeports",
			"/ranges/",
			"/services/specs/default/kubernetes",
			"/services/specs/",
			"/services/specs/kube-system/",
			"/ipaddresses/10.96.0.1",
			"/ipaddresses/fd00:10:96::a",
			"/ipaddresses/",
			"/servicecidrs/kubernetes",
			"/servicecidrs/",
			"/namespaces/fx",
			"/namespaces/",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, keys(Layout{Prefix: tt.prefix})); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLayoutOfRange: a map's key names its cluster's prefix, so the Services
// beside it are found from the key alone.
func TestLayoutOfRange(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, services string }{
		{"/registry/ranges/serviceips", "/registry/services/specs/"},
		{"/a/b/ranges/secondaryserviceips", "/a/b/services/specs/"},
		{"/ranges/servicenodeports", "/services/specs/"},
		{"/x/ranges/y/ranges/serviceips", "/x/ranges/y/services/specs/"},
		{"no-ranges-here", "/registry/services/specs/"},
	}
	for _, tt := range tests {
		if got := LayoutOfRange(tt.key).ServicesPrefix(); got != tt.services {
			t.Errorf("LayoutOfRange(%q).ServicesPrefix() = %q, want %q", tt.key, got, tt.services)
		}
	}
}

// TestMapStamp: each map's stamp sits in this project's namespace of the
// map's cluster, one per map.
func TestMapStamp(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, stamp string }{
		{"/registry/ranges/serviceips", "/registry/clusterip-allocator/stamps/serviceips"},
		{"/registry/ranges/secondaryserviceips", "/registry/clusterip-allocator/stamps/secondaryserviceips"},
		{"/a/b/ranges/servicenodeports", "/a/b/clusterip-allocator/stamps/servicenodeports"},
		{"/ranges/serviceips", "/clusterip-allocator/stamps/serviceips"},
		{"/x/ranges/y/ranges/serviceips", "/x/ranges/y/clusterip-allocator/stamps/serviceips"},
		{"/no-ranges-here/map", "/registry/clusterip-allocator/stamps/no-ranges-here/map"},
	}
	for _, tt := range tests {
		if got := MapStamp(tt.key); got != tt.stamp {
			t.Errorf("MapStamp(%q) = %q, want %q", tt.key, got, tt.stamp)
		}
	}
}
