package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/allocator/allocator/internal/testserver"
)

// TestRepairProgress: repair --progress prints the IPAddress model's pass
// over the addresses as plain lines on a stream that is not a terminal.
func TestRepairProgress(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress"})
	out, errOut, code := runApp(t, "repair", "--kubeconfig", srv.KubeconfigPath, "--model", "ipaddress", "--progress")
	if code != 0 || !strings.Contains(out, "ipaddress repair: 1 service") {
		t.Fatalf("repair: exit %d\n%s%s", code, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^addresses checked: 1/1 done in \S+$`).MatchString(errOut) || strings.ContainsAny(errOut, "\r\x1b") {
		t.Errorf("repair --progress stderr: %q", errOut)
	}
	if _, errOut, _ := runApp(t, "repair", "--kubeconfig", srv.KubeconfigPath, "--model", "ipaddress"); errOut != "" {
		t.Errorf("repair without --progress printed to stderr: %q", errOut)
	}
}
