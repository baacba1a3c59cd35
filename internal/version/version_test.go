package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	deps := []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.2"}, {Path: "k8s.io/apiserver", Version: "v0.37.2"}}
	tests := []struct {
		name     string
		bi       *debug.BuildInfo
		wantLine string
		want     apimachineryversion.Info
	}{{
		name: "built from a clean checkout",
		bi: &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123150237-0123456789ab"}, Deps: deps,
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-11-23T15:02:37Z"}, {Key: "vcs.modified", Value: "false"}}},
		wantLine: "allocator " + Release() + " (revision " + rev + ", committed 2026-11-23T15:02:37Z), ",
		want: apimachineryversion.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2+allocator.0123456789ab", GitCommit: rev,
			GitTreeState: "clean", BuildDate: "2026-11-23T15:02:37Z"},
	}, {
		name: "modified checkout",
		bi: &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123150237-0123456789ab+dirty"}, Deps: deps,
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
		wantLine: "(revision " + rev + ", modified)",
		want: apimachineryversion.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2+allocator.0123456789ab.dirty", GitCommit: rev,
			GitTreeState: "dirty"},
	}, {
		name:     "no VCS information (go test, -buildvcs=false)",
		bi:       &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: deps},
		wantLine: "allocator " + Release() + ", ",
		want:     apimachineryversion.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2+allocator"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := fromBuildInfo(tt.bi)
			line := info.String()
			if !strings.Contains(line, tt.wantLine) || !strings.HasSuffix(line, "Kubernetes API v1.37.2") {
				t.Errorf("String() = %q, want it to contain %q", line, tt.wantLine)
			}
			got := info.Kubernetes()
			got.GoVersion, got.Compiler, got.Platform = "", "", ""
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Kubernetes() (-want +got):\n%s", diff)
			}
			// What kubectl does with it: a semantic version of minor 37,
			// and none of component-base's placeholders.
			v, err := utilversion.ParseSemantic(got.GitVersion)
			if err != nil || v.Major() != 1 || v.Minor() != 37 {
				t.Errorf("gitVersion %q: %v, %v", got.GitVersion, v, err)
			}
			for _, bad := range []string{"$Format", "1970"} {
				if strings.Contains(line+got.String()+got.BuildDate, bad) {
					t.Errorf("version has %q: %s / %+v", bad, line, got)
				}
			}
		})
	}
}

func TestGetInThisBinary(t *testing.T) {
	t.Parallel()
	info := Get()
	if !strings.HasPrefix(info.KubernetesVersion, "v1.37.") {
		t.Errorf("KubernetesVersion = %q", info.KubernetesVersion)
	}
	if info.Version != Release() || strings.Contains(info.String(), "$Format") {
		t.Errorf("Get() = %+v, want version %s", info, Release())
	}
}

// TestRelease: VERSION holds one semantic version with a leading v that is
// also a valid image tag (no "+" build metadata), and nothing else.
func TestRelease(t *testing.T) {
	t.Parallel()
	r := Release()
	if releaseFile != r+"\n" {
		t.Errorf("VERSION is %q; want one line, the version and a newline", releaseFile)
	}
	v, err := utilversion.ParseSemantic(r)
	if err != nil || !strings.HasPrefix(r, "v") || v.BuildMetadata() != "" {
		t.Errorf("VERSION %q: want v<major>.<minor>.<patch>[-<pre-release>], the image tag too (%v)", r, err)
	}
}
