package report

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Loop runs pass every interval until ctx ends; it is the loop of every
// repair controller. A failed pass is retried sooner, with exponential
// backoff (1 s doubling, jittered, capped at interval), after onFail has
// been told the error and the delay; the backoff starts over after a good
// pass. A pass that fails once ctx has ended was cut short by the stop: it
// is not reported.
func Loop(ctx context.Context, interval time.Duration, pass func(context.Context) error, onFail func(err error, retryIn time.Duration)) {
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 8, Cap: interval}
	}
	backoff := newBackoff()
	for {
		delay := interval
		if err := pass(ctx); err != nil {
			if ctx.Err() != nil {
				return // cut short by the stop: not a failure
			}
			delay = backoff.Step()
			onFail(err, delay)
		} else {
			backoff = newBackoff()
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// CloseOnce closes *ch if it is not nil and sets it to nil.
func CloseOnce(ch *chan<- struct{}) {
	if *ch != nil {
		close(*ch)
		*ch = nil
	}
}

// RunPasses is Loop for a controller whose pass is once: it logs each
// report at V(2) and each failure as an error naming what ("Bitmap repair"),
// counts failures with failed, and closes firstPass after the first good
// pass.
func RunPasses(ctx context.Context, interval time.Duration, what string, once func(context.Context) (*Report, error), failed func(), firstPass chan<- struct{}) {
	logger := klog.FromContext(ctx)
	Loop(ctx, interval, func(ctx context.Context) error {
		report, err := once(ctx)
		if err == nil {
			logger.V(2).Info(what+" pass done", "report", report.String())
			CloseOnce(&firstPass)
		}
		return err
	}, func(err error, retryIn time.Duration) {
		failed()
		logger.Error(err, what+" pass failed", "retryIn", retryIn)
	})
}
