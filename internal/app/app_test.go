package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func runApp(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return out.String(), errOut.String(), code
}

func TestVersion(t *testing.T) {
	out, _, code := runApp(t, "version")
	if code != 0 || !strings.HasPrefix(out, "allocator ") {
		t.Fatalf("version: code %d, output %q", code, out)
	}
	out, _, code = runApp(t, "version", "-o", "json")
	var info map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info["gitVersion"] == nil {
		t.Fatalf("version -o json: code %d, output %q", code, out)
	}
	if _, errOut, code := runApp(t, "version", "-o", "yaml"); code == 0 || !strings.Contains(errOut, "unknown output format") {
		t.Fatalf("version -o yaml: code %d, stderr %q", code, errOut)
	}
}

func TestUnknownCommand(t *testing.T) {
	if _, errOut, code := runApp(t, "frobnicate"); code == 0 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown command: code %d, stderr %q", code, errOut)
	}
}
