package app

import (
	"fmt"

	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"
)

// leveledGRPCLogger sends gRPC's own logs to klog at the lowered levels the
// embedded etcd and the server's etcd client use (error → V(2), warning →
// V(3), info → V(5)). k8s.io/apiserver installs a logger that prints every
// failed connection attempt as a warning, so a serve that could not reach
// etcd printed a screen of them before its one error line.
type leveledGRPCLogger struct{}

var _ grpclog.LoggerV2 = leveledGRPCLogger{}

func (leveledGRPCLogger) Info(args ...any)   { klog.V(5).InfoDepth(1, args...) }
func (leveledGRPCLogger) Infoln(args ...any) { klog.V(5).InfoDepth(1, fmt.Sprintln(args...)) }
func (leveledGRPCLogger) Infof(format string, args ...any) {
	klog.V(5).InfoDepth(1, fmt.Sprintf(format, args...))
}
func (leveledGRPCLogger) Warning(args ...any)   { klog.V(3).InfoDepth(1, args...) }
func (leveledGRPCLogger) Warningln(args ...any) { klog.V(3).InfoDepth(1, fmt.Sprintln(args...)) }
func (leveledGRPCLogger) Warningf(format string, args ...any) {
	klog.V(3).InfoDepth(1, fmt.Sprintf(format, args...))
}
func (leveledGRPCLogger) Error(args ...any)   { klog.V(2).InfoDepth(1, args...) }
func (leveledGRPCLogger) Errorln(args ...any) { klog.V(2).InfoDepth(1, fmt.Sprintln(args...)) }
func (leveledGRPCLogger) Errorf(format string, args ...any) {
	klog.V(2).InfoDepth(1, fmt.Sprintf(format, args...))
}
func (leveledGRPCLogger) Fatal(args ...any)   { klog.FatalDepth(1, args...) }
func (leveledGRPCLogger) Fatalln(args ...any) { klog.FatalDepth(1, fmt.Sprintln(args...)) }
func (leveledGRPCLogger) Fatalf(format string, args ...any) {
	klog.FatalDepth(1, fmt.Sprintf(format, args...))
}
func (leveledGRPCLogger) V(l int) bool { return klog.V(klog.Level(l)).Enabled() }
