// Command allocator is the ClusterIP allocator's single binary: the API server,
// the repair and migration job, and a few tools around them. All logic lives in
// internal/app so that the whole CLI can run in-process in tests.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/allocator/allocator/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args, app.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
