package filter

import (
	"errors"
	"fmt"
)

var (
	// ErrSyntax is wrapped by every error about a filter or action text
	// that does not compile: what Azure refuses with 400 when the rule is
	// created.
	ErrSyntax = errors.New("filter: syntax error")
	// ErrEvaluation is wrapped by every error raised while evaluating a
	// compiled filter or action against a message (Azure's filter
	// exception).
	ErrEvaluation = errors.New("filter: evaluation error")
)

// SyntaxError says where a text does not compile and why. Pos is the
// 1-based position of the offending character, counted in characters
// (runes), as a person counts them in the text they wrote.
type SyntaxError struct {
	Pos int
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("filter: syntax error at position %d: %s", e.Pos, e.Msg)
}

func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// EvaluationError says why a rule could not be evaluated against a message.
type EvaluationError struct {
	Msg string
}

func (e *EvaluationError) Error() string { return "filter: evaluation error: " + e.Msg }

func (e *EvaluationError) Unwrap() error { return ErrEvaluation }

func evalErrorf(format string, args ...any) error {
	return &EvaluationError{Msg: fmt.Sprintf(format, args...)}
}
