package app

import (
	"os"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"
)

// TestMain lets the in-process commands of these tests apply the same
// logging configuration more than once (a process applies it once).
func TestMain(m *testing.M) {
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	os.Exit(m.Run())
}
