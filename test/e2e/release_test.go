package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/allocator/allocator/internal/version"
)

// TestReleaseAgrees: the release in internal/version/VERSION is the version
// `allocator --version` prints, the tag `hack/image.sh --print-tag` gives,
// and CHANGELOG.md's latest release. TestManifestImages checks that every
// manifest of deploy/ names the image by that tag.
func TestReleaseAgrees(t *testing.T) {
	t.Parallel()
	release := version.Release()

	out, err := exec.Command(buildBinary(t), "--version").Output()
	if err != nil {
		t.Fatalf("allocator --version: %v", err)
	}
	if got := strings.Fields(string(out)); len(got) < 2 || got[0] != "allocator" || strings.TrimSuffix(got[1], ",") != release {
		t.Errorf("allocator --version printed %q; want allocator %s", out, release)
	}

	// The script as a user runs it: without TAG or IMAGE from the
	// environment of the test.
	cmd := exec.Command("bash", filepath.Join("hack", "image.sh"), "--print-tag")
	cmd.Dir = filepath.Join("..", "..")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TAG=") && !strings.HasPrefix(kv, "IMAGE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("hack/image.sh --print-tag: %v", err)
	}
	if got, want := strings.TrimSpace(string(out)), imageRepository+":"+release; got != want {
		t.Errorf("hack/image.sh --print-tag = %q; want %q", got, want)
	}

	changelog, err := os.ReadFile(filepath.Join("..", "..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if got := latestRelease(string(changelog)); "v"+got != release {
		t.Errorf("CHANGELOG.md's latest release is %q; want the section ## [%s]", got, strings.TrimPrefix(release, "v"))
	}
}

// latestRelease is the version of the first "## [x.y.z] - date" section of
// a Keep a Changelog file, past [Unreleased]; "" when there is none.
func latestRelease(changelog string) string {
	for _, m := range regexp.MustCompile(`(?m)^## \[([^\]]+)\]`).FindAllStringSubmatch(changelog, -1) {
		if m[1] != "Unreleased" {
			return m[1]
		}
	}
	return ""
}
