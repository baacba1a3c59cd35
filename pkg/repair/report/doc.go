// Package report holds what every repair controller shares and nothing
// else: the finding (Problem) and pass (Report) types with upstream's
// problem types and event reasons, the repair metrics under upstream's names
// (design.md §9), the event recorders, the pass loop with its backoff, the
// consistent Service list every pass starts from, and the Progress hook a
// long pass reports through (the CLI draws it; see internal/progress).
//
// Each finding has a Standing: resolved by the pass, left by design (a
// state only a person may change, which no wait fixes: it is reported with
// what clears it and does not fail the job), or unresolved (it fails the
// job: exit 2). Problem.Standing is the one place that decides it.
//
// The controllers themselves live with what they repair:
// pkg/repair/iprepair (ClusterIPs, both models, and the migrations)
// and pkg/repair (node ports).
package report
