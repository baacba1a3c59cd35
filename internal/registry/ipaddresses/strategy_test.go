package ipaddresses

import (
	"context"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ref := &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "web"}
	for name, ok := range map[string]bool{
		"10.0.0.1": true, "fd00::1": true, "010.0.0.1": false, "::ffff:10.0.0.1": false,
		"FD00::1": false, "10.0.0.0/24": false, "web": false,
	} {
		ip := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IPAddressSpec{ParentRef: ref}}
		if errs := (strategy{}).Validate(context.Background(), ip); (len(errs) == 0) != ok {
			t.Errorf("%q: valid=%v, errs %v", name, ok, errs)
		}
	}
	ip := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.1"}}
	if errs := (strategy{}).Validate(context.Background(), ip); len(errs) == 0 {
		t.Errorf("missing parentRef accepted")
	}
	if got := ParentRef(ref); got != "services/default/web" {
		t.Errorf("ParentRef = %q", got)
	}
}
