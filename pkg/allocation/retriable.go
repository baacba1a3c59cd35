package allocation

// Retriable marks err, the failure of a release, as safe to send again: the
// release was not applied, or applying it again cannot free what another
// owner holds now (an IPAddress deleted only for its owner, by UID and
// resourceVersion). A release whose outcome is unknown is never marked: a
// bitmap bit cleared by it and taken since by another Service would be
// cleared a second time.
func Retriable(err error) error {
	if err == nil {
		return nil
	}
	return retriable{err}
}

type retriable struct{ error }

func (r retriable) Unwrap() error { return r.error }

// IsRetriable reports whether err was marked Retriable; an error joining
// several is retriable only when each of them is.
func IsRetriable(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case retriable:
		return true
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		for _, c := range errs {
			if !IsRetriable(c) {
				return false
			}
		}
		return len(errs) > 0
	case interface{ Unwrap() error }:
		return IsRetriable(e.Unwrap())
	}
	return false
}
