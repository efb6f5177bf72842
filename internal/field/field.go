// Package field is the error a configuration's validation reports about one
// of its fields: the field's path in the validated struct and what is wrong
// with it. A package validates the fields it owns and reports each as an
// *Error; a package that holds another's Config re-roots those errors under
// its field (Under); a command that binds a flag to a field names the flag
// in their place (internal/settings). The message of every error is the
// path, then the cause.
package field

import (
	"errors"
	"fmt"
)

// Error is one bad field.
type Error struct {
	// Path is the field's path from the validated struct: "Window", or
	// "Limiter.Window" in a struct that holds a region.Config as Limiter.
	Path string
	Err  error
}

func (e *Error) Error() string { return e.Path + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Errorf is the error of the field at path.
func Errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// Check is a validation's collector: That adds a field's error when its
// check fails, Add other errors, and Err joins them. A field error that
// repeats an earlier one (the same path and cause: one value checked by
// two owners) is left out.
type Check struct {
	// Prefix starts the message of every error That adds, e.g.
	// "region: config ".
	Prefix string
	errs   []error
	seen   map[string]bool
}

// That adds path's error unless ok.
func (c *Check) That(ok bool, path, format string, args ...any) {
	if !ok {
		c.Add(fmt.Errorf("%s%w", c.Prefix, Errorf(path, format, args...)))
	}
}

// Add adds the errors joined in err, as they are.
func (c *Check) Add(err error) {
	Each(err, func(e error) {
		var fe *Error
		if errors.As(e, &fe) {
			if c.seen[fe.Error()] {
				return
			}
			if c.seen == nil {
				c.seen = map[string]bool{}
			}
			c.seen[fe.Error()] = true
		}
		c.errs = append(c.errs, e)
	})
}

// Err is every error added, joined; nil when there is none.
func (c *Check) Err() error { return errors.Join(c.errs...) }

// Each calls f with every error joined in err (errors.Join, nested), in
// order.
func Each(err error, f func(error)) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			Each(e, f)
		}
		return
	}
	if err != nil {
		f(err)
	}
}

// Map rewrites the field errors joined in err: each path becomes
// path(old) (a holder re-roots them under its own field), and every
// message starts with msgPrefix instead of the owner's. Errors about no
// field keep their text after msgPrefix.
func Map(msgPrefix string, err error, path func(string) string) error {
	var out []error
	Each(err, func(e error) {
		var fe *Error
		if errors.As(e, &fe) {
			e = &Error{Path: path(fe.Path), Err: fe.Err}
		}
		out = append(out, fmt.Errorf("%s%w", msgPrefix, e))
	})
	return errors.Join(out...)
}
