package transition

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Format is the layout version of the transition state and of the replica
// records this release writes, and the newest it reads. A value stored
// without one was written by a release before formats existed, whose
// layout is format 1. Bump it when a field changes meaning; a release
// reading a newer format refuses it instead of misreading it (an old
// release ignores the unknown "format" field and reads format 1 as it
// always did).
const Format = 1

// ErrNewerFormat is returned for a state or record written in a format
// newer than Format, by a newer release of allocator.
var ErrNewerFormat = errors.New("written by a newer release of allocator")

func checkFormat(what string, format int) error {
	if format > Format {
		return fmt.Errorf("%s has format %d and this release reads formats up to %d: %w; "+
			"upgrade this replica, or roll the newer ones back", what, format, Format, ErrNewerFormat)
	}
	return nil
}

// encode writes s in this release's format.
func (s State) encode() ([]byte, error) {
	s.Format = Format
	value, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode transition state: %w", err)
	}
	return value, nil
}

// encode writes r in this release's format.
func (r Record) encode() ([]byte, error) {
	r.Format = Format
	value, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode replica record: %w", err)
	}
	return value, nil
}
