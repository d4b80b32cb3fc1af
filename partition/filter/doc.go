// Package filter is the Azure Service Bus rule language: SQL filter
// expressions, correlation filters, the true and false filters, and SQL rule
// actions (SET and REMOVE). A rule is compiled once, when it is created, and
// then evaluated against the message of every send to its topic.
//
// The package is pure: standard library only, no clock and no randomness.
// newid() is the one function of the language that needs a random source;
// it is allowed only in actions and takes its values from a source the
// caller injects, so that every replica of a partition applies the same
// action with the same result.
//
// # Semantics
//
// Names: keywords, the scopes sys and user, system property names and
// function names are case-insensitive; user property names are matched
// exactly, as the keys of the message's application properties. An
// unscoped name is a user property. [bracketed] and "quoted" names may
// hold any character (]] and "" escape the delimiter).
//
// Values: integer constants are 64-bit integers; decimal constants
// (1.5) and approximate constants (1.5E3) are float64, as Azure converts
// decimals to double. Application properties of every integer type compare
// as integers (a uint64 above the int64 range becomes a float64); float32
// and float64 as float64. Timestamps, durations, UUIDs and binaries compare
// only with their own kind.
//
// Three-valued logic: a missing property, or one whose value is null, is
// unknown; arithmetic, comparison, LIKE and IN over an unknown operand are
// unknown; NOT unknown is unknown; AND and OR follow SQL's truth tables. A
// rule matches only when its filter is true.
//
// Type mismatches: a comparison of values of incompatible kinds (a string
// with a number, a boolean with a number, a timestamp with a string) is
// unknown, as is LIKE on a value that is not a string. Arithmetic on a
// value that is not a number (other than string + string, which
// concatenates), an integer division or remainder by zero, AND/OR/NOT of a
// value that is not a boolean, and a reference through property() to an
// unknown system property are evaluation errors (ErrEvaluation): Azure
// raises a filter exception for these, and a subscription with
// DeadLetteringOnFilterEvaluationExceptions dead-letters the copy.
//
// Functions and parameters: newid() returns a fresh UUID (actions only);
// property(name) and its short form p(name) read the property a string
// names at run time ("sys.Label", "user.x" or "x"). @name is a parameter
// of the rule, bound when it compiles (SqlFilter.Parameters); a LIKE
// pattern or ESCAPE may be one.
//
// Strings compare ordinally (byte-wise on UTF-8, which is code-point order)
// and case-sensitively, for =, <> and the orderings; LIKE is case-sensitive.
//
// Limits: a filter or action text is at most MaxTextLength characters
// (Azure's 1024), and expressions nest at most MaxDepth levels deep, so that
// no text can exhaust the stack of the parser or the evaluator.
package filter
