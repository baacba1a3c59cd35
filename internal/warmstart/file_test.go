package warmstart

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func service(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "7", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"}},
	}
}

// readAll reads the File at path back as Services.
func readAll(path string) (Header, []*corev1.Service, error) {
	r, err := Open(path)
	if err != nil {
		return Header{}, nil, err
	}
	var got []*corev1.Service
	err = r.Each(func(b []byte) error {
		svc := &corev1.Service{}
		if err := svc.Unmarshal(b); err != nil {
			return err
		}
		got = append(got, svc)
		return nil
	})
	return r.Header(), got, err
}

// TestRoundTrip: a File gives back its header and its objects in order,
// and is gone once opened.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 3000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "services")
			var objs []any
			var want []*corev1.Service
			for i := range n {
				svc := service("s" + strconv.Itoa(i))
				objs = append(objs, svc)
				want = append(want, svc)
			}
			h := Header{Token: Token{ID: "abc", Revision: 42}, ResourceVersion: "41"}
			if err := Write(path, h, objs); err != nil {
				t.Fatal(err)
			}
			gotHeader, got, err := readAll(path)
			if err != nil {
				t.Fatal(err)
			}
			h.Count = n
			if diff := cmp.Diff(h, gotHeader); diff != "" {
				t.Errorf("header (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the file is still there after Open: %v", err)
			}
			if _, err := Open(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("second Open: %v, want a missing file", err)
			}
		})
	}
}

// TestCorrupt: a File cut short, with a byte changed, with bytes added,
// of another version or not a File at all is refused with ErrCorrupt,
// whether its header or its objects are hit.
func TestCorrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	objs := []any{service("a"), service("b"), service("c")}
	if err := Write(good, Header{Token: Token{ID: "abc", Revision: 42}, ResourceVersion: "41"}, objs); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	headerEnd := len(magic) + 1 + 4 + 1 + 3 + 1 // magic, version, ID, revision, version string, count
	changed := func(i int) []byte {
		b := append([]byte(nil), data...)
		b[i] ^= 0x01
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not a file of ours", []byte("hello world, this is no warm-start file at all\n")},
		{"cut in the header", data[:len(magic)+3]},
		{"cut in an object", data[:headerEnd+10]},
		{"cut in the checksum", data[:len(data)-2]},
		{"no checksum", data[:len(data)-4]},
		{"a byte of an object changed", changed(headerEnd + 20)},
		{"a byte of the checksum changed", changed(len(data) - 1)},
		{"the version changed", changed(len(magic))},
		{"bytes after the checksum", append(append([]byte(nil), data...), 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := readAll(path)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("read: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestWriteRefusesOtherObjects: an object without a protobuf encoding
// fails the write, and leaves neither the File nor its temporary file.
func TestWriteRefusesOtherObjects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "services")
	if err := Write(path, Header{}, []any{service("a"), "not an object"}); err == nil {
		t.Fatal("a string written")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestRemovePartial: what a killed Write left is removed; Files stay.
func TestRemovePartial(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"services.123.tmp", "ipaddresses.9.tmp", "services"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	RemovePartial(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "services" {
		t.Errorf("left %v, want only services", entries)
	}
}

// FuzzOpen: no input makes the reader panic or read past a bound; what it
// accepts it accepts whole.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "seed")
	if err := Write(good, Header{Token: Token{ID: "abc", Revision: 42}, ResourceVersion: "41"}, []any{service("a")}); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path)
		if err != nil {
			return
		}
		n := 0
		if err := r.Each(func([]byte) error { n++; return nil }); err == nil && n != r.Header().Count {
			t.Errorf("accepted %d objects of %d", n, r.Header().Count)
		}
	})
}

// TestCountBeyondSize: a header whose count the file could not hold is
// corrupt at Open, before a reader sizes anything by it.
func TestCountBeyondSize(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	b := append([]byte(magic), formatVersion, 1, 'x', 2, 1, '7')
	b = binary.AppendUvarint(b, 1<<40)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open: %v, want ErrCorrupt", err)
	}
}

// failing is an object whose encoding fails, as a write fails on a full
// disk: after some bytes of the File.
type failing struct{}

func (failing) Size() int { return 8 }
func (failing) MarshalToSizedBuffer([]byte) (int, error) {
	return 0, errors.New("no space left on device")
}

// TestWriteFails: a File whose writing fails half-way is an error, and
// leaves neither a File nor its temporary file; one written before stays.
func TestWriteFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "services")
	if err := Write(path, Header{ResourceVersion: "1"}, []any{service("a")}); err != nil {
		t.Fatal(err)
	}
	objs := []any{service("a"), service("b"), failing{}}
	if err := Write(path, Header{ResourceVersion: "2"}, objs); err == nil {
		t.Fatal("a failed encoding written")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left %v, want the first File alone", entries)
	}
	if h, _, err := readAll(path); err != nil || h.ResourceVersion != "1" {
		t.Errorf("the first File: %+v, %v", h, err)
	}
}
