package embedetcd

import (
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// KlogLogger returns a zap logger for etcd (the embedded member, or a
// client) that writes through logger, so etcd's lines come out in the
// process's one format (klog text, or JSON with --logging-format=json)
// instead of zap's own JSON interleaved with klog text. etcd is chatty, so
// its levels are lowered: error → V(2), warn → V(3), info and debug → V(5).
// An etcd failure that matters surfaces through the server's own errors and
// health checks.
func KlogLogger(logger klog.Logger) *zap.Logger {
	return zap.New(&klogCore{logger: logger})
}

type klogCore struct {
	logger klog.Logger
	fields []zapcore.Field
}

func verbosity(l zapcore.Level) int {
	switch {
	case l >= zapcore.ErrorLevel:
		return 2
	case l == zapcore.WarnLevel:
		return 3
	default:
		return 5
	}
}

func (c *klogCore) Enabled(l zapcore.Level) bool { return c.logger.V(verbosity(l)).Enabled() }

func (c *klogCore) With(fields []zapcore.Field) zapcore.Core {
	return &klogCore{logger: c.logger, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *klogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *klogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kvs := make([]any, 0, 2*len(keys)+2)
	if e.LoggerName != "" {
		kvs = append(kvs, "component", e.LoggerName)
	}
	for _, k := range keys {
		kvs = append(kvs, k, enc.Fields[k])
	}
	c.logger.V(verbosity(e.Level)).Info(e.Message, kvs...)
	return nil
}

func (c *klogCore) Sync() error { return nil }
