package rawlist

import (
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// TestWithNegotiation: a GET is marked for a list served as stored exactly
// when the handler's negotiation of its Accept header picks plain
// protobuf: not JSON, YAML, a table, partial metadata or a watch stream,
// and not when such a clause comes first.
func TestWithNegotiation(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ns := serializer.NewCodecFactory(scheme)
	const pb = "application/vnd.kubernetes.protobuf"
	cases := []struct {
		method, accept string
		marked         bool
		path           string // "": /api/v1/services
	}{
		{"GET", pb, true, ""},
		{"GET", pb + ", application/json", true, ""},
		{"GET", "application/json;q=0.5, " + pb, true, ""},
		{"GET", pb + ";sv=v2, application/json", false, ""}, // a server version the API does not serve: JSON
		{"GET", "", false, ""},
		{"GET", "*/*", false, ""},
		{"GET", "application/json", false, ""},
		{"GET", "application/yaml, " + pb, false, ""},
		{"GET", "application/json;as=Table;v=v1;g=meta.k8s.io, " + pb, false, ""},
		{"GET", pb + ";as=Table;v=v1;g=meta.k8s.io", false, ""},
		{"GET", pb + ";as=PartialObjectMetadataList;v=v1;g=meta.k8s.io, application/json", false, ""},
		// A table version the handler skips, then plain protobuf: the
		// handler serves the second clause, but every as= counts as taken
		// here, so the list is served as usual (never the other way round).
		{"GET", pb + ";as=Table;v=v9;g=meta.k8s.io, " + pb, false, ""},
		{"GET", pb + ";stream=watch", false, ""},
		{"POST", pb, false, ""},
		{"GET", pb, true, "/apis/networking.k8s.io/v1/ipaddresses"},
		{"GET", pb, false, "/api/v1/namespaces/default/services/web"}, // one object: not a list
		{"GET", pb, false, "/api/v1/namespaces"},
	}
	for _, tc := range cases {
		var marked bool
		h := WithNegotiation(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
			marked, _ = req.Context().Value(plainProtobufKey{}).(bool)
		}), ns)
		path := tc.path
		if path == "" {
			path = "/api/v1/services"
		}
		req := httptest.NewRequest(tc.method, path, nil)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		if marked != tc.marked {
			t.Errorf("%s %s with Accept %q: marked %v, want %v", tc.method, path, tc.accept, marked, tc.marked)
		}
	}
}
