// Package cli runs the allocator commands (internal/app, in-process, with
// their streams captured) against the real API server in-process
// (internal/testserver): status's figures per band in table, wide and JSON
// form in both models, and repair's progress lines.
package cli
