package slim

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestIsSlim: isSlim is true exactly when a Service's slim copy equals it,
// for every Service with one field set (every field a Service has, at any
// depth), and for the slim copy of each, which Service must then return as
// it is.
func TestIsSlim(t *testing.T) {
	t.Parallel()
	variants := oneFieldSet(reflect.TypeFor[corev1.Service](), "Service")
	paths := map[string]bool{}
	for _, v := range variants {
		paths[v.path] = true
	}
	for _, deep := range []string{
		"Service.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds",
		"Service.ObjectMeta.ManagedFields[0].FieldsV1.Raw[0]",
		"Service.Status.Conditions[0].LastTransitionTime.Time",
		"Service.Spec.Ports[0].TargetPort.IntVal",
	} {
		if !paths[deep] {
			t.Errorf("no Service with %s set among %d: the walk missed fields", deep, len(variants))
		}
	}
	for _, v := range variants {
		svc := v.value.Addr().Interface().(*corev1.Service)
		slim := reflect.DeepEqual(copyService(svc), svc)
		if got := isSlim(svc); got != slim {
			t.Errorf("%s set: isSlim = %v, its slim copy equals it: %v", v.path, got, slim)
		}
	}
	// A port is kept only with a nodePort: each field of a port is set
	// beside one, so that a field of ServicePort isSlim does not name fails
	// here too.
	for _, v := range oneFieldSet(reflect.TypeFor[corev1.ServicePort](), "ServicePort") {
		port := v.value.Interface().(corev1.ServicePort)
		if port.NodePort == 0 {
			port.NodePort = 30080
		}
		svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{port}}}
		slim := reflect.DeepEqual(copyService(svc), svc)
		if got := isSlim(svc); got != slim {
			t.Errorf("%s set beside a nodePort: isSlim = %v, its slim copy equals it: %v", v.path, got, slim)
		}
	}
	for _, v := range variants {
		c := copyService(v.value.Addr().Interface().(*corev1.Service))
		if !isSlim(c) {
			t.Errorf("isSlim(slim copy of the Service with %s set) = false", v.path)
		}
		if got := Service(c); got != c {
			t.Errorf("Service(slim copy of the Service with %s set) made another copy", v.path)
		}
	}
}

// fieldVariant is a value with one field set, named by its path.
type fieldVariant struct {
	path  string
	value reflect.Value // addressable
}

// oneFieldSet returns values of type t each with one thing set: a leaf
// field (non-zero), a pointer (to a zero value, then to each of its
// element's variants), a slice of one element (zero, then each variant), a
// map of one entry. Unexported fields are left alone; a time.Time is set
// as a whole.
func oneFieldSet(t reflect.Type, path string) []fieldVariant {
	one := func(set func(v reflect.Value)) fieldVariant {
		v := reflect.New(t).Elem()
		set(v)
		return fieldVariant{path: path, value: v}
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return []fieldVariant{one(func(v reflect.Value) { v.Set(reflect.ValueOf(time.Unix(1, 0))) })}
	case t.Kind() == reflect.String:
		return []fieldVariant{one(func(v reflect.Value) { v.SetString("x") })}
	case t.Kind() == reflect.Bool:
		return []fieldVariant{one(func(v reflect.Value) { v.SetBool(true) })}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return []fieldVariant{one(func(v reflect.Value) { v.SetInt(1) })}
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return []fieldVariant{one(func(v reflect.Value) { v.SetUint(1) })}
	case t.Kind() == reflect.Pointer:
		out := []fieldVariant{one(func(v reflect.Value) { v.Set(reflect.New(t.Elem())) })}
		for _, e := range oneFieldSet(t.Elem(), path) {
			out = append(out, fieldVariant{path: e.path, value: e.value.Addr()})
		}
		return fixAddressable(t, out)
	case t.Kind() == reflect.Slice:
		out := []fieldVariant{one(func(v reflect.Value) { v.Set(reflect.MakeSlice(t, 1, 1)) })}
		for _, e := range oneFieldSet(t.Elem(), path+"[0]") {
			s := reflect.MakeSlice(t, 1, 1)
			s.Index(0).Set(e.value)
			out = append(out, fieldVariant{path: e.path, value: s})
		}
		return fixAddressable(t, out)
	case t.Kind() == reflect.Map:
		return []fieldVariant{one(func(v reflect.Value) {
			m := reflect.MakeMap(t)
			m.SetMapIndex(reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem())
			v.Set(m)
		})}
	case t.Kind() == reflect.Struct:
		var out []fieldVariant
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if f.Anonymous {
				name = strings.TrimPrefix(name, "*")
			}
			for _, e := range oneFieldSet(f.Type, path+"."+name) {
				v := reflect.New(t).Elem()
				v.Field(i).Set(e.value)
				out = append(out, fieldVariant{path: e.path, value: v})
			}
		}
		return out
	}
	return nil // a kind a Service does not have (interfaces, channels, funcs)
}

// fixAddressable makes each variant's value addressable (a value built by
// MakeSlice or Addr is not), so that callers may take its address.
func fixAddressable(t reflect.Type, vs []fieldVariant) []fieldVariant {
	for i, v := range vs {
		if !v.value.CanAddr() {
			a := reflect.New(t).Elem()
			a.Set(v.value)
			vs[i].value = a
		}
	}
	return vs
}

// BenchmarkServiceAlreadySlim measures Service on a slim Service, what an
// informer's second transform of each Service costs.
func BenchmarkServiceAlreadySlim(b *testing.B) {
	svc := copyService(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u", ResourceVersion: "7", Labels: map[string]string{"app": "web"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}},
	})
	b.ReportAllocs()
	for b.Loop() {
		if Service(svc) != svc {
			b.Fatal("copied a slim Service")
		}
	}
}
