// Package version says which allocator a binary is: the release it belongs
// to, the VCS revision Go embedded when it was built from a checkout
// (runtime/debug.ReadBuildInfo), and the Kubernetes API level it serves (the
// release of k8s.io/apiserver it is built on).
//
// Invariants:
//   - The release is the one line of the file VERSION in this directory,
//     compiled in (go:embed), so `go run ./cmd/allocator --version` in any
//     clone prints it without -ldflags or git. hack/image.sh tags the image
//     with the same file, and deploy/ names that tag; test/e2e fails when
//     deploy/, the image tag, `allocator --version` or CHANGELOG.md's latest
//     release disagree with it.
//   - Nothing here needs -ldflags. component-base's version variables are
//     only set by Kubernetes' own build scripts; without them a binary says
//     "v0.0.0-master+$Format:%H$" built on 1970-01-01. Unknown facts (the
//     revision of a build outside a checkout) are left empty, never invented.
package version

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
	componentversion "k8s.io/component-base/version"
)

// releaseFile is the content of VERSION: the release and a newline.
//
//go:embed VERSION
var releaseFile string

// Release is the version this tree ships, e.g. v0.1.0: the image tag
// deploy/ names and the latest release of CHANGELOG.md.
func Release() string { return strings.TrimSpace(releaseFile) }

// Info describes this binary.
type Info struct {
	// Version is the release (Release), the same for every build of a
	// tree; Revision and Modified tell builds of one release apart.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, if known.
	Revision string `json:"revision,omitempty"`
	// Modified is true when the checkout had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// CommitTime is the commit's time (RFC 3339), if known.
	CommitTime string `json:"commitTime,omitempty"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
	// KubernetesVersion is the Kubernetes release whose API the server
	// serves: that of the k8s.io/apiserver module it is built on, e.g. v1.37.2.
	KubernetesVersion string `json:"kubernetesVersion"`
}

// Get reads the binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo is Get on given build information (nil: none recorded).
func fromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Version: Release(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info.KubernetesVersion = "v" + componentversion.DefaultKubeBinaryVersion + ".0"
	if bi == nil {
		return info
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.CommitTime = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	for _, dep := range bi.Deps {
		if dep.Path == "k8s.io/apiserver" {
			if k, ok := kubernetesRelease(dep.Version); ok {
				info.KubernetesVersion = k
			}
		}
	}
	return info
}

// kubernetesRelease maps a k8s.io staging module version (v0.37.2) to the
// Kubernetes release it belongs to (v1.37.2).
func kubernetesRelease(moduleVersion string) (string, bool) {
	rest, ok := strings.CutPrefix(moduleVersion, "v0.")
	if !ok || rest == "" {
		return "", false
	}
	return "v1." + rest, true
}

// ShortRevision is the first 12 characters of the revision.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}

// String is the one-line form `allocator version` prints.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "allocator %s", i.Version)
	if i.Revision != "" {
		fmt.Fprintf(&b, " (revision %s", i.Revision)
		if i.Modified {
			b.WriteString(", modified")
		}
		if i.CommitTime != "" {
			fmt.Fprintf(&b, ", committed %s", i.CommitTime)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ", %s %s, Kubernetes API %s", i.GoVersion, i.Platform, i.KubernetesVersion)
	return b.String()
}

// Kubernetes is what /version serves. kubectl compares gitVersion's minor
// with its own, so gitVersion is the Kubernetes release the API comes from,
// with semver build metadata naming allocator and the revision (for example
// v1.37.2+allocator.0123456789ab): a kubectl of the same minor sees no skew.
func (i Info) Kubernetes() apimachineryversion.Info {
	out := apimachineryversion.Info{
		GitVersion: i.KubernetesVersion + "+allocator",
		GitCommit:  i.Revision,
		BuildDate:  i.CommitTime,
		GoVersion:  i.GoVersion,
		Compiler:   runtime.Compiler,
		Platform:   i.Platform,
	}
	if r := i.ShortRevision(); r != "" {
		out.GitVersion += "." + r
	}
	if i.Revision != "" {
		out.GitTreeState = "clean"
		if i.Modified {
			out.GitTreeState = "dirty"
			out.GitVersion += ".dirty"
		}
	}
	core := strings.TrimPrefix(i.KubernetesVersion, "v")
	if parts := strings.SplitN(core, ".", 3); len(parts) >= 2 {
		out.Major, out.Minor = parts[0], parts[1]
	}
	return out
}
