package catalog

import "errors"

// Rejections: applying a command that breaks a rule leaves the catalog as it
// was and returns one of these (wrapped with details) in Result.Err. The
// service maps them to gRPC codes in one table.
var (
	ErrNameTaken          = errors.New("catalog: entity name taken")
	ErrNotFound           = errors.New("catalog: entity not found")
	ErrTooManyEntities    = errors.New("catalog: too many entities")
	ErrTooManyPartitioned = errors.New("catalog: too many partitioned entities")
	ErrInvalidName        = errors.New("catalog: invalid entity name")
	ErrInvalidProperties  = errors.New("catalog: invalid properties")
	ErrUnknownGroup       = errors.New("catalog: unknown group")
	ErrUnknownNode        = errors.New("catalog: unknown node")
	ErrConflict           = errors.New("catalog: catalog changed since the command was planned")
	ErrInvalidCommand     = errors.New("catalog: invalid command")
	ErrInvalidRule        = errors.New("catalog: invalid rule")
	ErrRuleNameTaken      = errors.New("catalog: rule name taken")
	ErrRuleNotFound       = errors.New("catalog: rule not found")
	ErrInvalidAuthRule    = errors.New("catalog: invalid authorization rule")
	ErrAuthRuleExists     = errors.New("catalog: authorization rule exists")
	ErrAuthRuleNotFound   = errors.New("catalog: authorization rule not found")
	ErrTooManyAuthRules   = errors.New("catalog: too many authorization rules")
)

// Failures: the entry cannot be applied at all, so the state machine stops
// (fail-stop) instead of diverging from the other members.
var (
	ErrUnknownFormat  = errors.New("catalog: unknown command format")
	ErrCorrupt        = errors.New("catalog: undecodable entry")
	ErrUnknownCommand = errors.New("catalog: unknown command")
	ErrStopped        = errors.New("catalog: state machine stopped after a failure")
)
