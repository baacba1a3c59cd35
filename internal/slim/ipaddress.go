package slim

import (
	"reflect"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/allocator/allocator/pkg/ipaddress"
)

// sharedIPAddressLabels are the label maps of the IPAddresses a ClusterIP
// allocator writes, one per family, shared by every cached IPAddress whose
// labels are exactly those. Nobody may write to them: a cached object is
// read-only (client-go's contract), and a writer copies it first
// (DeepCopy copies the map).
var sharedIPAddressLabels = map[string]map[string]string{
	"IPv4": {ipaddress.LabelIPFamily: "IPv4", ipaddress.LabelManagedBy: ipaddress.ManagedBy},
	"IPv6": {ipaddress.LabelIPFamily: "IPv6", ipaddress.LabelManagedBy: ipaddress.ManagedBy},
}

// SharedLabels returns the shared label map of family (IPv4, IPv6), nil
// for another: what CompactIPAddress gives an IPAddress of that family
// whose labels are an allocator's.
func SharedLabels(family string) map[string]string {
	return sharedIPAddressLabels[family]
}

// IPAddress is what the server's IPAddress informer, and the repair job,
// keep of a decoded IPAddress: every field but its managedFields and the
// Service UID annotation (ipaddress.AnnotationServiceUID), its labels
// compact (CompactIPAddress). It changes ipa and returns it.
//
// Why the UID goes: an annotation is a map of its own, which would be
// about half of a kept IPAddress (internal/apiserver's
// BenchmarkIPAddressBytes), and what reads it has the stored object
// instead: a release through the
// server's storage judges the UID on the object it deletes
// (ipaddresses.InProcess.DeleteExact), and the repair and the carry-over
// judge an IPAddress's Service by namespace and name. Nothing writes an
// IPAddress back from what is kept: the repair patches the one label it
// mends.
func IPAddress(ipa *networkingv1.IPAddress) *networkingv1.IPAddress {
	ipa.ManagedFields = nil
	if _, ok := ipa.Annotations[ipaddress.AnnotationServiceUID]; ok {
		delete(ipa.Annotations, ipaddress.AnnotationServiceUID)
		if len(ipa.Annotations) == 0 {
			ipa.Annotations = nil
		}
	}
	CompactIPAddress(ipa)
	return ipa
}

// CompactIPAddress makes a decoded IPAddress hold less, the same in value:
// its labels become the shared map of its family when they are exactly an
// allocator's two labels. A decoded map and each string in it are
// allocations of their own, and the labels are the largest part of what a
// cached IPAddress would otherwise hold (internal/apiserver's
// BenchmarkIPAddressBytes). An IPAddress that holds the shared map already
// is not written to (a transform may see an object twice).
func CompactIPAddress(ipa *networkingv1.IPAddress) {
	if l := ipa.Labels; len(l) == 2 && l[ipaddress.LabelManagedBy] == ipaddress.ManagedBy {
		shared, ok := sharedIPAddressLabels[l[ipaddress.LabelIPFamily]]
		if ok && reflect.ValueOf(l).UnsafePointer() != reflect.ValueOf(shared).UnsafePointer() {
			ipa.Labels = shared
		}
	}
}
